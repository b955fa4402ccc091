"""TorchScript fork/wait (1.6 beta): correctness and parallel scaling."""
