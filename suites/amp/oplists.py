"""PyTorch's own autocast expectations, run the way PyTorch's own tests run them.

`torch.testing._internal.autocast_test_lists` holds, per device, lists of (op, arguments)
that autocast must treat in a given way: `AutocastCPUTestLists` (test/test_autocast.py) and
`AutocastTestLists` (test/test_cuda.py). PyTorch asserts each entry with
`_run_autocast_outofplace`: inside an autocast region the op's output has the expected dtype
(for the `torch.*` function and the `Tensor.*` method alike, which must agree), and it equals,
bitwise, a control run outside autocast on inputs cast by hand to the dtype the op should run
in. This module does the same, entry by entry, and returns one plain row per entry.

Importing those lists imports `torch.testing._internal.common_utils`, which changes global
state (it freezes `torch.backends` flags and wraps TorchScript calls), so `run_lists` is meant
to run in a worker process of its own (see `cases.autocast_op_lists`).
"""

from __future__ import annotations

import collections.abc
import warnings
from dataclasses import dataclass, field
from typing import Any

import torch

from harness.cases import raised_in_torch

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16}
LIST_CLASSES = {"cpu": "AutocastCPUTestLists", "cuda": "AutocastTestLists"}


class ListsUnavailable(RuntimeError):
    """The installed torch does not provide the expectation lists (the case skips)."""


@dataclass
class OpCase:
    """One entry of one list, with what PyTorch's test expects of it."""

    list_name: str
    index: int
    op: str
    args: tuple = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    run_as: torch.dtype | None = None  # the dtype the control casts floating inputs to
    out_type: torch.dtype | None = None  # the dtype the output must have
    module: Any = None  # torch, torch._C._nn, torch._C._linalg, or None for Tensor methods
    expect_error: bool = False  # "banned" ops must raise under autocast
    skip: str = ""  # why this entry is not run (PyTorch's own test does not run it either)


def _module_for(list_name: str) -> Any:
    if list_name.startswith("methods_"):
        return None
    if list_name.startswith("nn_"):
        return torch._C._nn
    if list_name.startswith("linalg_"):
        return torch._C._linalg
    return torch


def _lower_precision(list_name: str) -> bool | None:
    """True for lists of ops autocast runs in its low-precision dtype, False for fp32 lists."""
    if list_name.endswith(("_16", "_fp16", "_bf16")):
        return True
    if list_name.endswith(("_fp32", "_promote")):
        return False
    return None


def parse(list_name: str, index: int, entry: tuple, amp_dtype: torch.dtype) -> OpCase:
    """An entry as PyTorch's test reads it; the layouts differ between lists and devices."""
    op = entry[0]
    case = OpCase(list_name, index, op, module=_module_for(list_name))
    if list_name == "banned":  # (op, args, module): must raise under autocast
        case.args, case.module, case.expect_error = entry[1], entry[2], True
        return case
    if list_name.endswith("expect_builtin_promote"):
        # CPU: (op, args for bfloat16, args for float16, out_type); CUDA: (op, args, out_type)
        args = entry[1] if len(entry) == 3 or amp_dtype == torch.bfloat16 else entry[2]
        case.args, case.run_as, case.out_type = args, torch.float32, entry[-1]
        return case
    if list_name == "torch_need_autocast_promote":
        # CPU: (op, args for bfloat16, args for float16); CUDA: (op, args)
        args = entry[1] if len(entry) == 2 or amp_dtype == torch.bfloat16 else entry[2]
        case.args, case.run_as, case.out_type = args, torch.float32, torch.float32
        return case
    low = _lower_precision(list_name)
    if low is None:
        case.skip = f"list {list_name!r} is not one this suite knows how to read"
        return case
    case.args = entry[1]
    case.run_as = amp_dtype if low else torch.float32
    extra = entry[2] if len(entry) > 2 else None
    if isinstance(extra, dict):
        case.kwargs = extra
    elif isinstance(extra, bool):  # TEST_WITH_ROCM: cudnn ops PyTorch skips on ROCm
        if extra:
            case.skip = "PyTorch's test skips this entry on ROCm"
    elif extra is not None or not isinstance(case.args, tuple):
        # e.g. ("einsum", equation, tensors): PyTorch's test reads the third element as its
        # skip flag, so it never runs this entry either.
        case.skip = "entry is not (op, args[, kwargs]); PyTorch's own test does not run it"
    case.out_type = case.run_as
    return case


