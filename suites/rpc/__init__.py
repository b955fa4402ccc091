"""TensorPipe RPC backend and RPC async user functions (1.6 beta): latency and conformance."""
