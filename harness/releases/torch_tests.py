"""PyTorch's own tests of the release's features, as the wheel ships them
(`torch/testing/_internal`), made runnable the way PyTorch's test files make them; the second
judge of `release-bench mutants`.

- RPC, distributed autograd, the distributed optimizer and DDP under distributed autograd:
  the generic test suites of `rpc_utils`, each mixed with the TensorPipe agent's fixture and
  the spawning helper by `rpc_utils.generate_tests`, as PyTorch's
  test/distributed/rpc/test_tensorpipe_agent.py does (each test spawns its world of 4
  processes; spawn finds the classes in this module by name).
- autocast on the CPU: the shipped `TestAutocast` base class and its
  `_run_autocast_outofplace` over each list of `AutocastCPUTestLists`, in bfloat16 and in
  float16, as PyTorch's test/test_autocast.py drives them.

A test is named `group:Class.method`.

    python -m harness.releases.torch_tests --list GROUP... [--to FILE]
    python -m harness.releases.torch_tests --run group:Class.method

`--run` exits 0 when the test passed (printing SKIPPED when it was skipped), 1 otherwise,
with unittest's report (the traceback of a worker process included) on stderr.
"""

from __future__ import annotations

import argparse
import sys
import unittest
from pathlib import Path

import torch
from torch.testing._internal.autocast_test_lists import AutocastCPUTestLists, TestAutocast
from torch.testing._internal.distributed import rpc_utils
from torch.testing._internal.distributed.rpc.tensorpipe_rpc_agent_test_fixture import (
    TensorPipeRpcAgentTestFixture,
)

# the generic suites (and the TensorPipe-only ones) each group instantiates
GROUPS: dict[str, tuple[type, ...]] = {
    "rpc": (rpc_utils.RpcTest, rpc_utils.TensorPipeAgentRpcTest),
    "dist_autograd": (rpc_utils.DistAutogradTest, rpc_utils.TensorPipeAgentDistAutogradTest),
    "dist_optimizer": (rpc_utils.DistOptimizerTest,),
    "ddp": (rpc_utils.DdpUnderDistAutogradTest, rpc_utils.DdpComparisonTest),
}
PREFIX = "TensorPipe"

globals().update(rpc_utils.generate_tests(
    PREFIX, TensorPipeRpcAgentTestFixture, [c for cs in GROUPS.values() for c in cs], __name__))


class AutocastCPU(TestAutocast):
    """Each CPU list through the shipped comparison: the op's output dtype, and its values
    against the op run on inputs cast by hand, in bfloat16 and in float16."""

    def setUp(self):
        super().setUp()
        self.lists = AutocastCPUTestLists(torch.device("cpu"))

    def _both(self, op_with_args, run_as, module=torch, out_type=None):
        op, args, kwargs = self.args_maybe_kwargs(op_with_args)
        for amp in (torch.bfloat16, torch.float16):
            # the ops that autocast lowers run in the autocast dtype itself
            want = amp if run_as is None else run_as
            self._run_autocast_outofplace(op, args, want, "cpu", out_type=out_type,
                                          module=module, add_kwargs=kwargs, amp_dtype=amp)

    def _promoting(self, entries, module):
        for op, args_bf16, args_fp16, out_type in entries:
            self._run_autocast_outofplace(op, args_bf16, torch.float32, "cpu",
                                          out_type=out_type, module=module)
            self._run_autocast_outofplace(op, args_fp16, torch.float32, "cpu",
                                          out_type=out_type, module=module,
                                          amp_dtype=torch.float16)

    def test_torch_expect_builtin_promote(self):
        self._promoting(self.lists.torch_expect_builtin_promote, torch)

    def test_methods_expect_builtin_promote(self):
        self._promoting(self.lists.methods_expect_builtin_promote, None)

    def test_torch_16(self):
        for entry in self.lists.torch_16:
            self._both(entry, None)

    def test_nn_16(self):
        for entry in self.lists.nn_16:
            self._both(entry, None, module=torch._C._nn)

    def test_torch_fp32(self):
        for entry in self.lists.torch_fp32:
            self._both(entry, torch.float32)

    def test_nn_fp32(self):
        for entry in self.lists.nn_fp32:
            self._both(entry, torch.float32, module=torch._C._nn)

    def test_torch_need_autocast_promote(self):
        for op, args_bf16, args_fp16 in self.lists.torch_need_autocast_promote:
            self._run_autocast_outofplace(op, args_bf16, torch.float32, "cpu")
            self._run_autocast_outofplace(op, args_fp16, torch.float32, "cpu",
                                          amp_dtype=torch.float16)


def classes(group: str) -> list[type]:
    if group == "autocast":
        return [AutocastCPU]
    if group not in GROUPS:
        raise SystemExit(f"unknown group {group!r} (groups: autocast, {', '.join(GROUPS)})")
    return [globals()[f"{PREFIX}{c.__name__}"] for c in GROUPS[group]]


def names(group: str) -> list[str]:
    loader = unittest.TestLoader()
    return [f"{group}:{cls.__name__}.{m}" for cls in classes(group)
            for m in loader.getTestCaseNames(cls)]


def run(test: str) -> int:
    group, _, dotted = test.partition(":")
    cls_name, _, method = dotted.partition(".")
    cls = next((c for c in classes(group) if c.__name__ == cls_name), None)
    if cls is None or not method:
        print(f"no test {test!r}", file=sys.stderr)
        return 2
    result = unittest.TextTestRunner(stream=sys.stderr, verbosity=2).run(cls(method))
    for _, why in result.skipped:
        print(f"SKIPPED: {why}")
    return 0 if result.wasSuccessful() else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--list", nargs="+", metavar="GROUP")
    parser.add_argument("--to", metavar="FILE", help="write the list here (default: stdout)")
    parser.add_argument("--run", metavar="TEST")
    args = parser.parse_args(argv)
    if args.list:
        text = "".join(f"{n}\n" for g in args.list for n in names(g))
        if args.to:
            Path(args.to).write_text(text)
        else:
            sys.stdout.write(text)
        return 0
    if args.run:
        return run(args.run)
    parser.error("--list or --run")
    return 2


if __name__ == "__main__":
    sys.exit(main())
