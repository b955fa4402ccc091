"""The RPC suite's minimal program, for its `clean_exit` case: `init_rpc`, one `rpc_sync`,
then a graceful `shutdown()`. Every rank runs `python -m suites.rpc.minimal` with RANK,
WORLD_SIZE and the rendezvous (MASTER_ADDR, MASTER_PORT) in its environment, as torchrun
sets them; TensorPipe's default `env://` rendezvous reads them.
"""

from __future__ import annotations

import os

import torch
from torch.distributed import rpc


def main() -> None:
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    rpc.init_rpc(f"worker{rank}", rank=rank, world_size=world)
    if rank == 0:
        out = rpc.rpc_sync(f"worker{world - 1}", torch.add, args=(torch.ones(2), 1))
        callee = rpc.rpc_sync(f"worker{world - 1}", os.getpid)
    rpc.shutdown()  # graceful: waits until every worker is done
    if rank == 0:
        assert out.tolist() == [2.0, 2.0], out
        # the program must exercise RPC: a call that never left this process proves nothing
        assert callee != os.getpid(), "rpc_sync ran in the caller's process"


if __name__ == "__main__":
    main()
