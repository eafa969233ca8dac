"""What a PyTorch profiler (Kineto) trace reads into: per rank, its profiler steps and ops.

The records only; :func:`formats.kineto.read_kineto` builds them (see that module for what
each op is and how it is classified and put on a layer). Kept apart so that the readers of
the records (the trace diff, trace import, the timeline) depend on what a trace holds, not
on how it is parsed. Units: seconds (relative to the start of the rank's first profiled
step), bytes.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import field, fields
from operator import attrgetter

from workload_gen.core.errors import FormatError
from workload_gen.core.record import record


@record
class TraceOp:
    """One measured unit of work on one rank."""

    rank: int
    name: str
    """Kernel name (GPU) or op name (CPU)."""
    category: str
    """OpKind value, ``comm`` or ``other``."""
    coll: str
    """CollKind value for ``comm``, else ''."""
    group: str
    """Parallel group of a collective when the trace says (tp, dp, ...), else ''."""
    layer: int | None
    """-1 embedding, 0..L-1 transformer layers, L head; None when the trace does not say."""
    phase: str
    """fwd / bwd-input / bwd-weight (GEMMs whose role is known) / bwd / iter."""
    step: int
    """ProfilerStep number, -1 outside any step."""
    start: float
    end: float
    stream: str
    """``cpu`` or ``gpu<device>:<stream>``."""
    input_dims: tuple[tuple[int, ...], ...] = ()
    """Input shapes recorded with record_shapes=True (of the CPU op; of the launching op for kernels)."""
    dtype: str = ""
    bytes: int = 0
    """Collectives: NCCL-convention buffer size."""
    group_size: int = 0
    cpu_op: str = ""
    """For kernels: the classified CPU op that launched them (e.g. ``aten::addmm``)."""
    concrete: tuple[str, ...] = ()
    """Scalar arguments as recorded (``Concrete Inputs``), e.g. SDPA's is_causal."""
    fwd_input_dims: tuple[tuple[int, ...], ...] = ()
    """Backward ops: the input shapes of the forward op they differentiate (autograd
    sequence number), since a backward node records only its gradient's shape."""
    fwd_concrete: tuple[str, ...] = ()

    @property
    def dur(self) -> float:
        return self.end - self.start

    def moved(self, dt: float) -> TraceOp:
        """This op ``dt`` seconds earlier, every other field as it is.

        WHY not ``dataclasses.replace``: it looks every field up by name and was a tenth of
        the Kineto reader's time when each op was moved to its step's time origin."""
        values = list(_OP_VALUES(self))
        values[_START] -= dt
        values[_END] -= dt
        return TraceOp(*values)


_OP_FIELDS = tuple(f.name for f in fields(TraceOp))
_OP_VALUES = attrgetter(*_OP_FIELDS)
_START, _END = _OP_FIELDS.index("start"), _OP_FIELDS.index("end")


@record
class Step:
    number: int
    start: float
    end: float

    @property
    def dur(self) -> float:
        return self.end - self.start


@record
class RankTrace:
    rank: int
    path: str
    device: str
    """``gpu`` when the trace holds kernels, else ``cpu``."""
    steps: tuple[Step, ...]
    ops: tuple[TraceOp, ...]
    num_layers: int | None
    """Transformer layers seen in labels (max index + 1), None if unlabeled."""
    meta: dict[str, object] = field(default_factory=dict, compare=False)

    def step_ops(self, number: int) -> list[TraceOp]:
        return [o for o in self.ops if o.step == number]

    @property
    def step_time_s(self) -> float:
        """Median duration of the profiled steps (the measured iteration time)."""
        return self.median_step.dur

    @property
    def median_step(self) -> Step:
        """The profiled step of median duration (ties by step number)."""
        return self.median_of(None)

    def median_of(self, numbers: Iterable[int] | None) -> Step:
        """The step of median duration among the ProfilerStep ``numbers`` (all when None;
        ties by step number). Restricting the candidates lets one run serve as both
        calibration (some steps) and check (the others): on a shared CPU two runs of one
        script differ more than the model errs, two halves of one run do not."""
        if not self.steps:
            raise FormatError(self.path, None, "no ProfilerStep#N ranges; profile with torch.profiler.schedule "
                              "and call prof.step() once per iteration")
        pool = self.steps if numbers is None else self.pick_steps(numbers)
        durs = sorted(pool, key=lambda s: (s.dur, s.number))
        return durs[len(durs) // 2]

    def pick_steps(self, numbers: Iterable[int]) -> tuple[Step, ...]:
        """The steps with these ProfilerStep numbers; one clear error naming any absent."""
        wanted = set(numbers)
        have = {s.number for s in self.steps}
        if missing := sorted(wanted - have):
            raise FormatError(self.path, None, f"step {', '.join(map(str, missing))} not in trace (rank {self.rank}); "
                              f"steps: {', '.join(str(s.number) for s in self.steps) or 'none'}")
        return tuple(s for s in self.steps if s.number in wanted)


@record
class KinetoTrace:
    ranks: tuple[RankTrace, ...]

    def rank(self, r: int) -> RankTrace:
        for rt in self.ranks:
            if rt.rank == r:
                return rt
        raise FormatError(str(self.ranks[0].path if self.ranks else ""), None,
                          f"rank {r} not in trace; ranks: {', '.join(str(x.rank) for x in self.ranks)}")

    @property
    def step_time_s(self) -> float:
        """A synchronous step lasts as long as its slowest rank."""
        return max(r.step_time_s for r in self.ranks)
