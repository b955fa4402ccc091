"""A planted slowdown, for the tests and measurements of `compare` and `ab` (never installed).

Put this folder first on PYTHONPATH and set RELEASE_BENCH_PLANT, e.g. "matmul=0.25,rpc_us=100":
every Python process of that environment, spawned workers included, then runs with

- matmul=F: torch's linear, conv and matmul calls (torch.nn.functional.linear/conv1d/2d/3d,
  torch.matmul/mm/bmm/addmm and the @ operator) taking F longer: each call is timed and
  followed by a busy-wait of F times its duration; where the output needs a gradient, its
  backward waits F times twice the forward's duration (a backward costs about two forwards);
- rpc_us=N: every rpc_sync, rpc_async and remote call N microseconds longer (a busy-wait
  before the call);
- fork_warns=1: eager torch.jit.fork raises a FutureWarning at each call, as a release that
  deprecates it would (for the matrix's tests);
- fork_threaded=1: eager torch.jit.fork runs its function on another thread, breaking the
  documented behaviour that the fork_wait suite's eager_fork_is_serial checks;
- exit_abort=P: the process aborts at exit with probability P (any process but `release-bench
  run`'s own), as torch's fork/wait does in some processes here: "terminate called without
  an active exception" on stderr, then SIGABRT (for the clean_exit cases' tests);
- exit_clean=1: a feature's minimal program (suites/<feature>/minimal.py, what the clean_exit
  cases run) ends with status 0 as soon as Python's exit handlers run, before the
  interpreter's shutdown where torch's fork/wait aborts: a planted fix of that defect (for the
  expectations' tests: an expected failure that passes);
- exit_status=N: a minimal program ends with status N at exit, with its own last words on
  stderr (a failure other than the known abort);
- remove=A+B: the torch APIs A and B (dotted names, e.g. torch.amp.GradScaler) are gone, as
  in a release that predates them (for the tests of `n/a` and of the release history);
- agent_abort=1: the same abort at exit, always, in the node agents of runs across hosts
  (harness.running.nodes) other than node 0's, as one did here once node 0's run had finished;
- off=A+B: the release features A and B turned off with their API left in place, as a broken
  build would have them (feature_off.py here: its FEATURES);
- defect=A+B: the defects A and B planted, each a promise of a feature or of the harness broken
  by a small step (defects.py here: its DEFECTS; scripts/power.py measures what the tests
  catch of them);
- cuda=FAMILY: a CUDA rehearsal on the CPU, on a GPU of cuda_rehearsal.py's GPUS ("H200"),
  for the worker processes of the rehearsal's tests;
- release=V: torch reports release V (`torch.__version__`), as an older release would, so
  that the cases declared for later releases are `n/a` (with remove=, for the tests of the
  release history).

TorchScript code (fork/wait) calls its ops without Python, so it is not slowed: those
metrics are the ones that must stay unflagged.
"""

import os
import time

_PLANT = os.environ.get("RELEASE_BENCH_PLANT", "")


def _spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def _slowed(fn, factor: float, op: str | None = None):
    import torch

    def slowed(*args, **kwargs):
        t0 = time.perf_counter()
        out = fn(*args, **kwargs)
        if isinstance(out, torch.Tensor) and out.is_cuda:
            torch.cuda.synchronize()
        elapsed = time.perf_counter() - t0
        _spin(factor * elapsed)
        if isinstance(out, torch.Tensor) and out.requires_grad:
            out.register_hook(lambda g: (_spin(2 * factor * elapsed), g)[1])
        return out

    slowed.__wrapped__ = fn
    if op is not None:
        # TorchScript compiles a call of torch.mm to the aten op: keep it doing so (scripted
        # code runs without Python, so it cannot be slowed this way anyway)
        torch.jit._builtins._register_builtin(slowed, op)
    return slowed