def load_lists(device: str) -> tuple[str, Any]:
    """(class name, instance) of the expectation lists for `device`."""
    try:
        from torch.testing._internal import autocast_test_lists
    except Exception as e:  # ImportError without expecttest, or anything torch's test utils raise
        raise ListsUnavailable(
            f"torch.testing._internal.autocast_test_lists does not import here "
            f"({type(e).__name__}: {e})") from e
    name = LIST_CLASSES[torch.device(device).type]
    cls = getattr(autocast_test_lists, name, None)
    if cls is None:
        raise ListsUnavailable(f"this torch has no autocast_test_lists.{name}")
    return name, cls(torch.device(device))


def cases_of(lists: Any, amp_dtype: torch.dtype) -> list[OpCase]:
    out = []
    for list_name, entries in vars(lists).items():
        if isinstance(entries, list):
            out += [parse(list_name, i, tuple(e), amp_dtype) for i, e in enumerate(entries)]
    return out


def _cast(val: Any, dtype: torch.dtype) -> Any:
    """Floating tensors to `dtype`, inside any tuple or list; everything else as it is."""
    if isinstance(val, torch.Tensor):
        return val.to(dtype) if val.is_floating_point() else val
    if isinstance(val, (tuple, list)):
        return type(val)(_cast(v, dtype) for v in val)
    return val


