"""Communicators and the collective instances on them, from issue to completion.

Part of the event simulation of :mod:`engine.sim`, kept apart because it is the engine's
side of the network: which instance a rank joins, when an instance starts, and how long
it takes is all it decides; it never runs a rank (the simulator wakes the ranks that
waited, see :meth:`Communicators.finish`).

- A *communicator* (one per group of ranks and group kind, as NCCL creates them) runs its
  collectives one at a time, in issue order. The k-th collective each simulated member
  issues on it is the same instance (a :class:`~engine.entities.Future`); it starts when
  every simulated member has issued it and the previous one on the communicator has
  ended, and it ends when the network backend says so.
- On a contention-free backend (``memo``) the engine times an instance itself: its
  duration is asked of the backend once per distinct (collective, ranks), in closed form
  when the backend offers it, and the end is an event on the engine's queue. Otherwise
  the instance is submitted to the backend and its completion comes from the backend
  (``in_network``, drained by the simulator's loop).
- Interference: a member that issues a collective which slows compute
  (:func:`engine.passes.slows_compute`) counts it in ``RankState.comm_busy`` from its own
  issue until the instance ends.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from engine.entities import Comm, Future, Membership, RankState
from engine.event_kinds import EV_FUTURE_DONE
from engine.loop import COMPLETION, EventLoop
from engine.passes import interference, is_flex_kernel
from network.backend import NetworkBackend, Transfer
from workload_gen.core.parallel_config import ParallelConfig
from workload_gen.core.placement import group_ranks
from workload_gen.core.records import CollectiveOp, Group

if TYPE_CHECKING:
    from engine.timeline import CollectiveRecord


class Communicators:
    """Every communicator of one simulation and the collective instances running on them."""

    def __init__(self, par: ParallelConfig, backend: NetworkBackend, simulated_ranks: frozenset[int],
                 loop: EventLoop, *, memo: bool, slowdown: float, flex_slowdown: float = 0.0,
                 coll_rec: type[CollectiveRecord] | None = None) -> None:
        self.par = par
        self.backend = backend
        self.simulated_ranks = simulated_ranks
        self.loop = loop
        self.memo = memo
        self.slowdown = slowdown
        self.flex_slowdown = flex_slowdown
        """Slow-down of compute beside the flex dispatcher's kernels (engine.sim); 0: none."""
        self.coll_rec = coll_rec
        """The timeline's record type for a collective (engine.timeline.CollectiveRecord), or
        None when the run keeps no timeline."""
        self._comms: dict[tuple[Group, tuple[int, ...]], Comm] = {}
        """One communicator per (group kind, members), shared by its simulated members."""
        self._joining: dict[tuple[int, int], Future] = {}
        """(id(comm), k) -> the k-th collective on a communicator, while some of its
        simulated members have not issued it yet."""
        self.in_network: dict[int, Future] = {}
        """Transfer id -> future submitted to the backend and not yet completed."""
        self._next_transfer_id = 0
        self._future_seq = 0
        self._durations: dict[tuple, float] = {}
        """Contention-free durations, one per distinct (collective, ranks)."""
        self._probe_time = 0.0
        # A contention-free backend may answer single queries in closed form.
        self._closed_form = backend.collective_time if memo else None
        self.transfers = 0
        """Collective instances and pipeline transfers started so far."""

    def membership(self, rank: RankState, group: Group) -> Membership:
        """The rank's communicator for ``group``, resolved on first use."""
        membership = rank.groups.get(group)
        if membership is None:
            members = group_ranks(self.par, group, rank.rank)
            key = (group, members)
            comm = self._comms.get(key)
            if comm is None:
                comm = self._comms[key] = Comm()
            simulated = sum(1 for r in members if r in self.simulated_ranks)
            membership = rank.groups[group] = Membership(comm, members, simulated)
        return membership

    def new_future(self, group: str, op: CollectiveOp | None, ranks: tuple[int, ...], parties: int) -> Future:
        """A collective instance or pipeline transfer; one numbering for both (it breaks ties)."""
        self._future_seq += 1
        return Future(self._future_seq, group, op, ranks, parties)

    def issue(self, rank: RankState, op: CollectiveOp, now: float, chunk: int, microbatch: int) -> Future:
        """``rank`` reaches collective ``op``: join (or open) the matching instance."""
        membership = self.membership(rank, op.group)
        comm, simulated = membership.comm, membership.simulated
        cid = id(comm)
        k = rank.issued_on.get(cid, 0)
        rank.issued_on[cid] = k + 1
        key = (cid, k)
        fut = self._joining.get(key)
        if fut is None:
            fut = self.new_future(op.group.value, op, membership.members, simulated)
            fut.comm = comm
            comm.queue.append(fut)
            if simulated > 1:
                self._joining[key] = fut
        fut.missing -= 1
        if interference(op, self.slowdown, self.flex_slowdown):
            # From its own issue: a member that issues first and starts computing at the
            # same instant is as slowed as the one whose join starts the collective.
            rank.comm_busy += 1
            if self.flex_slowdown and is_flex_kernel(op):
                rank.flex_busy += 1
            if fut.joined is None:
                fut.joined = [rank]
            else:
                fut.joined.append(rank)
        if self.coll_rec is not None:
            rank.records.append(self.coll_rec(op, fut, chunk, microbatch))
        if fut.missing == 0:
            fut.ready_time = now
            fut.ready_stage = rank.stage
            if simulated > 1:
                del self._joining[key]
            self.start_next(comm, now)
        return fut

    def start_next(self, comm: Comm, now: float) -> None:
        """Start the communicator's oldest collective if it is free and that one is ready."""
        if comm.running is None and comm.queue and comm.queue[0].missing == 0:
            fut = comm.queue.popleft()
            comm.running = fut
            self._start(fut, now)

    def _start(self, fut: Future, now: float) -> None:
        fut.start = now
        self.transfers += 1
        if self.memo:
            d = self.duration(fut.op, fut.ranks)
            self.loop.schedule(now + d, COMPLETION, EV_FUTURE_DONE, fut)
        else:
            tid = self._next_transfer_id
            self._next_transfer_id += 1
            self.in_network[tid] = fut
            self.backend.submit(Transfer(tid, fut.op, fut.ranks), now)

    def duration(self, op: CollectiveOp, ranks: tuple[int, ...]) -> float:
        """Duration on a contention-free backend, asked once per distinct transfer."""
        key = (op.kind, op.group, op.bytes, op.group_size, ranks)
        d = self._durations.get(key)
        if d is None and self._closed_form is not None:
            d = self._durations[key] = self._closed_form(op, ranks)
        if d is None:
            # Through the protocol. The backend's clock only moves forward: probe at the
            # time it last reached.
            tid = self._next_transfer_id
            self._next_transfer_id += 1
            t0 = self._probe_time
            self.backend.submit(Transfer(tid, op, ranks), t0)
            tn = self.backend.next_completion_time()
            done = self.backend.advance_to(tn)
            if [c.id for c in done] != [tid]:
                raise AssertionError(f"contention-free probe of {op.name!r} returned {done!r}")
            d = tn - t0
            self._probe_time = tn
            self._durations[key] = d
        return d

    def finish(self, fut: Future, now: float) -> None:
        """``fut`` ended: free its members' compute of its slow-down and start the next
        collective on its communicator. Its waiters are the simulator's to wake."""
        fut.end = now
        joined = fut.joined
        if joined is not None:  # only with a slowdown (see issue)
            flex = self.flex_slowdown and is_flex_kernel(fut.op)
            for st in joined:
                st.comm_busy -= 1
                if flex:
                    st.flex_busy -= 1
        comm = fut.comm
        if comm is not None:
            comm.running = None
            self.start_next(comm, now)