def _abort_at_exit(probability: float, only_other_agents: bool = False) -> None:
    import atexit
    import random
    import sys

    def abort() -> None:
        # at exit sys.argv names the module that ran, which it does not at start-up; the
        # run's own process (harness/cli.py) is left alone, so that its exit status is its own
        if sys.argv[0].endswith(os.path.join("harness", "cli.py")):
            return
        agent = os.path.join("harness", "running", "nodes.py")
        if only_other_agents and not (sys.argv[0].endswith(agent)
                                      and os.environ.get("RANK", "0") != "0"):
            return
        if random.random() < probability:
            sys.stderr.write("terminate called without an active exception\n")
            sys.stderr.flush()
            os.abort()

    atexit.register(abort)


def _exit_at_exit(status: int) -> None:
    import atexit
    import sys

    def leave() -> None:
        # at exit sys.argv names the module that ran, which it does not at start-up
        if not sys.argv[0].endswith("minimal.py"):
            return
        if status:
            sys.stderr.write(f"planted exit status {status}\n")
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)

    # registered first, so it runs last of the exit handlers (after torch's own)
    atexit.register(leave)


def _changed_fork(warns: bool, threaded: bool) -> None:
    import concurrent.futures
    import warnings

    import torch

    original = torch.jit.fork
    pool = concurrent.futures.ThreadPoolExecutor(1)

    def fork(fn, *args, **kwargs):
        if warns:
            warnings.warn("torch.jit.fork is deprecated (planted)", FutureWarning, stacklevel=2)
        if not threaded:
            return original(fn, *args, **kwargs)
        # run to completion on the pool's thread first: torch.jit.wait holds the GIL
        fut = torch.futures.Future()
        fut.set_result(pool.submit(fn, *args, **kwargs).result())
        return fut

    torch.jit.fork = fork


def _remove(dotted: str) -> None:
    import importlib

    parent, _, name = dotted.rpartition(".")
    delattr(importlib.import_module(parent), name)


def _release(version: str) -> None:
    import torch
    import torch.version

    torch.__version__ = torch.version.__version__ = torch.torch_version.TorchVersion(version)


def _plant(spec: str) -> None:
    opts = dict(kv.split("=") for kv in spec.split(",") if kv)
    if "release" in opts:
        _release(opts["release"])
    if "cuda" in opts:  # before "off": a feature turned off on the rehearsed GPU
        import cuda_rehearsal  # beside this file

        cuda_rehearsal.install(opts["cuda"])
    if "off" in opts:
        import feature_off  # beside this file

        feature_off.turn_off(opts["off"])
    if "defect" in opts:
        import defects  # beside this file

        defects.plant(opts["defect"])
    for dotted in filter(None, opts.get("remove", "").split("+")):
        _remove(dotted)
    if "exit_abort" in opts:
        _abort_at_exit(float(opts["exit_abort"]))
    if "exit_clean" in opts:
        _exit_at_exit(0)
    if "exit_status" in opts:
        _exit_at_exit(int(opts["exit_status"]))
    if "agent_abort" in opts:
        _abort_at_exit(1.0, only_other_agents=True)
    if "fork_warns" in opts or "fork_threaded" in opts:
        _changed_fork("fork_warns" in opts, "fork_threaded" in opts)
    if "matmul" not in opts and "rpc_us" not in opts:
        return
    import torch
    import torch.nn.functional as F

    if "matmul" in opts:
        f = float(opts["matmul"])
        for name in ("linear", "conv1d", "conv2d", "conv3d"):
            setattr(F, name, _slowed(getattr(F, name), f, f"aten::{name}"))
        for name in ("matmul", "mm", "bmm", "addmm"):
            setattr(torch, name, _slowed(getattr(torch, name), f, f"aten::{name}"))
        torch.Tensor.__matmul__ = _slowed(torch.Tensor.__matmul__, f)
        torch.Tensor.matmul = _slowed(torch.Tensor.matmul, f)
    if "rpc_us" in opts:
        from torch.distributed import rpc

        delay = float(opts["rpc_us"]) * 1e-6
        for name in ("rpc_sync", "rpc_async", "remote"):
            original = getattr(rpc, name)

            def delayed(*args, _original=original, **kwargs):
                _spin(delay)
                return _original(*args, **kwargs)

            setattr(rpc, name, delayed)


if _PLANT:
    _plant(_PLANT)