def _bits_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.is_floating_point():
        as_int = {2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
        return torch.equal(a.contiguous().view(as_int), b.contiguous().view(as_int))
    return torch.equal(a, b)


def same(a: Any, b: Any) -> bool:
    """Bitwise equality of tensors (NaN payloads and signed zeros included), or of containers
    of them, or plain equality of anything else."""
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and _bits_equal(a, b)
    if isinstance(a, collections.abc.Sequence) and not isinstance(a, str):
        return (isinstance(b, collections.abc.Sequence) and len(a) == len(b)
                and all(same(x, y) for x, y in zip(a, b, strict=True)))
    return a == b


def _dtype_name(out: Any) -> str:
    """'bfloat16' for a bfloat16 tensor or the dtype itself; '(float16, float16)' for a pair."""
    if isinstance(out, torch.dtype):
        return str(out).removeprefix("torch.")
    if isinstance(out, torch.Tensor):
        return _dtype_name(out.dtype)
    if isinstance(out, (tuple, list)):
        return "(" + ", ".join(_dtype_name(o) for o in out) + ")"
    return type(out).__name__


def run_case(case: OpCase, device: str, amp_dtype: torch.dtype) -> dict[str, Any]:
    """Run one entry; returns a row: outcome pass | fail | skip, what came out, and why."""
    row = {"list": case.list_name, "index": case.index, "op": case.op,
           "expected": _dtype_name(case.out_type) if case.out_type else "",
           "got": "", "outcome": "pass", "detail": ""}
    if case.skip:
        return {**row, "outcome": "skip", "detail": case.skip}
    problems: list[str] = []
    try:
        if case.expect_error:
            _run_banned(case, device, amp_dtype, problems)
        else:
            row["got"] = _run_outofplace(case, device, amp_dtype, problems)
    except Exception as e:  # an op that raises is this entry's failure, not the case's error
        problems.append(f"raised {type(e).__name__}: {str(e).splitlines()[0][:200]}")
        row["raised"] = True
    if problems:
        row.update(outcome="fail", detail="; ".join(problems))
    return row


def _run_banned(case: OpCase, device: str, amp_dtype: torch.dtype, problems: list[str]) -> None:
    with torch.autocast(device_type=device, dtype=amp_dtype):
        try:
            getattr(case.module, case.op)(*case.args)
        except RuntimeError:
            return
    problems.append("ran under autocast; documented to raise (unsafe to autocast)")


def _autocast_on(device: str) -> bool:
    """torch.is_autocast_enabled(device); before torch 2.4 it took no device (CUDA's), and the
    CPU's had a function of its own."""
    try:
        return torch.is_autocast_enabled(device)
    except TypeError:
        return (torch.is_autocast_cpu_enabled() if device == "cpu"
                else torch.is_autocast_enabled())


RAISES = "raises "  # how autocast_refuses begins when torch raised


def autocast_refuses(device: str, dtype: torch.dtype) -> str | None:
    """What this torch's autocast does instead of taking `dtype` on `device` (raises, or warns
    and disables itself, or stays off without a word), or None when it engages. Older
    releases' CPU autocast took bfloat16 only: the cases declare that (`Since`); anywhere
    else, a refusal is a broken autocast."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            with torch.autocast(device, dtype=dtype):
                if _autocast_on(device):
                    return None
        except Exception as e:  # torch's refusal, whatever its type; the harness's own bug
            if raised_in_torch(e) is None:  # is not one
                raise
            return f"{RAISES}{type(e).__name__}: {str(e).splitlines()[0]}"
    if caught:
        return f"warns {str(caught[0].message).splitlines()[0]!r} and stays disabled"
    return "stays disabled, without an error or a warning"


def _run_outofplace(case: OpCase, device: str, amp_dtype: torch.dtype,
                    problems: list[str]) -> str:
    """PyTorch's `_run_autocast_outofplace`, recording problems instead of asserting."""
    module, op, args, kw = case.module, case.op, case.args, case.kwargs
    if _autocast_on(device):
        problems.append("autocast already enabled before the region")
    with torch.autocast(device_type=device, dtype=amp_dtype):
        if not _autocast_on(device):
            problems.append("autocast not enabled inside the region")
        output = output_method = None
        if module is not None and hasattr(module, op):
            output = getattr(module, op)(*args, **kw)
            if isinstance(output, torch.Tensor) and output.dtype != case.out_type:
                problems.append(f"{_where(module)}.{op} gave {_dtype_name(output)}")
        if hasattr(torch.Tensor, op):
            output_method = getattr(args[0], op)(*args[1:], **kw)
            if isinstance(output_method, torch.Tensor) and output_method.dtype != case.out_type:
                problems.append(f"Tensor.{op} gave {_dtype_name(output_method)}")
        if output is None and output_method is None:
            problems.append(f"{op} is neither in {_where(module)} nor a Tensor method")
            return ""
        if output is not None and output_method is not None and not (
                type(output) is type(output_method) and same(output, output_method)):
            problems.append(f"{_where(module)}.{op} and Tensor.{op} disagree")
        result = output if output is not None else output_method
        with torch.autocast(device_type=device, enabled=False):
            if _autocast_on(device):
                problems.append("autocast not disabled for the control")
            if module is not None and hasattr(module, op):
                control = getattr(module, op)(*_cast(args, case.run_as), **kw)
            else:
                control = getattr(args[0].to(case.run_as), op)(*_cast(args[1:], case.run_as),
                                                                **kw)
        if not (type(result) is type(control) and same(result, control)):
            problems.append(f"differs from the control run on inputs cast to "
                            f"{_dtype_name(case.run_as)} ({_difference(result, control)})")
    if _autocast_on(device):
        problems.append("autocast still enabled after the region")
    return _dtype_name(result)


def _where(module: Any) -> str:
    return {torch: "torch"}.get(module, getattr(module, "__name__", str(module)))


def _difference(a: Any, b: Any) -> str:
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        if a.dtype != b.dtype or a.shape != b.shape:
            return f"{_dtype_name(a)}{tuple(a.shape)} vs {_dtype_name(b)}{tuple(b.shape)}"
        if a.is_floating_point():
            diff = (a.double() - b.double()).abs().nan_to_num(nan=float("inf")).max().item()
            return f"max abs difference {diff:.3g}"
        return "values differ"
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        if _dtype_name(a) != _dtype_name(b):  # a length too: each element is named
            return f"{_dtype_name(a)} vs {_dtype_name(b)}"
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            if not same(x, y):
                return f"element {i}: {_difference(x, y)}"
        # equal elements: a tuple against a list
    if type(a) is not type(b):
        return f"{type(a).__name__} vs {type(b).__name__}"
    return f"{a!r} vs {b!r}"


def run_lists(rank: int, world: int, device: str, dtype_name: str) -> dict[str, Any]:
    """Worker body: every entry of the device's lists under autocast to `dtype_name`.

    Returns {"class": ..., "rows": [...]} or {"unavailable": reason}.
    """
    amp_dtype = DTYPES[dtype_name]
    try:
        name, lists = load_lists(device)
    except ListsUnavailable as e:
        return {"unavailable": str(e)}
    torch.manual_seed(0)
    torch.set_num_threads(1)  # 8x8 operands: threads only add spinning on a busy host
    cases = cases_of(lists, amp_dtype)
    if torch.device(device).type == "cuda":
        # As test_cuda.py does: deterministic cuDNN, so that autocast and control runs of a
        # convolution pick the same algorithm and can be compared bitwise.
        with torch.backends.cudnn.flags(enabled=True, deterministic=True):
            rows = [run_case(c, device, amp_dtype) for c in cases]  # gpu-only: CUDA autocast
    else:
        rows = [run_case(c, device, amp_dtype) for c in cases]
    return {"class": name, "rows": rows}
