"""The event simulation of one training iteration.

Entities (kept apart from how they are built, STYLE.md section 1):

- a *rank* runs its stage's pipeline schedule: a list of passes (forward or backward
  of one chunk for one micro-batch), then the once-per-iteration tail;
- a *communicator* (one per group of ranks and group kind, as NCCL creates them) runs
  its collectives one at a time, in issue order; a collective starts when every
  simulated member has issued it and the previous one on the communicator has ended,
  and it ends when the network backend says so;
- a pipeline transfer is a send/recv pair: it starts when the sender's pass has ended
  and the receiver has posted the receive (when it is ready to run the pass that needs
  it), on the sender's send stream for that direction; the receiving pass starts when it
  has arrived. In 1F1B the sender waits for its send (Megatron's blocking p2p); in the
  interleaved schedule it does not (see docs/engine.md).

Words used in the code: a *virtual stage* is ``chunk * pp + stage`` (activations go
from one to the next, so chunk c of the last stage feeds chunk c + 1 of the first); a
:class:`~engine.entities.Future` is one collective instance or pipeline transfer; a rank is
*blocked* while its compute stream waits for futures; a *party* of a future is a
simulated rank that must join it before it can start (its members, or sender and receiver).

The engine owns the clock. Each step takes the earlier of the next queued event and the
backend's ``next_completion_time()``; at equal times the network's completions go
first, then the queue's own order (:mod:`engine.loop`). A backend that cannot know its
next completion without running (a packet simulator) may offer ``advance_until(t)``:
run up to ``t`` or to its first completion, whichever is earlier, and return the
completions there; the engine then never asks it to run past its own next event.

Two ways to run a pass:

- op level: every op is an event; collectives go through the backend in the loop;
- memoised (``memo=True``, contention-free backends only, one representative rank per
  stage): a pass whose collectives are all intra-stage is one event whose duration and
  accounting come from :func:`engine.passes.profile_pass`, computed once per
  (stage, chunk, direction); every collective duration is asked of the backend once
  per distinct (collective, ranks) and reused. Equal to op level, see engine.passes.

Interference (``Workload.overlap_slowdown`` = s > 0): a compute op that starts while a
collective its rank has issued has not ended takes (1 + s) times its time (not for
point-to-point transfers, pipeline or context-parallel ring exchanges: NCCL's send/recv
kernels take one or two SMs where a collective takes one per channel), charged to compute (``Accounts.slowdown`` keeps the
added part). At pass level the pass's own collectives are in its profile; a pass that
may overlap collectives from outside it (gradient buckets released during it or still
running, parameter gathers) runs op by op, so both levels apply the same rule.

Accounting: whenever a rank's compute stream waits, the wait is charged when it ends,
to what it waited for: the part before every member had arrived is pipeline bubble
when the late member is in another stage (the sender of a pipeline transfer always is)
and ``other`` when it is in the same stage (skew between ranks); the rest is exposed
communication of that collective's group. With several collectives waited on at once,
the one that ended last takes the wait. Idle time after a rank's last op until the end
of the iteration is bubble (pp > 1) or other.
"""
from __future__ import annotations

from engine.entities import INF, MEMOISED_PASS, Comm, Future, Membership, RankState, ReceiveKey
from engine.loop import COMPLETION, EventLoop
from engine.passes import PassProfile, profile_pass, slows_compute
from engine.program import PassSpec, build_plans
from engine.schedules import SCHEDULES, Step
from network.backend import NetworkBackend, Transfer
from workload_gen.core.placement import group_ranks
from workload_gen.core.records import CollectiveOp, ComputeOp, Group, OpKind, Workload
from workload_gen.core.run_result import Breakdown, Interval

# Event kinds on the engine's queue (ints: compared once per event), and their payloads.
EV_COMPUTE_DONE = 0
"""A compute op ended; payload: its RankState."""
EV_FUTURE_DONE = 1
"""A collective or pipeline transfer the engine timed itself ended; payload: its Future."""
EV_PASS_DONE = 2
"""A memoised pass ended; payload: its RankState."""
EV_GRAD_READY = 3
"""Gradient buckets became ready inside a memoised pass; payload: (RankState, bucket ops)."""

