"""The DDP+RPC suite's minimal program, for its `clean_exit` case: one hybrid training step
(DDP inside the model, the embedding behind RPC on the parameter server), then RPC's graceful
shutdown and `destroy_process_group`, through the suite's own worker. Each of the three ranks
runs `python -m suites.ddp_rpc.minimal` with RANK, WORLD_SIZE and the rendezvous in its
environment, as torchrun sets them.
"""

from __future__ import annotations

import os

from suites.ddp_rpc import workers
from suites.ddp_rpc.model import Optim, Shape, initial_parameters, make_batches


def main() -> None:
    shape = Shape()
    spec = workers.Spec(task="train", mode="inside", device="cpu", shape=shape, optim=Optim(),
                        init=initial_parameters(shape), batches=make_batches(shape, steps=1))
    workers.hybrid_worker(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), spec)


if __name__ == "__main__":
    main()
