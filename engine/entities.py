"""The simulated entities: collective instances, communicators, ranks.

Kept apart from :mod:`engine.sim`, which builds them from a Workload and runs them
(STYLE.md section 1). Plain slotted classes: they are created per event and mutated as
the simulation runs.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from engine.program import PassSpec, StagePlan
from engine.schedules import Step
from workload_gen.records import CollectiveOp, Group

GROUP_NAMES = tuple(g.value for g in Group)
INF = float("inf")


class Future:
    """One collective instance or one pipeline transfer, from issue to completion."""

    __slots__ = ("seq", "group", "op", "ranks", "left", "ready", "ready_stage", "start", "end",
                 "waiters", "exposed", "comm")

    def __init__(self, seq: int, group: str, op: CollectiveOp | None, ranks: tuple[int, ...], left: int) -> None:
        self.seq = seq
        self.group = group
        self.op = op
        self.ranks = ranks
        self.left = left
        """Simulated members that have not issued it yet."""
        self.ready: float | None = None
        """When the last simulated member issued it (the sender's pass end for PP)."""
        self.ready_stage = -1
        self.start: float | None = None
        self.end: float | None = None
        self.waiters: list[RankState] = []
        self.exposed: dict[int, float] = {}
        self.comm: Comm | None = None


class Comm:
    """A communicator (NCCL stream of one group): runs its collectives in issue order."""

    __slots__ = ("queue", "busy")

    def __init__(self) -> None:
        self.queue: deque[Future] = deque()
        self.busy: Future | None = None


@dataclass(slots=True)
class Accounts:
    compute: float = 0.0
    optimizer: float = 0.0
    bubble: float = 0.0
    other: float = 0.0
    exposed: dict[str, float] = field(default_factory=lambda: dict.fromkeys(GROUP_NAMES, 0.0))


class RankState:
    __slots__ = ("rank", "stage", "plan", "steps", "step_idx", "step", "spec", "op_idx", "in_tail",
                 "outstanding", "wait", "wait_start", "gathers", "gwait", "buckets", "bucket_at",
                 "last_bwd", "groups", "seqs", "acc", "recs", "end", "done", "tail_spec", "wait_key", "due",
                 "gathered")

    def __init__(self, rank: int, stage: int, plan: StagePlan, steps: tuple[Step, ...]) -> None:
        self.rank, self.stage, self.plan, self.steps = rank, stage, plan, steps
        self.step_idx = 0
        self.step: Step | None = None
        self.spec: PassSpec | None = None
        self.op_idx = 0
        self.in_tail = False
        self.outstanding: list[tuple[int, Future]] = []
        """Overlapped collectives in flight, with the op index each must end before."""
        self.due = INF
        """The smallest of those op indices."""
        self.wait: list[Future] | None = None
        self.wait_start = 0.0
        self.gathers: list[tuple[int, Future]] = []
        self.gwait = False
        self.gathered = -2
        """Highest layer whose overlapped parameter gathers are known to have ended."""
        self.buckets: list[Future] = []
        self.bucket_at: dict[tuple[int, int], list[CollectiveOp]] = {}
        self.last_bwd = False
        self.groups: dict[Group, tuple[Comm, tuple[int, ...], int]] = {}
        self.seqs: dict[int, int] = {}
        self.acc = Accounts()
        self.recs: list = []
        self.end = 0.0
        self.done = False
        self.tail_spec = PassSpec(stage, -1, True, plan.tail, None, (), False)
        self.wait_key: tuple | None = None
        """The pipeline input this rank has posted a receive for."""