PP_GROUP = Group.PP.value


class Simulator:
    """One iteration of one workload on one backend; call :meth:`run` once.

    Read by :func:`engine.api.simulate`: ``ranks`` (a :class:`RankState` per simulated rank),
    :meth:`representatives`, :meth:`breakdown`, :meth:`timeline_parts`, ``events`` and
    ``transfers``.
    """

    def __init__(
        self, workload: Workload, backend: NetworkBackend, *, memo: bool, all_ranks: bool,
        timeline: bool, schedule: str,
    ) -> None:
        par = workload.parallel
        self.par = par
        self.backend = backend
        self.memo = memo
        self.timeline = timeline
        if timeline:  # the record types, loaded only by runs that keep a timeline
            from engine.timeline import Block, CollectiveRecord, ComputeRecord

            self._block_rec, self._coll_rec, self._comp_rec = Block, CollectiveRecord, ComputeRecord
        self.schedule = schedule
        self.plans = build_plans(workload)
        self.num_microbatches = par.num_microbatches
        self.pp = par.pp
        self.num_virtual_stages = par.pp * par.vpp
        """Model chunk ``c`` of stage ``s`` is virtual stage ``c * pp + s``; activations
        flow from each virtual stage to the next."""
        self.ranks_per_stage = par.world_size // par.pp
        # Senders wait for their pipeline sends only in plain 1F1B; the interleaved
        # schedule's combined forward+backward p2p calls are not modelled, so its sends
        # are eager (as with Megatron's overlap_p2p_comm).
        self.blocking_p2p = par.vpp == 1
        self.prefetch_p2p = par.vpp > 1 and par.overlap_p2p_comm
        """Megatron's interleaved schedule with overlap_p2p_comm posts the receive of the next
        pass of the same direction as soon as a pass ends (send_forward_recv_forward /
        send_backward_recv_backward, asynchronous), so that transfer runs under the pass in
        between instead of after the receiver asks for it."""
        sched = SCHEDULES.get(schedule)
        steps = [sched(par.pp, par.vpp, self.num_microbatches, s) for s in range(par.pp)]
        per_stage = self.ranks_per_stage
        if all_ranks:
            simulated = list(range(par.world_size))
        else:  # one representative per stage: tp = cp = dp = 0
            simulated = [s * per_stage for s in range(par.pp)]
        self.simulated_ranks = frozenset(simulated)
        self.ranks = [RankState(r, r // per_stage, self.plans[r // per_stage], steps[r // per_stage])
                      for r in simulated]
        self.slowdown = float(workload.overlap_slowdown)
        """Fractional slow-down of compute started while a collective of its rank runs."""
        for rank in self.ranks:
            for b in rank.plan.buckets:
                if par.overlap_grad_reduce and b.chunk >= 0:
                    rank.grads.by_ready_point.setdefault((b.chunk, b.ready_index), []).append(b.op)
        self.loop = EventLoop()
        self._comms: dict[tuple[Group, tuple[int, ...]], Comm] = {}
        """One communicator per (group kind, members), shared by its simulated members."""
        self._send_streams: dict[int, Comm] = {}
        """Pipeline send streams, keyed ``2 * rank + (0 forward, 1 backward)``."""
        self._joining: dict[tuple[int, int], Future] = {}
        """(id(comm), k) -> the k-th collective on a communicator, while some of its
        simulated members have not issued it yet."""
        self._pipeline: dict[ReceiveKey, Future] = {}
        """Pipeline transfers, from the first party's join until the receiving pass starts."""
        self._in_network: dict[int, Future] = {}
        """Transfer id -> future submitted to the backend and not yet completed."""
        self._next_transfer_id = 0
        self._future_seq = 0
        self._durations: dict[tuple, float] = {}
        """Contention-free durations, one per distinct (collective, ranks)."""
        self._probe_time = 0.0
        # A contention-free backend may answer single queries in closed form.
        self._closed_form = backend.collective_time if memo else None
        self._profiles: dict[tuple[int, int, bool], PassProfile] = {}
        """(stage, chunk, forward) -> the memoised pass."""
        self.events = 0
        self.transfers = 0

    # ------------------------------------------------------------------ groups and comms
    def _membership(self, rank: RankState, group: Group) -> Membership:
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

    def _new_future(self, group: str, op: CollectiveOp | None, ranks: tuple[int, ...], parties: int) -> Future:
        self._future_seq += 1
        return Future(self._future_seq, group, op, ranks, parties)

    def _issue(self, rank: RankState, op: CollectiveOp, now: float, chunk: int, microbatch: int) -> Future:
        """``rank`` reaches collective ``op``: join (or open) the matching instance."""
        membership = self._membership(rank, op.group)
        comm, simulated = membership.comm, membership.simulated
        cid = id(comm)
        k = rank.issued_on.get(cid, 0)
        rank.issued_on[cid] = k + 1
        key = (cid, k)
        fut = self._joining.get(key)
        if fut is None:
            fut = self._new_future(op.group.value, op, membership.members, simulated)
            fut.comm = comm
            comm.queue.append(fut)
            if simulated > 1:
                self._joining[key] = fut
        fut.missing -= 1
        if self.slowdown and slows_compute(op):
            # From its own issue: a member that issues first and starts computing at the
            # same instant is as slowed as the one whose join starts the collective.
            rank.comm_busy += 1
            if fut.joined is None:
                fut.joined = [rank]
            else:
                fut.joined.append(rank)
        if self.timeline:
            rank.records.append(self._coll_rec(op, fut, chunk, microbatch))
        if fut.missing == 0:
            fut.ready_time = now
            fut.ready_stage = rank.stage
            if simulated > 1:
                del self._joining[key]
            self._start_next(comm, now)
        return fut

    def _start_next(self, comm: Comm, now: float) -> None:
        """Start the communicator's oldest collective if it is free and that one is ready."""
        if comm.running is None and comm.queue and comm.queue[0].missing == 0:
            fut = comm.queue.popleft()
            comm.running = fut
            self._start(fut, now)

    def _start(self, fut: Future, now: float) -> None:
        fut.start = now
        self.transfers += 1
        if self.memo:
            d = self._duration(fut.op, fut.ranks)
            self.loop.schedule(now + d, COMPLETION, EV_FUTURE_DONE, fut)
        else:
            tid = self._next_transfer_id
            self._next_transfer_id += 1
            self._in_network[tid] = fut
            self.backend.submit(Transfer(tid, fut.op, fut.ranks), now)

    def _duration(self, op: CollectiveOp, ranks: tuple[int, ...]) -> float:
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

    def _complete(self, fut: Future, now: float) -> None:
        fut.end = now
        joined = fut.joined
        if joined is not None:  # only with a slowdown (see _issue)
            for st in joined:
                st.comm_busy -= 1
        comm = fut.comm
        if comm is not None:
            comm.running = None
            self._start_next(comm, now)
        waiters = fut.waiters
        if waiters:
            fut.waiters = []
            for rank in waiters:
                blocked_on = rank.blocked.futures
                if blocked_on is not None and all(f.end is not None for f in blocked_on):
                    self._unblock(rank, now)
                    self._run(rank)

    # ------------------------------------------------------------------ waiting
    def _block(self, rank: RankState, futs: list[Future], now: float) -> None:
        blocked = rank.blocked
        blocked.futures = futs
        blocked.since = now
        for f in futs:
            if f.end is None:
                f.waiters.append(rank)

    def _unblock(self, rank: RankState, now: float) -> None:
        """End the rank's wait and charge it (see the module docstring, Accounting)."""
        blocked = rank.blocked
        futs = blocked.futures
        blocked.futures = None
        t0 = blocked.since
        span = now - t0
        if span <= 0:
            return
        last = max(futs, key=lambda f: (f.end, f.seq))
        # The part before the last party joined waits for that party, not the network.
        before = last.ready_time - t0
        before = 0.0 if before < 0 else (span if before > span else before)
        acc = rank.acc
        if before > 0:
            if last.ready_stage != rank.stage:
                acc.bubble += before
            else:
                acc.other += before
        rest = span - before
        if rest > 0:
            acc.exposed[last.group] += rest
            last.exposed_by_rank[rank.rank] = last.exposed_by_rank.get(rank.rank, 0.0) + rest

    # ------------------------------------------------------------------ pipeline
    def _pp_peer(self, rank: RankState, stage: int) -> int:
        # PP is the outermost dimension of Megatron's rank order.
        return rank.rank + (stage - rank.stage) * self.ranks_per_stage

    def _pipeline_transfer(self, key: ReceiveKey) -> Future:
        """The transfer feeding one pass: joined by the sender (pass end) and the receiver
        (when it asks for its input), like an NCCL send/recv pair."""
        fut = self._pipeline.get(key)
        if fut is None:
            fut = self._pipeline[key] = self._new_future(PP_GROUP, None, (), 2)
        return fut

    def _join_transfer(self, fut: Future, stage: int, now: float) -> None:
        """A party (sender or receiver) joins a pipeline transfer; the second one makes it ready."""
        fut.missing -= 1
        if fut.missing:
            return
        fut.ready_time = now
        fut.ready_stage = stage
        if fut.comm is None:  # nothing on the wire: a pure dependency
            fut.start = now
            self.loop.schedule(now, COMPLETION, EV_FUTURE_DONE, fut)
        else:
            self._start_next(fut.comm, now)

    def _send(self, rank: RankState, step: Step, spec: PassSpec, now: float) -> Future | None:
        """The pass ends: join the transfer of its output to the next virtual stage."""
        virtual = step.chunk * self.pp + rank.stage
        dst_virtual = virtual + 1 if step.forward else virtual - 1
        if dst_virtual < 0 or dst_virtual >= self.num_virtual_stages:
            return None
        dst = self._pp_peer(rank, dst_virtual % self.pp)
        fut = self._pipeline_transfer((dst, step.forward, dst_virtual, step.microbatch))
        if spec.send is not None:
            fut.op = spec.send
            fut.ranks = (rank.rank, dst)
            # One send stream per direction: sends leave in the order they were issued.
            key = 2 * rank.rank + (0 if step.forward else 1)
            comm = self._send_streams.get(key)
            if comm is None:
                comm = self._send_streams[key] = Comm()
            fut.comm = comm
            comm.queue.append(fut)
            if self.timeline:
                rank.records.append(self._coll_rec(spec.send, fut, step.chunk, step.microbatch))
        self._join_transfer(fut, rank.stage, now)
        return fut

    def _post_next_receive(self, rank: RankState, now: float, forward: bool | None = None) -> None:
        """Post the receive of the next pass's input (of the next pass in direction
        ``forward`` when given), if it has one and it is not posted."""
        cursor, steps = rank.cursor, rank.steps
        i = cursor.next_step
        if forward is not None:
            while i < len(steps) and steps[i].forward != forward:
                i += 1
        if i >= len(steps):
            return
        step = steps[i]
        virtual = step.chunk * self.pp + rank.stage
        if (virtual > 0) if step.forward else (virtual < self.num_virtual_stages - 1):  # has a pipeline input
            key = (rank.rank, step.forward, virtual, step.microbatch)
            if key not in cursor.posted:
                cursor.posted.add(key)
                self._join_transfer(self._pipeline_transfer(key), rank.stage, now)

    def _profile(self, rank: RankState, spec: PassSpec) -> PassProfile:
        key = (rank.stage, spec.chunk, spec.forward)
        prof = self._profiles.get(key)
        if prof is None:
            if spec.forward:
                ready = frozenset()
            else:
                ready = frozenset(i for (c, i) in rank.grads.by_ready_point if c == spec.chunk)
            prof = profile_pass(spec.ops, lambda op: self._duration(op, self._membership(rank, op.group).members),
                                ready, spec.deadline, spec.issue_with, self.slowdown)
            self._profiles[key] = prof
        return prof

    def _begin_step(self, rank: RankState, now: float) -> bool:
        """Start the rank's next pass; False when it must wait for its input or runs memoised."""
        cursor = rank.cursor
        step = rank.steps[cursor.next_step]
        virtual = step.chunk * self.pp + rank.stage
        if (virtual > 0) if step.forward else (virtual < self.num_virtual_stages - 1):  # has a pipeline input
            key = (rank.rank, step.forward, virtual, step.microbatch)
            fut = self._pipeline_transfer(key)
            if fut.end is None:
                if key not in cursor.posted:  # first time here: post the receive
                    cursor.posted.add(key)
                    self._join_transfer(fut, rank.stage, now)
                self._block(rank, [fut], now)
                return False
            if key not in cursor.posted:  # a transfer cannot end before its receive is posted
                raise AssertionError(f"pipeline transfer {key} completed before its receive was posted")
            cursor.posted.discard(key)
            del self._pipeline[key]
        cursor.next_step += 1
        cursor.step = step
        spec = rank.plan.passes[(step.chunk, step.forward)]
        grads, gathers = rank.grads, rank.gathers
        grads.release_this_pass = ((not step.forward) and step.microbatch == self.num_microbatches - 1
                                   and bool(grads.by_ready_point))
        gathers.gate_this_pass = step.forward and step.microbatch == 0 and bool(gathers.issued)
        # With interference, a pass that collectives from outside it may overlap (running
        # now, or gradient buckets it releases) runs op by op (see the module docstring).
        outside = self.slowdown and (rank.comm_busy or grads.release_this_pass)
        if self.memo and spec.memoisable and not gathers.gate_this_pass and not outside:
            prof = self._profile(rank, spec)
            acc = rank.acc
            acc.compute += prof.compute_s
            acc.optimizer += prof.optimizer_s
            acc.slowdown += prof.slowdown_s
            for g, x in prof.exposed:
                acc.exposed[g] += x
            if self.timeline:
                rank.records.append(self._block_rec(rank.stage, rank.rank, prof, now, step.chunk, step.microbatch))
            if grads.release_this_pass:
                for i, off in prof.ready_offsets:
                    ops = grads.by_ready_point.get((step.chunk, i))
                    if ops:
                        self.loop.schedule(now + off, COMPLETION, EV_GRAD_READY, (rank, ops))
            cursor.spec = spec
            cursor.op_index = MEMOISED_PASS
            self.loop.schedule(now + prof.duration, COMPLETION, EV_PASS_DONE, rank)
            return False
        cursor.spec = spec
        cursor.op_index = 0
        return True

    def _begin_tail(self, rank: RankState, now: float) -> bool:
        """Enter the once-per-iteration tail: issue the buckets not released during the
        backward, then wait for every bucket (Megatron's finish_grad_sync). False when
        the rank must wait."""
        cursor, grads = rank.cursor, rank.grads
        cursor.in_tail = True
        grads.release_this_pass = rank.gathers.gate_this_pass = False
        for b in rank.plan.buckets:
            if not (self.par.overlap_grad_reduce and b.chunk >= 0):
                grads.issued.append(self._issue(rank, b.op, now, b.chunk, -1))
        cursor.spec = rank.tail_spec
        cursor.op_index = 0
        cursor.step = None
        if any(f.end is None for f in grads.issued):
            self._block(rank, list(grads.issued), now)
            return False
        return True

    # ------------------------------------------------------------------ the rank process
    def _run(self, rank: RankState) -> None:
        """Run the rank until it must wait: for a compute op, a collective, its pipeline
        input, or a memoised pass (each resumes it through an event or a completion)."""
        if rank.blocked.futures is not None:
            return  # blocked; resumed by the completion it waits for
        now = self.loop.now
        cursor, overlapped, gathers = rank.cursor, rank.overlapped, rank.gathers
        while True:
            spec = cursor.spec
            if spec is None:
                if cursor.next_step < len(rank.steps):
                    if not self._begin_step(rank, now):
                        return
                    continue
                if not cursor.in_tail:
                    if not self._begin_tail(rank, now):
                        return
                    continue
                rank.done = True
                rank.end = now
                return
            if cursor.op_index == MEMOISED_PASS:
                return  # resumed by its EV_PASS_DONE
            ops = spec.ops
            n = len(ops)
            while cursor.op_index < n:
                i = cursor.op_index
                if overlapped.pending and overlapped.next_deadline <= i:
                    # overlapped collectives that must end before this op
                    need = [f for deadline, f in overlapped.pending if deadline <= i]
                    if any(f.end is None for f in need):
                        self._block(rank, need, now)
                        return
                    overlapped.pending = [p for p in overlapped.pending if p[0] > i]
                    overlapped.next_deadline = min((deadline for deadline, _ in overlapped.pending), default=INF)
                op = ops[i]
                if type(op) is ComputeOp:
                    if gathers.gate_this_pass and op.layer > gathers.done_through_layer:
                        need = [f for layer, f in gathers.issued if layer <= op.layer]
                        if any(f.end is None for f in need):
                            self._block(rank, need, now)
                            return
                        gathers.done_through_layer = op.layer  # every layer up to here has its parameters
                    step = cursor.step
                    issue_now = spec.issue_with.get(i)
                    if issue_now:  # overlappable collectives that run alongside this op
                        for k in issue_now:
                            fut = self._issue(rank, ops[k], now, step.chunk, step.microbatch)
                            deadline = spec.deadline[k]
                            overlapped.pending.append((deadline, fut))
                            if deadline < overlapped.next_deadline:
                                overlapped.next_deadline = deadline
                    d = op.time_s
                    if rank.comm_busy and d:
                        extra = d * self.slowdown
                        rank.acc.slowdown += extra
                        d += extra
                    if op.kind is OpKind.OPTIMIZER:
                        rank.acc.optimizer += d
                    else:
                        rank.acc.compute += d
                    if self.timeline:
                        rank.records.append(self._comp_rec(op, now, now + d, step.chunk if step else -1,
                                                          step.microbatch if step else -1))
                    self.loop.schedule(now + d, COMPLETION, EV_COMPUTE_DONE, rank)
                    return
                cursor.op_index += 1
                if cursor.in_tail:  # once-per-iteration collectives all block
                    fut = self._issue(rank, op, now, -1, -1)
                elif op.overlappable:
                    if i not in spec.pre_issued:
                        step = cursor.step
                        fut = self._issue(rank, op, now, step.chunk, step.microbatch)
                        deadline = spec.deadline[i]
                        overlapped.pending.append((deadline, fut))
                        if deadline < overlapped.next_deadline:
                            overlapped.next_deadline = deadline
                    continue
                else:
                    step = cursor.step
                    fut = self._issue(rank, op, now, step.chunk, step.microbatch)
                if fut.end is None:
                    self._block(rank, [fut], now)
                    return
            if overlapped.pending:  # the pass ends when everything it issued has ended
                need = [f for _, f in overlapped.pending]
                if any(f.end is None for f in need):
                    self._block(rank, need, now)
                    return
                overlapped.pending = []
                overlapped.next_deadline = INF
            self._end_pass(rank, now)
            if rank.blocked.futures is not None:
                return

    def _end_pass(self, rank: RankState, now: float) -> None:
        cursor = rank.cursor
        if cursor.in_tail:
            cursor.spec = None
            cursor.next_step = len(rank.steps)
            rank.done = True
            rank.end = now
            rank.tail_spec = None
            return
        step, spec = cursor.step, cursor.spec
        cursor.spec = None
        fut = self._send(rank, step, spec, now)
        if self.prefetch_p2p:
            self._post_next_receive(rank, now, step.forward)
        if self.blocking_p2p and fut is not None and spec.send is not None and not spec.send.overlappable:
            # Megatron's 1F1B p2p is blocking: the rank waits for its send. Between a
            # forward and a backward the send is batched with the receive of the next
            # pass's input (send_forward_recv_backward, send_backward_recv_forward), which
            # is therefore posted now; in warm-up and cool-down it is a separate call.
            nxt = rank.steps[cursor.next_step] if cursor.next_step < len(rank.steps) else None
            if nxt is not None and nxt.forward != step.forward:
                self._post_next_receive(rank, now)
            if fut.end is None:
                self._block(rank, [fut], now)

    # ------------------------------------------------------------------ main loop
    def run(self) -> float:
        loop = self.loop
        for rank in self.ranks:
            for op in rank.plan.gathers:
                rank.gathers.issued.append((op.layer, self._issue(rank, op, 0.0, -1, -1)))
        for rank in self.ranks:
            self._run(rank)
        backend = self.backend
        in_network = self._in_network
        # advance_until(t): the network runs up to t or up to its first completion, whichever
        # is earlier, and returns the completions there (a packet backend cannot know its
        # next completion without running; a closed-form one answers from its heap).
        until = backend.advance_until
        events = 0
        while True:
            te = loop.peek_time()
            if in_network:
                done = until(te)
                if done:
                    for c in done:
                        # Network completions at time t go before the queue's events at t.
                        loop.advance(c.time)
                        events += 1
                        self._complete(in_network.pop(c.id), c.time)
                    continue
            if te == INF:
                break
            t, kind, data = loop.pop()
            events += 1
            if kind == EV_COMPUTE_DONE:
                rank = data
                cursor = rank.cursor
                grads = rank.grads
                if grads.release_this_pass:
                    ops = grads.by_ready_point.get((cursor.step.chunk, cursor.op_index))
                    if ops:
                        for op in ops:
                            grads.issued.append(self._issue(rank, op, t, cursor.step.chunk, -1))
                cursor.op_index += 1
                self._run(rank)
            elif kind == EV_FUTURE_DONE:
                self._complete(data, t)
            elif kind == EV_PASS_DONE:
                rank = data
                rank.cursor.op_index = 0
                self._end_pass(rank, t)
                self._run(rank)
            else:  # EV_GRAD_READY
                rank, ops = data
                step = rank.cursor.step
                for op in ops:
                    rank.grads.issued.append(self._issue(rank, op, t, step.chunk if step else -1, -1))
        self.events = events
        stuck = [rank.rank for rank in self.ranks if not rank.done]
        if stuck:
            raise AssertionError(f"simulation deadlocked; ranks not finished: {stuck[:8]}")
        return max(rank.end for rank in self.ranks)

    # ------------------------------------------------------------------ results
    def breakdown(self, rank: RankState, total: float) -> Breakdown:
        acc = rank.acc
        bubble, other = acc.bubble, acc.other
        tail = total - rank.end
        if tail > 0:
            if self.pp > 1:
                bubble += tail
            else:
                other += tail
        return Breakdown(
            compute_s=acc.compute, exposed_comm_s=dict(acc.exposed), bubble_s=bubble,
            optimizer_s=acc.optimizer, other_s=other,
        )

    def representatives(self) -> list[RankState]:
        """The rank with tp = cp = dp = 0 of each stage."""
        by_rank = {rank.rank: rank for rank in self.ranks}
        return [by_rank[s * self.ranks_per_stage] for s in range(self.pp)]

    def timeline_parts(self) -> list:
        """Parts of the :class:`engine.timeline.Timeline`, per rank in ascending order:
        memoised passes as :class:`Block` objects, every other record as an Interval."""
        from engine.timeline import Block, ComputeRecord

        # ``_value_`` is the enum member's value (what ``.value`` returns, without the
        # property call: this runs once per op of the run).
        parts: list = []
        for rank in sorted(self.ranks, key=lambda r: r.rank):
            stage, rank_id = rank.stage, rank.rank
            for rec in rank.records:
                kind = type(rec)
                if kind is Block:
                    parts.append(rec)
                elif kind is ComputeRecord:
                    op, start, end, chunk, microbatch = rec
                    parts.append(Interval(stage, rank_id, "compute", op.name, op.layer, op.phase._value_, microbatch,
                                          chunk, start, end, op.kind._value_, 0, 0.0))
                else:  # CollectiveRecord
                    op, fut, chunk, microbatch = rec
                    if fut.group == PP_GROUP:
                        # A pipeline transfer is recorded once, by its sender: its exposed
                        # time is every rank's wait on it (the receiver's and a blocking sender's).
                        exposed = sum(fut.exposed_by_rank.values())
                    else:
                        exposed = fut.exposed_by_rank.get(rank_id, 0.0)
                    parts.append(Interval(stage, rank_id, fut.group, op.name, op.layer, op.phase._value_, microbatch,
                                          chunk, fut.start, fut.end, fut.group, op.bytes, exposed))
        return parts
