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

Accounting: whenever a rank's compute stream waits, the wait is charged when it ends,
to what it waited for: the part before every member had arrived is pipeline bubble
when the late member is in another stage (the sender of a pipeline transfer always is)
and ``other`` when it is in the same stage (skew between ranks); the rest is exposed
communication of that collective's group. With several collectives waited on at once,
the one that ended last takes the wait. Idle time after a rank's last op until the end
of the iteration is bubble (pp > 1) or other.
"""
from __future__ import annotations

from engine.entities import INF, Comm, Future, RankState
from engine.loop import COMPLETION, EventLoop
from engine.passes import PassProfile, profile_pass
from engine.program import PassSpec, build_plans
from engine.schedules import SCHEDULES, Step
from engine.timeline import Block
from network.backend import NetworkBackend, Transfer
from workload_gen.placement import group_ranks
from workload_gen.records import CollectiveOp, ComputeOp, Group, OpKind, Workload
from workload_gen.run_result import Breakdown, Interval

EV_COMPUTE_DONE = 0
EV_FUTURE_DONE = 1
EV_PASS_DONE = 2
EV_GRAD_READY = 3



class Simulator:
    """One iteration of one workload on one backend; call :meth:`run` once."""

    def __init__(
        self, workload: Workload, backend: NetworkBackend, *, memo: bool, all_ranks: bool,
        timeline: bool, schedule: str,
    ) -> None:
        par = workload.parallel
        self.par = par
        self.backend = backend
        self.memo = memo
        self.timeline = timeline
        self.schedule = schedule
        self.plans = build_plans(workload)
        self.m = par.num_microbatches
        self.pp = par.pp
        self.V = par.pp * par.vpp
        self.rps = par.world_size // par.pp
        # Senders wait for their pipeline sends only in plain 1F1B; the interleaved
        # schedule's combined forward+backward p2p calls are not modelled, so its sends
        # are eager (as with Megatron's overlap_p2p_comm).
        self.blocking_p2p = par.vpp == 1
        sched = SCHEDULES.get(schedule)
        steps = [sched(par.pp, par.vpp, self.m, s) for s in range(par.pp)]
        if all_ranks:
            ranks = list(range(par.world_size))
        else:
            ranks = [s * self.rps for s in range(par.pp)]
        self.sim_set = frozenset(ranks)
        self.ranks = [RankState(r, r // self.rps, self.plans[r // self.rps], steps[r // self.rps]) for r in ranks]
        for R in self.ranks:
            for b in R.plan.buckets:
                if par.overlap_grad_reduce and b.chunk >= 0:
                    R.bucket_at.setdefault((b.chunk, b.ready_index), []).append(b.op)
        self.loop = EventLoop()
        self._comms: dict[tuple[Group, tuple[int, ...]], Comm] = {}
        self._pp_comms: dict[int, Comm] = {}
        self._inst: dict[tuple[int, int], Future] = {}
        self._mail: dict[tuple[int, bool, int, int], Future] = {}
        self._inflight: dict[int, Future] = {}
        self._next_tid = 0
        self._fseq = 0
        self._memo_dur: dict[tuple, float] = {}
        self._probe_t = 0.0
        # A contention-free backend may answer single queries in closed form.
        self._closed_form = backend.collective_time if memo else None
        self._profiles: dict[tuple[int, int, bool], PassProfile] = {}
        self.events = 0
        self.transfers = 0

    # ------------------------------------------------------------------ groups and comms
    def _group_info(self, R: RankState, group: Group) -> tuple[Comm, tuple[int, ...], int]:
        info = R.groups.get(group)
        if info is None:
            full = group_ranks(self.par, group, R.rank)
            key = (group, full)
            comm = self._comms.get(key)
            if comm is None:
                comm = self._comms[key] = Comm()
            nsim = sum(1 for r in full if r in self.sim_set)
            info = R.groups[group] = (comm, full, nsim)
        return info

    def _new_future(self, group: str, op: CollectiveOp | None, ranks: tuple[int, ...], left: int) -> Future:
        self._fseq += 1
        return Future(self._fseq, group, op, ranks, left)

    def _issue(self, R: RankState, op: CollectiveOp, now: float, chunk: int, mb: int) -> Future:
        """Rank ``R`` reaches collective ``op``: join (or open) the matching instance."""
        comm, full, nsim = self._group_info(R, op.group)
        cid = id(comm)
        k = R.seqs.get(cid, 0)
        R.seqs[cid] = k + 1
        key = (cid, k)
        fut = self._inst.get(key)
        if fut is None:
            fut = self._new_future(op.group.value, op, full, nsim)
            fut.comm = comm
            comm.queue.append(fut)
            if nsim > 1:
                self._inst[key] = fut
        fut.left -= 1
        if self.timeline:
            R.recs.append((1, op, fut, chunk, mb))
        if fut.left == 0:
            fut.ready = now
            fut.ready_stage = R.stage
            if nsim > 1:
                del self._inst[key]
            self._comm_try(comm, now)
        return fut

    def _comm_try(self, comm: Comm, now: float) -> None:
        if comm.busy is None and comm.queue and comm.queue[0].left == 0:
            fut = comm.queue.popleft()
            comm.busy = fut
            self._start(fut, now)

    def _start(self, fut: Future, now: float) -> None:
        fut.start = now
        self.transfers += 1
        if self.memo:
            d = self._duration(fut.op, fut.ranks)
            self.loop.schedule(now + d, COMPLETION, EV_FUTURE_DONE, fut)
        else:
            tid = self._next_tid
            self._next_tid += 1
            self._inflight[tid] = fut
            self.backend.submit(Transfer(tid, fut.op, fut.ranks), now)

    def _duration(self, op: CollectiveOp, ranks: tuple[int, ...]) -> float:
        """Duration on a contention-free backend, asked once per distinct transfer."""
        key = (op.kind, op.group, op.bytes, op.group_size, ranks)
        d = self._memo_dur.get(key)
        if d is None and self._closed_form is not None:
            d = self._memo_dur[key] = self._closed_form(op, ranks)
        if d is None:
            # Through the protocol. The backend's clock only moves forward: probe at the
            # time it last reached.
            tid = self._next_tid
            self._next_tid += 1
            t0 = self._probe_t
            self.backend.submit(Transfer(tid, op, ranks), t0)
            tn = self.backend.next_completion_time()
            done = self.backend.advance_to(tn)
            if [c.id for c in done] != [tid]:
                raise AssertionError(f"contention-free probe of {op.name!r} returned {done!r}")
            d = tn - t0
            self._probe_t = tn
            self._memo_dur[key] = d
        return d

    def _complete(self, fut: Future, now: float) -> None:
        fut.end = now
        comm = fut.comm
        if comm is not None:
            comm.busy = None
            self._comm_try(comm, now)
        waiters = fut.waiters
        if waiters:
            fut.waiters = []
            for R in waiters:
                w = R.wait
                if w is not None and all(f.end is not None for f in w):
                    self._unblock(R, now)
                    self._run(R)

    # ------------------------------------------------------------------ waiting
    def _block(self, R: RankState, futs: list[Future], now: float) -> None:
        R.wait = futs
        R.wait_start = now
        for f in futs:
            if f.end is None:
                f.waiters.append(R)

    def _unblock(self, R: RankState, now: float) -> None:
        futs = R.wait
        R.wait = None
        t0 = R.wait_start
        span = now - t0
        if span <= 0:
            return
        f = max(futs, key=lambda x: (x.end, x.seq))
        pre = f.ready - t0
        pre = 0.0 if pre < 0 else (span if pre > span else pre)
        if pre > 0:
            if f.ready_stage != R.stage:
                R.acc.bubble += pre
            else:
                R.acc.other += pre
        rest = span - pre
        if rest > 0:
            R.acc.exposed[f.group] += rest
            f.exposed[R.rank] = f.exposed.get(R.rank, 0.0) + rest

    # ------------------------------------------------------------------ pipeline
    def _pp_peer(self, R: RankState, stage: int) -> int:
        # PP is the outermost dimension of Megatron's rank order.
        return R.rank + (stage - R.stage) * self.rps

    def _mailbox(self, key: tuple[int, bool, int, int]) -> Future:
        """The transfer feeding one pass: joined by the sender (pass end) and the receiver
        (when it asks for its input), like an NCCL send/recv pair."""
        fut = self._mail.get(key)
        if fut is None:
            fut = self._mail[key] = self._new_future(Group.PP.value, None, (), 2)
        return fut

    def _join_p2p(self, fut: Future, stage: int, now: float) -> None:
        fut.left -= 1
        if fut.left:
            return
        fut.ready = now
        fut.ready_stage = stage
        if fut.comm is None:  # nothing on the wire: a pure dependency
            fut.start = now
            self.loop.schedule(now, COMPLETION, EV_FUTURE_DONE, fut)
        else:
            self._comm_try(fut.comm, now)

    def _send(self, R: RankState, step: Step, spec: PassSpec, now: float) -> Future | None:
        v = step.chunk * self.pp + R.stage
        v_dst = v + 1 if step.forward else v - 1
        if v_dst < 0 or v_dst >= self.V:
            return None
        dst = self._pp_peer(R, v_dst % self.pp)
        fut = self._mailbox((dst, step.forward, v_dst, step.microbatch))
        if spec.send is not None:
            fut.op = spec.send
            fut.ranks = (R.rank, dst)
            # One send stream per direction: sends leave in the order they were issued.
            ckey = 2 * R.rank + (0 if step.forward else 1)
            comm = self._pp_comms.get(ckey)
            if comm is None:
                comm = self._pp_comms[ckey] = Comm()
            fut.comm = comm
            comm.queue.append(fut)
            if self.timeline:
                R.recs.append((1, spec.send, fut, step.chunk, step.microbatch))
        self._join_p2p(fut, R.stage, now)
        return fut

    def _post_next_receive(self, R: RankState, now: float) -> None:
        """Post the receive of the next pass's input, if it has one and it is not posted."""
        if R.step_idx >= len(R.steps):
            return
        step = R.steps[R.step_idx]
        v = step.chunk * self.pp + R.stage
        if (v > 0) if step.forward else (v < self.V - 1):
            key = (R.rank, step.forward, v, step.microbatch)
            if R.wait_key != key:
                R.wait_key = key
                self._join_p2p(self._mailbox(key), R.stage, now)

    def _profile(self, R: RankState, spec: PassSpec) -> PassProfile:
        key = (R.stage, spec.chunk, spec.forward)
        prof = self._profiles.get(key)
        if prof is None:
            ready = frozenset(i for (c, i) in R.bucket_at if c == spec.chunk) if not spec.forward else frozenset()
            prof = profile_pass(spec.ops, lambda op: self._duration(op, self._group_info(R, op.group)[1]), ready,
                                spec.deadline, spec.issue_with)
            self._profiles[key] = prof
        return prof

    def _begin_step(self, R: RankState, now: float) -> bool:
        """Start the rank's next pass; False when it must wait for its input."""
        step = R.steps[R.step_idx]
        v = step.chunk * self.pp + R.stage
        if (v > 0) if step.forward else (v < self.V - 1):
            key = (R.rank, step.forward, v, step.microbatch)
            fut = self._mailbox(key)
            if fut.end is None:
                if R.wait_key != key:  # first time here: post the receive
                    R.wait_key = key
                    self._join_p2p(fut, R.stage, now)
                self._block(R, [fut], now)
                return False
            if R.wait_key != key:  # a transfer cannot end before its receive is posted
                raise AssertionError(f"pipeline transfer {key} completed before its receive was posted")
            del self._mail[key]
        R.step_idx += 1
        R.step = step
        spec = R.plan.passes[(step.chunk, step.forward)]
        R.last_bwd = (not step.forward) and step.microbatch == self.m - 1 and bool(R.bucket_at)
        R.gwait = step.forward and step.microbatch == 0 and bool(R.gathers)
        if self.memo and spec.memoisable and not R.gwait:
            prof = self._profile(R, spec)
            acc = R.acc
            acc.compute += prof.compute_s
            acc.optimizer += prof.optimizer_s
            for g, x in prof.exposed:
                acc.exposed[g] += x
            if self.timeline:
                R.recs.append(Block(R.stage, R.rank, prof, now, step.chunk, step.microbatch))
            if R.last_bwd:
                for i, off in prof.ready_offsets:
                    ops = R.bucket_at.get((step.chunk, i))
                    if ops:
                        self.loop.schedule(now + off, COMPLETION, EV_GRAD_READY, (R, ops))
            R.spec = spec
            R.op_idx = -1  # marks a memoised pass in flight
            self.loop.schedule(now + prof.duration, COMPLETION, EV_PASS_DONE, R)
            return False
        R.spec = spec
        R.op_idx = 0
        return True

    # ------------------------------------------------------------------ the rank process
    def _run(self, R: RankState) -> None:
        if R.wait is not None:
            return  # blocked; resumed by the completion it waits for
        now = self.loop.now
        while True:
            spec = R.spec
            if spec is None:
                if R.step_idx < len(R.steps):
                    if not self._begin_step(R, now):
                        return
                    continue
                if not R.in_tail:
                    R.in_tail = True
                    R.last_bwd = R.gwait = False
                    for b in R.plan.buckets:
                        if not (self.par.overlap_grad_reduce and b.chunk >= 0):
                            R.buckets.append(self._issue(R, b.op, now, b.chunk, -1))
                    R.spec = R.tail_spec
                    R.op_idx = 0
                    R.step = None
                    pending = [f for f in R.buckets if f.end is None]
                    if pending:
                        # Megatron's finish_grad_sync: wait for every bucket first.
                        self._block(R, list(R.buckets), now)
                        return
                    continue
                R.done = True
                R.end = now
                return
            if R.op_idx < 0:
                return  # a memoised pass is in flight
            ops = spec.ops
            n = len(ops)
            while R.op_idx < n:
                i = R.op_idx
                if R.outstanding and R.due <= i:
                    # overlapped collectives that must end before this op
                    need = [f for dl, f in R.outstanding if dl <= i]
                    if any(f.end is None for f in need):
                        self._block(R, need, now)
                        return
                    R.outstanding = [x for x in R.outstanding if x[0] > i]
                    R.due = min((dl for dl, _ in R.outstanding), default=INF)
                op = ops[i]
                if type(op) is ComputeOp:
                    if R.gwait and op.layer > R.gathered:
                        need = [f for layer, f in R.gathers if layer <= op.layer]
                        if any(f.end is None for f in need):
                            self._block(R, need, now)
                            return
                        R.gathered = op.layer  # every layer up to here has its parameters
                    st = R.step
                    pre = spec.issue_with.get(i)
                    if pre:
                        for k in pre:
                            fut = self._issue(R, ops[k], now, st.chunk, st.microbatch)
                            dl = spec.deadline[k]
                            R.outstanding.append((dl, fut))
                            if dl < R.due:
                                R.due = dl
                    d = op.time_s
                    if op.kind is OpKind.OPTIMIZER:
                        R.acc.optimizer += d
                    else:
                        R.acc.compute += d
                    if self.timeline:
                        R.recs.append((0, op, now, now + d, st.chunk if st else -1, st.microbatch if st else -1))
                    self.loop.schedule(now + d, COMPLETION, EV_COMPUTE_DONE, R)
                    return
                R.op_idx += 1
                if R.in_tail:  # once-per-iteration collectives all block
                    fut = self._issue(R, op, now, -1, -1)
                elif op.overlappable:
                    if i not in spec.pre_issued:
                        st = R.step
                        fut = self._issue(R, op, now, st.chunk, st.microbatch)
                        dl = spec.deadline[i]
                        R.outstanding.append((dl, fut))
                        if dl < R.due:
                            R.due = dl
                    continue
                else:
                    st = R.step
                    fut = self._issue(R, op, now, st.chunk, st.microbatch)
                if fut.end is None:
                    self._block(R, [fut], now)
                    return
            if R.outstanding:
                need = [f for _, f in R.outstanding]
                if any(f.end is None for f in need):
                    self._block(R, need, now)
                    return
                R.outstanding = []
                R.due = INF
            self._end_pass(R, now)
            if R.wait is not None:
                return

    def _end_pass(self, R: RankState, now: float) -> None:
        if R.in_tail:
            R.spec = None
            R.step_idx = len(R.steps)
            R.done = True
            R.end = now
            R.tail_spec = None  # type: ignore[assignment]
            return
        step, spec = R.step, R.spec
        R.spec = None
        fut = self._send(R, step, spec, now)
        if self.blocking_p2p and fut is not None and spec.send is not None and not spec.send.overlappable:
            # Megatron's 1F1B p2p is blocking: the rank waits for its send. Between a
            # forward and a backward the send is batched with the receive of the next
            # pass's input (send_forward_recv_backward, send_backward_recv_forward), which
            # is therefore posted now; in warm-up and cool-down it is a separate call.
            nxt = R.steps[R.step_idx] if R.step_idx < len(R.steps) else None
            if nxt is not None and nxt.forward != step.forward:
                self._post_next_receive(R, now)
            if fut.end is None:
                self._block(R, [fut], now)

    # ------------------------------------------------------------------ main loop
    def run(self) -> float:
        loop = self.loop
        for R in self.ranks:
            for op in R.plan.gathers:
                R.gathers.append((op.layer, self._issue(R, op, 0.0, -1, -1)))
        for R in self.ranks:
            self._run(R)
        backend = self.backend
        inflight = self._inflight
        # advance_until(t): the network runs up to t or up to its first completion, whichever
        # is earlier, and returns the completions there (a packet backend cannot know its
        # next completion without running; a closed-form one answers from its heap).
        until = backend.advance_until
        events = 0
        while True:
            te = loop.peek_time()
            if inflight:
                done = until(te)
                if done:
                    for c in done:
                        # Network completions at time t go before the queue's events at t.
                        loop.advance(c.time)
                        events += 1
                        self._complete(inflight.pop(c.id), c.time)
                    continue
            if te == INF:
                break
            t, kind, data = loop.pop()
            events += 1
            if kind == EV_COMPUTE_DONE:
                R = data
                if R.last_bwd:
                    ops = R.bucket_at.get((R.step.chunk, R.op_idx))
                    if ops:
                        for op in ops:
                            R.buckets.append(self._issue(R, op, t, R.step.chunk, -1))
                R.op_idx += 1
                self._run(data)
            elif kind == EV_FUTURE_DONE:
                self._complete(data, t)
            elif kind == EV_PASS_DONE:
                R = data
                R.op_idx = 0
                self._end_pass(R, t)
                self._run(R)
            else:  # EV_GRAD_READY
                R, ops = data
                for op in ops:
                    R.buckets.append(self._issue(R, op, t, R.step.chunk if R.step else -1, -1))
        self.events = events
        stuck = [R.rank for R in self.ranks if not R.done]
        if stuck:
            raise AssertionError(f"simulation deadlocked; ranks not finished: {stuck[:8]}")
        return max(R.end for R in self.ranks)

    # ------------------------------------------------------------------ results
    def breakdown(self, R: RankState, total: float) -> Breakdown:
        acc = R.acc
        bubble, other = acc.bubble, acc.other
        tail = total - R.end
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
        by_rank = {R.rank: R for R in self.ranks}
        return [by_rank[s * self.rps] for s in range(self.pp)]

    def timeline_parts(self) -> list:
        parts: list = []
        for R in sorted(self.ranks, key=lambda r: r.rank):
            for rec in R.recs:
                if isinstance(rec, Block):
                    parts.append(rec)
                    continue
                if rec[0] == 0:
                    _, op, s, e, ch, mb = rec
                    parts.append(Interval(R.stage, R.rank, "compute", op.name, op.layer, op.phase.value, mb, ch,
                                          s, e, op.kind.value, 0, 0.0))
                else:
                    _, op, fut, ch, mb = rec
                    if fut.group == Group.PP.value:
                        exp = sum(fut.exposed.values())
                    else:
                        exp = fut.exposed.get(R.rank, 0.0)
                    parts.append(Interval(R.stage, R.rank, fut.group, op.name, op.layer, op.phase.value, mb, ch,
                                          fut.start, fut.end, fut.group, op.bytes, exp))
        return parts
