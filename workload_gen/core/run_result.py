"""What a simulation run hands to the writers (formats/), the diff tools and sweeps.

Both network backends produce the same :class:`RunResult`. Units: seconds, bytes.
Categories used in breakdowns and traces (stable strings, also in summary.json):
compute kinds are the OpKind values; communication categories are the Group values
(tp, cp, ep, etp, dp, edp, pp, emb); plus "bubble", "optimizer", "idle".
"""
from __future__ import annotations

from dataclasses import field
from typing import Any

from workload_gen.core.record import record
from workload_gen.core.records import Group, Workload
from workload_gen.core.system import SystemConfig


@record
class Interval:
    """One busy period on one stream of one simulated rank."""

    stage: int
    rank: int
    stream: str
    """"compute", or a communication stream named for its group ("tp", "dp", "pp", ...)."""
    name: str
    layer: int
    phase: str
    microbatch: int
    """-1 for once-per-iteration work."""
    chunk: int
    start: float
    end: float
    category: str
    """OpKind value for compute, Group value for communication."""
    bytes: int = 0
    exposed_s: float = 0.0
    """Communication only: the part of it the compute stream waited for."""


@record
class Breakdown:
    """Where one rank's iteration time went; the parts sum to the iteration time."""

    compute_s: float
    exposed_comm_s: dict[str, float] = field(hash=False)
    """Exposed communication per group (tp, cp, ep, dp, pp, ...)."""
    bubble_s: float
    optimizer_s: float
    other_s: float = 0.0
    """Idle time not attributable to the pipeline bubble (waiting for other ranks)."""
    host_s: float = 0.0
    """Time the GPU waited for the host: for kernel launches after a host synchronisation (MoE
    token counts, 1F1B's batched p2p) or in a pass whose launch work exceeds its compute, and
    the optimizer step's fixed host work (``step_overhead``)."""

    def as_dict(self) -> dict[str, float]:
        """Flat parts in a fixed order (compute, exposed_<group> for every group, bubble,
        optimizer, host, other): summary.json's breakdown_s and the sweep table's columns."""
        out = {"compute": self.compute_s}
        for g in Group:
            out[f"exposed_{g.value}"] = float(self.exposed_comm_s.get(g.value, 0.0))
        out.update(bubble=self.bubble_s, optimizer=self.optimizer_s, host=self.host_s, other=self.other_s)
        return out


@record
class MemoryEstimate:
    """Peak memory of one rank of one stage, by part (bytes)."""

    stage: int
    weights: int
    gradients: int
    optimizer_states: int
    activations: int
    """Peak activations held (micro-batches in flight x per-micro-batch activations)."""
    temporary: int
    """Largest per-op temporary buffer (e.g. logits in the loss, gathered SP input)."""

    @property
    def allocated_peak(self) -> int:
        return self.weights + self.gradients + self.optimizer_states + self.activations + self.temporary

    reserved_factor: float = 1.06
    """Fragmentation allowance of the caching allocator, reserved / allocated."""

    @property
    def reserved_peak(self) -> int:
        return int(self.allocated_peak * self.reserved_factor)


@record
class RunResult:
    """What one simulated iteration produced, whichever backend ran it: the time, where it went
    per stage, memory per stage and (when asked for) the timeline. Output writers read only this."""
    workload: Workload
    system: SystemConfig
    backend: str
    """"analytical", "ns3" or "simai-accounting"."""
    iteration_time_s: float
    breakdown: Breakdown
    """Of the critical stage's representative rank: the bottleneck, i.e. the stage with the
    most work of its own (compute, exposed communication, optimizer); see extras['critical_stage']."""
    stage_breakdowns: tuple[Breakdown, ...]
    memory: tuple[MemoryEstimate, ...]
    intervals: tuple[Interval, ...]
    """The timeline; may be empty when the caller asked for no timeline (sweeps)."""
    extras: dict[str, Any] = field(default_factory=dict, hash=False)
    """Backend-specific figures (e.g. ns-3 wall time, flows simulated, compute coverage)."""

    @property
    def host_load(self) -> float | None:
        """The busiest stage's host launch seconds over its GPU seconds for a micro-batch
        (extras['host_load'], engine.host_launch.host_load); None without a host model (an
        ideal host, SimAI's accounting)."""
        got = self.extras.get("host_load")
        return got["load"] if got else None
