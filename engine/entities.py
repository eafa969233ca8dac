"""The simulated entities: collective instances, communicators, ranks.

Kept apart from :mod:`engine.sim`, which builds them from a Workload and runs them
(STYLE.md section 1). Plain slotted classes: they are created per event and mutated as
the simulation runs (and a dataclass costs about ten times as much to define at import,
which every run-analytical process pays).

A rank's state is split by concern into small records, so that each part of the engine
reads the one it needs: where the rank is in its program (:class:`Cursor`), what its
compute stream is blocked on (:class:`Blocked`), the overlapped collectives of the
running pass (:class:`Overlapped`), the parameter all-gathers (:class:`ParamGathers`)
and the gradient buckets (:class:`GradBuckets`). The engine binds these records to
locals in its hot paths; they are never replaced, only mutated.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from engine.host_launch import HostPlan
from engine.program import PassSpec, StagePlan
from engine.schedules import Step
from workload_gen.core.records import CollectiveOp, Group

GROUP_NAMES = tuple(g.value for g in Group)
INF = float("inf")

MEMOISED_PASS = -1
"""``Cursor.op_index`` while a memoised pass is in flight as one event."""


class Future:
    """One collective instance or one pipeline transfer, from issue to completion.

    A collective instance is shared by the simulated members of its communicator: the
    k-th collective each of them issues there is the same instance. A pipeline transfer
    has two parties, the sender (at its pass end) and the receiver (when it posts the
    receive). It is *ready* when every party has joined, starts when its communicator
    is free, and ends when the network says so.
    """

    __slots__ = ("seq", "group", "op", "ranks", "missing", "ready_time", "ready_stage", "start", "end",
                 "waiters", "exposed_by_rank", "comm", "joined", "host_gated")

    def __init__(self, seq: int, group: str, op: CollectiveOp | None, ranks: tuple[int, ...], missing: int) -> None:
        self.seq = seq
        """Creation order: among futures ending at the same time, the later one takes a wait."""
        self.group = group
        """The group's name (``Group.value``): the key of the exposed-communication account."""
        self.op = op
        self.ranks = ranks
        """Every member (world ranks), as the network backend sees the transfer."""
        self.missing = missing
        """Simulated parties that have not joined yet."""
        self.ready_time: float | None = None
        """When the last simulated party joined (the sender's pass end for PP)."""
        self.ready_stage = -1
        """The stage of that last party: waiting for another stage is pipeline bubble."""
        self.start: float | None = None
        self.end: float | None = None
        self.waiters: list[RankState] = []
        """Ranks blocked on this future, re-run when it ends."""
        self.exposed_by_rank: dict[int, float] = {}
        """Seconds each rank's compute stream waited on it (the timeline's exposed_s)."""
        self.comm: Comm | None = None
        """The communicator it runs on; None for a pipeline dependency with nothing on the wire."""
        self.joined: list[RankState] | None = None
        """Simulated members that issued it, kept only when compute is slowed beside
        collectives (their ``comm_busy`` drops when it ends)."""
        self.host_gated = False
        """Issued when the host launched it, after the rank reached it (EV_HOST_ISSUE): a wait
        before it was ready is the host's, not skew (engine.waits.unblock)."""


class Comm:
    """A communicator (NCCL stream of one group): runs its collectives in issue order."""

    __slots__ = ("queue", "running")

    def __init__(self) -> None:
        self.queue: deque[Future] = deque()
        """Issued, not started, in issue order; the head starts once it is ready."""
        self.running: Future | None = None


class Membership:
    """A rank's view of one of its groups, resolved on first use; read-only."""

    __slots__ = ("comm", "members", "simulated")

    def __init__(self, comm: Comm, members: tuple[int, ...], simulated: int) -> None:
        self.comm = comm
        self.members = members
        """Every rank of the group (world ranks, including those not simulated)."""
        self.simulated = simulated
        """How many members are simulated: the parties a collective instance waits for."""


@dataclass(slots=True)
class Accounts:
    """Where a rank's compute-stream time went (seconds), summed as the run goes."""

    compute: float = 0.0
    optimizer: float = 0.0
    bubble: float = 0.0
    other: float = 0.0
    exposed: dict[str, float] = field(default_factory=lambda: dict.fromkeys(GROUP_NAMES, 0.0))
    slowdown: float = 0.0
    """Of ``compute`` + ``optimizer``, the seconds added by collectives running beside
    compute (Workload.overlap_slowdown)."""
    host: float = 0.0
    """Seconds the compute stream waited for the host to launch its next op (engine.host_launch)."""


ReceiveKey = tuple[int, bool, int, int]
"""A pipeline transfer's key: (receiving rank, forward, receiving virtual stage, micro-batch)."""


