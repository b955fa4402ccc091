"""The DDP+RPC suite's report figures: the hybrid against its reference, and where a step's
time goes."""

from __future__ import annotations

from harness.cases import param_id
from harness.presenting.figures import Figure, metrics, table, value, with_interval
from harness.records import Result
from suites.ddp_rpc.cases import suite

PHASES = ("forward_time", "backward_time", "optimizer_time", "step_time", "local_step_time",
          "rpc_embedding_forward", "allreduce_dense_grads")


@suite.figure
def matches_reference(entries: list[Result]) -> Figure | None:
    """Each variant's largest difference from the single-process reference, and whether its
    checks held."""
    rows = [{"variant (DDP)": e.params.get("ddp", param_id(e.params)),
             "device": e.device,
             "max abs diff": value(e, "max_abs_diff"),
             "max rel diff": value(e, "max_rel_diff"),
             "steps": value(e, "steps"), "outcome": e.outcome}
            for e in entries if e.case == "matches_reference"]
    return table("Parameters after training against the single-process reference",
                 rows) if rows else None


@suite.figure
def step_time(entries: list[Result]) -> Figure | None:
    """Each phase of a hybrid step (ms, with its interval)."""
    rows = []
    for e in entries:
        if e.case != "step_time":
            continue
        for name in PHASES:
            for m in metrics(e, name):
                rows.append({"ddp": e.params.get("ddp"), "phase": name,
                             "ms [interval]": with_interval(m, 1e3)})
    return table("Where a hybrid training step goes", rows) if rows else None