class Cursor:
    """Where a rank is in its program: the stage's schedule of passes, then the tail.

    ``spec`` is the pass (or tail) being run, None between passes; ``op_index`` the next op
    of it to run, or :data:`MEMOISED_PASS` while a memoised pass is one event in flight.
    """

    __slots__ = ("next_step", "step", "spec", "op_index", "in_tail", "posted")

    def __init__(self) -> None:
        self.next_step = 0
        """Index in ``RankState.steps`` of the next pass to begin."""
        self.step: Step | None = None
        """The schedule step being run; None in the tail."""
        self.spec: PassSpec | None = None
        self.op_index = 0
        self.in_tail = False
        self.posted: set[ReceiveKey] = set()
        """Pipeline inputs this rank has posted a receive for and not yet consumed (each is
        posted once; with interleaved prefetch up to one per direction is ahead)."""


class Blocked:
    """What the rank's compute stream waits for; the wait is charged when it ends."""

    __slots__ = ("futures", "since")

    def __init__(self) -> None:
        self.futures: list[Future] | None = None
        """None: not blocked."""
        self.since = 0.0


class Overlapped:
    """Overlappable collectives the running pass has issued and not yet waited for."""

    __slots__ = ("pending", "next_deadline")

    def __init__(self) -> None:
        self.pending: list[tuple[int, Future]] = []
        """(deadline, future): the future must end before the op at index ``deadline`` starts."""
        self.next_deadline: float = INF
        """The smallest of those deadlines (INF: nothing pending), checked before every op."""


class ParamGathers:
    """Parameter all-gathers issued at iteration start (``overlap_param_gather``).

    Each chunk's first forward (micro-batch 0) waits, before each layer's compute, for
    the gathers of every layer up to it; later passes do not.
    """

    __slots__ = ("issued", "gate_this_pass", "done_through_layer", "in_tail")

    def __init__(self) -> None:
        self.issued: list[tuple[int, Future]] = []
        """(layer, all-gather), in dispatch order."""
        self.in_tail: list[Future] | None = None
        """The gathers issued beside the optimizer step (overlap_param_gather_with_optimizer_step),
        once the tail has begun; the iteration ends when they have."""
        self.gate_this_pass = False
        """The running pass is a first forward and there are gathers to wait for."""
        self.done_through_layer = -2
        """Highest layer whose gathers are known to have ended."""


class GradBuckets:
    """DP/EDP gradient buckets: issued as their layers' gradients become final."""

    __slots__ = ("by_ready_point", "issued", "release_this_pass")

    def __init__(self) -> None:
        self.by_ready_point: dict[tuple[int, int], list[CollectiveOp]] = {}
        """(chunk, backward op index) -> buckets ready after that op of the last
        micro-batch's backward (``overlap_grad_reduce``); empty without it."""
        self.issued: list[Future] = []
        """Every bucket issued so far; the tail waits for all of them (finish_grad_sync)."""
        self.release_this_pass = False
        """The running pass is a last-micro-batch backward, whose ops release buckets."""


class RankState:
    """One simulated rank: its stage's plan and schedule, and where it is in them."""

    __slots__ = ("rank", "stage", "plan", "steps", "tail_spec", "cursor", "blocked", "overlapped", "gathers",
                 "grads", "groups", "issued_on", "acc", "records", "end", "done", "comm_busy", "flex_busy",
                 "cpu", "host", "launched")

    def __init__(self, rank: int, stage: int, plan: StagePlan, steps: tuple[Step, ...]) -> None:
        self.rank, self.stage, self.plan, self.steps = rank, stage, plan, steps
        self.tail_spec: PassSpec | None = PassSpec(stage, -1, True, plan.tail, None, (), False)
        """The once-per-iteration ops, run as one blocking pass after the schedule."""
        self.cursor = Cursor()
        self.blocked = Blocked()
        self.overlapped = Overlapped()
        self.gathers = ParamGathers()
        self.grads = GradBuckets()
        self.groups: dict[Group, Membership] = {}
        self.issued_on: dict[int, int] = {}
        """id(communicator) -> collectives this rank has issued on it (matches instances)."""
        self.acc = Accounts()
        self.records: list = []
        """Timeline records (engine.timeline), when the run keeps a timeline."""
        self.end = 0.0
        """When the rank finished its tail."""
        self.done = False
        self.comm_busy = 0
        """Collectives this rank has issued that have not ended (counted only when the
        workload has an overlap slow-down): a compute op that starts while it is > 0 runs slower."""
        self.flex_busy = 0
        """Of those, the flex dispatcher's kernels (their own, larger slow-down: engine.sim)."""
        self.cpu = 0.0
        """The host's clock: when it has launched the op before the next (engine.host_launch)."""
        self.host: HostPlan | None = None
        """The running pass's host plan (HostModel.plan), None in the tail or without a host model."""
        self.launched = -1
        """Index, in the running pass, of the collective whose host launch has been paid while
        the GPU waited for it (EV_LAUNCHED resumes the rank there); -1: none."""
