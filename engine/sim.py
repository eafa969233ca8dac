"""The event simulation of one training iteration: ranks running their schedules.

Entities (kept apart from how they are built, STYLE.md section 1, in :mod:`engine.entities`):

- a *rank* runs its stage's pipeline schedule: a list of passes (forward or backward
  of one chunk for one micro-batch), then the once-per-iteration tail;
- a *communicator* runs its collectives one at a time, in issue order
  (:mod:`engine.communicators`);
- a pipeline transfer is a send/recv pair between stages (:mod:`engine.pipeline_transfers`).
  In 1F1B the sender waits for its send (Megatron's blocking p2p); in the interleaved
  schedule it does not (see docs/engine.md).

This module holds what a rank does and when: it begins passes, runs their ops, issues
collectives, waits, and dispatches the engine's events. Where a wait is charged is
:mod:`engine.waits`; what a finished run hands back is :mod:`engine.sim_results`.

Words used in the code: a *virtual stage* is ``chunk * pp + stage``, or DualPipeV's V
(workload_gen.core.virtual_stages) (activations go
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
kernels take one or two SMs where a collective takes one per channel), charged to compute
(``Accounts.slowdown`` keeps the added part). At pass level the pass's own collectives are in its profile; a pass that
may overlap collectives from outside it (gradient buckets released during it or still
running, parameter gathers) runs op by op, so both levels apply the same rule.

Accounting: a wait is charged when it ends, to what the rank waited for (bubble, other or
the exposed communication of a group; :mod:`engine.waits` gives the rule). Idle time after
a rank's last op until the end of the iteration is bubble (pp > 1) or other.
"""
from __future__ import annotations

from engine.communicators import Communicators
from engine.entities import INF, MEMOISED_PASS, Future, RankState
from engine.event_kinds import (EV_COMPUTE_DONE, EV_FUTURE_DONE, EV_GRAD_READY, EV_HOST_ISSUE, EV_LAUNCHED,
                                EV_PASS_DONE)
from engine.loop import COMPLETION, EventLoop
from engine.passes import PassProfile, profile_pass
from engine.pipeline_transfers import PipelineTransfers
from engine.program import PassSpec, build_plans
from engine.schedules import SCHEDULES, Step
from engine.sim_results import rank_breakdown, timeline_parts
from engine.waits import block, unblock
from network.backend import NetworkBackend
from workload_gen.core.records import STEP_OVERHEAD_OP, ComputeOp, OpKind, Workload
from workload_gen.core.run_result import Breakdown


_PART_SLOT = {"": -1, "input": -2, "weight": -3}
"""A pass's profile-cache slot when it has no paired backward: whole, or a split backward's
input or weight part (engine.zero_bubble)."""

class Simulator:
    """One iteration of one workload on one backend; call :meth:`run` once.

    Read by :func:`engine.api.simulate`: ``ranks`` (a :class:`RankState` per simulated rank),
    :meth:`representatives`, :meth:`breakdown`, :meth:`timeline_parts`, ``events`` and
    ``transfers``.
    """

    def __init__(
        self, workload: Workload, backend: NetworkBackend, *, memo: bool, all_ranks: bool,
        timeline: bool, schedule: str, host_op_s: float = 0.0,
    ) -> None:
        par = workload.parallel
        self.par = par
        self.backend = backend
        self.memo = memo
        self.timeline = timeline
        coll_rec = None
        if timeline:  # the record types, loaded only by runs that keep a timeline
            from engine.timeline import Block, CollectiveRecord, ComputeRecord

            self._block_rec, coll_rec, self._comp_rec = Block, CollectiveRecord, ComputeRecord
        self.schedule = schedule
        self.plans = build_plans(workload)
        self.num_microbatches = par.num_microbatches
        self.pp = par.pp
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
        self.a2a_overlap = par.overlap_moe_expert_parallel_comm and par.ep > 1
        """Megatron's EP all-to-all overlap: steady-state forward/backward neighbours run as
        one combined pass (engine.a2a_overlap)."""
        extra = {"extra_warmup": 1} if self.a2a_overlap and schedule == "interleaved" else {}
        steps = [sched(par.pp, par.vpp, self.num_microbatches, s, **extra) for s in range(par.pp)]
        if self.a2a_overlap and not any(st.pair is not None for stage in steps for st in stage):
            # a schedule that pairs its own forwards and backwards (DualPipeV) is kept as it is
            from engine.a2a_overlap import pair_steps  # MoE runs only: kept off the dense import path

            steps = [pair_steps(st, self.num_microbatches) for st in steps]
        self._layers = workload.model.num_layers if workload.model is not None else 0
        self._merged: dict[tuple[int, int, int], PassSpec] = {}
        """(stage, forward chunk, backward chunk) -> the combined pass (built when first run)."""
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
        self.flex_slowdown = 0.0
        """The same beside the flex dispatcher's kernels: their SM share (engine.moe_traffic),
        never below the collectives' factor (engine.passes.interference); 0 without them."""
        if par.ep > 1 and par.flex_backend is not None:
            from engine.moe_traffic import flex_sm_slowdown

            self.flex_slowdown = max(flex_sm_slowdown(workload), self.slowdown)
        for rank in self.ranks:
            for b in rank.plan.buckets:
                if par.overlap_grad_reduce and b.chunk >= 0:
                    rank.grads.by_ready_point.setdefault((b.chunk, b.ready_index), []).append(b.op)
        self._parts: dict[tuple[int, int, str], PassSpec] = {}
        """(stage, chunk, "input" | "weight") -> a split backward's part (engine.zero_bubble)."""
        if any(st.part for steps_of in steps for st in steps_of):
            self._register_weight_parts()
        self.loop = EventLoop()
        self.comms = Communicators(par, backend, self.simulated_ranks, self.loop, memo=memo,
                                   slowdown=self.slowdown, flex_slowdown=self.flex_slowdown, coll_rec=coll_rec)
        """The communicators and their collective instances (and the futures' numbering)."""
        self.p2p = PipelineTransfers(self.comms, self.loop, pp=par.pp, vpp=par.vpp, ranks_per_stage=per_stage,
                                     coll_rec=coll_rec, vshape=par.vshape)
        """The pipeline transfers between stages."""
        from engine.host_launch import HostModel

        self.host = HostModel(workload, host_op_s)
        """Host launch costs and synchronisations (engine.host_launch), applied at both levels."""
        self._profiles: dict[tuple[int, int, bool, int], PassProfile] = {}
        """(stage, chunk, forward, paired chunk or -1) -> the memoised pass."""
        self.events = 0

    @property
    def transfers(self) -> int:
        """Collective instances and pipeline transfers started."""
        return self.comms.transfers

    def _complete(self, fut: Future, now: float) -> None:
        self.comms.finish(fut, now)
        waiters = fut.waiters
        if waiters:
            fut.waiters = []
            for rank in waiters:
                blocked_on = rank.blocked.futures
                if blocked_on is not None and all(f.end is not None for f in blocked_on):
                    unblock(rank, now)
                    self._run(rank)

    def _host_issue(self, now: float, rank: RankState, labels: tuple[int, int], hold: Future) -> None:
        """The host launches a collective the rank reached earlier (EV_HOST_ISSUE): the real
        instance of the placeholder ``hold``'s op replaces it wherever the rank holds it."""
        fut = self.comms.issue(rank, hold.op, now, *labels)
        # the wait before the collective was ready is host time only if this late launch is
        # what made it ready (the last party); a later ordinary joiner makes it skew, as usual
        fut.host_gated = fut.missing == 0
        overlapped = rank.overlapped
        overlapped.pending = [(d, fut if f is hold else f) for d, f in overlapped.pending]
        blocked = rank.blocked.futures
        if blocked is not None and hold in blocked:
            rank.blocked.futures = [fut if f is hold else f for f in blocked]
            fut.waiters.append(rank)  # just issued: it cannot have ended

    # ------------------------------------------------------------------ passes
    def _combined(self, rank: RankState, step: Step) -> PassSpec:
        """The combined pass of ``step`` and its paired backward (engine.a2a_overlap)."""
        key = (rank.stage, step.chunk, step.pair.chunk)
        spec = self._merged.get(key)
        if spec is None:
            from engine.a2a_overlap import merge_passes

            passes = rank.plan.passes
            spec = self._merged[key] = merge_passes(passes[(step.chunk, True)], passes[(step.pair.chunk, False)],
                                                    self._layers, self.par.delay_wgrad_compute)
        return spec

    def _split(self, stage: int, chunk: int) -> tuple[PassSpec, PassSpec, tuple[int, ...]]:
        """The (input, weight, weight ops' full-pass indices) of a stage's backward of ``chunk``."""
        from engine.zero_bubble import split_backward

        got = split_backward(self.plans[stage].passes[(chunk, False)])
        self._parts[(stage, chunk, "input")], self._parts[(stage, chunk, "weight")] = got[0], got[1]
        return got

    def _register_weight_parts(self) -> None:
        """Gradient buckets of a split backward become ready in its weight part: each ready point
        is registered again under the key (~chunk, index in the weight part)."""
        from engine.zero_bubble import ready_in_weight_part

        for rank in self.ranks:
            by_point = rank.grads.by_ready_point
            for (chunk, i), ops in list(by_point.items()):
                if chunk < 0:
                    continue
                full_index = self._split(rank.stage, chunk)[2]
                by_point.setdefault((~chunk, ready_in_weight_part(i, full_index)), []).extend(ops)

    def _part(self, rank: RankState, step: Step) -> PassSpec:
        spec = self._parts.get((rank.stage, step.chunk, step.part))
        if spec is None:
            self._split(rank.stage, step.chunk)
            spec = self._parts[(rank.stage, step.chunk, step.part)]
        return spec

    def _profile(self, rank: RankState, spec: PassSpec, pair: int | None = None, part: str = "") -> PassProfile:
        # (stage, chunk, forward, paired backward's chunk, or -1 / -2 input part / -3 weight
        # part): a bool and an int must not share a key slot
        slot = pair if pair is not None else _PART_SLOT[part]
        key = (rank.stage, spec.chunk, spec.forward, slot)
        prof = self._profiles.get(key)
        if prof is None:
            if spec.forward or part == "input":
                ready = frozenset()
            else:
                c = ~spec.chunk if part == "weight" else spec.chunk
                ready = frozenset(i for (cc, i) in rank.grads.by_ready_point if cc == c)
            comms = self.comms
            prof = profile_pass(spec.ops, lambda op: comms.duration(op, comms.membership(rank, op.group).members),
                                ready, spec.deadline, spec.issue_with, self.slowdown, self.flex_slowdown,
                                self.host.plan(id(spec), spec.ops, spec.launched_before))
            self._profiles[key] = prof
        return prof

    def _begin_step(self, rank: RankState, now: float) -> bool:
        """Start the rank's next pass; False when it must wait for its input or runs memoised."""
        cursor = rank.cursor
        step = rank.steps[cursor.next_step]
        if step.pair is None:
            fut = self.p2p.receive(rank, step, now)
            if fut is not None:  # its input has not arrived
                block(rank, [fut], now)
                return False
            spec = self._part(rank, step) if step.part else rank.plan.passes[(step.chunk, step.forward)]
        else:  # a combined pass needs both inputs
            waiting = self.p2p.receive_all(rank, (step, step.pair), now)
            if waiting:
                block(rank, waiting, now)
                return False
            spec = self._combined(rank, step)
        cursor.next_step += 1
        cursor.step = step
        grads, gathers = rank.grads, rank.gathers
        grads.release_this_pass = ((not step.forward) and step.microbatch == self.num_microbatches - 1
                                   and step.part != "input" and bool(grads.by_ready_point))
        gathers.gate_this_pass = step.forward and step.microbatch == 0 and bool(gathers.issued)
        # With interference, a pass that collectives from outside it may overlap (running
        # now, or gradient buckets it releases) runs op by op (see the module docstring).
        outside = (self.slowdown or self.flex_slowdown) and (rank.comm_busy or grads.release_this_pass)
        if self.memo and spec.memoisable and not gathers.gate_this_pass and not outside:
            prof = self._profile(rank, spec, None if step.pair is None else step.pair.chunk, step.part)
            acc = rank.acc
            acc.compute += prof.compute_s
            acc.optimizer += prof.optimizer_s
            acc.slowdown += prof.slowdown_s
            acc.host += prof.host_s
            for g, x in prof.exposed:
                acc.exposed[g] += x
            if self.timeline:
                rank.records.append(self._block_rec(rank.stage, rank.rank, prof, now, step.chunk, step.microbatch,
                                                    step.pair))
            if grads.release_this_pass:
                c = ~step.chunk if step.part == "weight" else step.chunk
                for i, off in prof.ready_offsets:
                    ops = grads.by_ready_point.get((c, i))
                    if ops:
                        self.loop.schedule(now + off, COMPLETION, EV_GRAD_READY, (rank, ops))
            cursor.spec = spec
            cursor.op_index = MEMOISED_PASS
            self.loop.schedule(now + prof.duration, COMPLETION, EV_PASS_DONE, rank)
            return False
        cursor.spec = spec
        cursor.op_index = 0
        rank.host = plan = self.host.plan(id(spec), spec.ops, spec.launched_before)
        if plan is not None:
            rank.cpu = now if plan.synced else -INF
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
                grads.issued.append(self.comms.issue(rank, b.op, now, b.chunk, -1))
        cursor.spec = rank.tail_spec
        cursor.op_index = 0
        cursor.step = None
        rank.host = None
        if any(f.end is None for f in grads.issued):
            block(rank, list(grads.issued), now)
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
            if cursor.in_tail and gathers.in_tail is None and rank.plan.tail_gathers:
                # the optimizer step begins: the first bucket's gather runs beside it
                gathers.in_tail = [self.comms.issue(rank, op, now, -1, -1) for op in rank.plan.tail_gathers]
            ops = spec.ops
            n = len(ops)
            while cursor.op_index < n:
                i = cursor.op_index
                if overlapped.pending and overlapped.next_deadline <= i:
                    # overlapped collectives that must end before this op
                    need = [f for deadline, f in overlapped.pending if deadline <= i]
                    if any(f.end is None for f in need):
                        block(rank, need, now)
                        return
                    overlapped.pending = [p for p in overlapped.pending if p[0] > i]
                    overlapped.next_deadline = min((deadline for deadline, _ in overlapped.pending), default=INF)
                op = ops[i]
                if type(op) is ComputeOp:
                    if gathers.gate_this_pass and op.layer > gathers.done_through_layer:
                        need = [f for layer, f in gathers.issued if layer <= op.layer]
                        if any(f.end is None for f in need):
                            block(rank, need, now)
                            return
                        gathers.done_through_layer = op.layer  # every layer up to here has its parameters
                    step = cursor.step
                    issue_now = spec.issue_with.get(i)
                    if issue_now:  # overlappable collectives that run alongside this op
                        for k in issue_now:
                            fut = self.comms.issue(rank, ops[k], now, *step.labels(ops[k].phase))
                            deadline = spec.deadline[k]
                            overlapped.pending.append((deadline, fut))
                            if deadline < overlapped.next_deadline:
                                overlapped.next_deadline = deadline
                    d = op.time_s
                    if rank.comm_busy and d:
                        extra = d * (self.flex_slowdown if rank.flex_busy else self.slowdown)
                        rank.acc.slowdown += extra
                        d += extra
                    start = now
                    host = rank.host
                    if host is not None and not (host.ahead and i in host.ahead):  # else launched ahead
                        rank.cpu += host.launch[i]
                        if rank.cpu > now:  # the GPU waits for the launch
                            rank.acc.host += rank.cpu - now
                            start = rank.cpu
                        if host.syncs[i] and rank.cpu < start + d:
                            rank.cpu = start + d  # the host waits for this op's result
                    if op.kind is not OpKind.OPTIMIZER:
                        rank.acc.compute += d
                    elif op.name == STEP_OVERHEAD_OP:  # the optimizer step's fixed host work: the GPU waits
                        rank.acc.host += d
                    else:
                        rank.acc.optimizer += d
                    if self.timeline:
                        rank.records.append(self._comp_rec(op, start, start + d,
                                                          *(step.labels(op.phase) if step else (-1, -1))))
                    self.loop.schedule(start + d, COMPLETION, EV_COMPUTE_DONE, rank)
                    return
                host = rank.host
                issue_at = now
                if host is not None and rank.launched != i:
                    # as engine.passes.profile_pass: a collective's launch delays the host, not the
                    # GPU, unless it is a sync point (the host waits for the GPU, the GPU for it);
                    # an overlappable one starts at its launch while the compute stream runs on
                    sync = host.syncs[i]
                    if sync and op.overlappable:  # the host's wait covers its group's earlier collectives
                        g = op.group.value
                        ahead = [f for _, f in overlapped.pending if f.group == g and f.end is None]
                        if ahead:
                            block(rank, ahead, now)
                            return
                    pre = host.before.get(i)
                    if pre:
                        rank.cpu += pre
                    if sync and rank.cpu < now:
                        rank.cpu = now
                    rank.cpu += host.launch[i]
                    if op.overlappable:
                        if rank.cpu > now:  # it starts when launched; the compute stream runs on
                            issue_at = rank.cpu
                    elif sync and rank.cpu > now:
                        rank.acc.host += rank.cpu - now
                        rank.launched = i  # resumed by EV_LAUNCHED at the launch, its cost paid
                        self.loop.schedule(rank.cpu, COMPLETION, EV_LAUNCHED, rank)
                        return
                rank.launched = -1
                cursor.op_index += 1
                if cursor.in_tail:  # once-per-iteration collectives all block
                    fut = self.comms.issue(rank, op, now, -1, -1)
                elif op.overlappable:
                    if i not in spec.pre_issued:
                        step = cursor.step
                        if issue_at > now:  # launched by the host later: a placeholder until then
                            fut = Future(-1, op.group.value, op, (), 1)
                            self.loop.schedule(issue_at, COMPLETION, EV_HOST_ISSUE,
                                               (rank, step.labels(op.phase), fut))
                        else:
                            fut = self.comms.issue(rank, op, now, *step.labels(op.phase))
                        deadline = spec.deadline[i]
                        overlapped.pending.append((deadline, fut))
                        if deadline < overlapped.next_deadline:
                            overlapped.next_deadline = deadline
                    continue
                else:
                    step = cursor.step
                    fut = self.comms.issue(rank, op, now, *step.labels(op.phase))
                if fut.end is None:
                    block(rank, [fut], now)
                    return
            if overlapped.pending:  # the pass ends when everything it issued has ended
                need = [f for _, f in overlapped.pending]
                if any(f.end is None for f in need):
                    block(rank, need, now)
                    return
                overlapped.pending = []
                overlapped.next_deadline = INF
            if cursor.in_tail and gathers.in_tail and any(f.end is None for f in gathers.in_tail):
                block(rank, list(gathers.in_tail), now)  # the iteration ends when its gathers have
                return
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
        if step.pair is not None:  # a combined pass sends both outputs (interleaved or no pipeline: eager)
            passes = rank.plan.passes
            self.p2p.send(rank, Step(step.chunk, True, step.microbatch), passes[(step.chunk, True)], now)
            self.p2p.send(rank, step.pair, passes[(step.pair.chunk, False)], now)
            if self.prefetch_p2p:
                self.p2p.post_next_receive(rank, now, True)
                self.p2p.post_next_receive(rank, now, False)
            return
        if step.part == "weight":  # the input part sent the gradient; a weight part feeds no stage
            return
        fut = self.p2p.send(rank, step, spec, now)
        if self.prefetch_p2p:
            self.p2p.post_next_receive(rank, now, step.forward)
        if self.blocking_p2p and fut is not None and spec.send is not None and not spec.send.overlappable:
            # Megatron's 1F1B p2p is blocking: the rank waits for its send. Between a
            # forward and a backward the send is batched with the receive of the next
            # pass's input (send_forward_recv_backward, send_backward_recv_forward), which
            # is therefore posted now; in warm-up and cool-down it is a separate call.
            nxt = rank.steps[cursor.next_step] if cursor.next_step < len(rank.steps) else None
            if nxt is not None and nxt.forward != step.forward:
                self.p2p.post_next_receive(rank, now)
            if fut.end is None:
                block(rank, [fut], now)

    # ------------------------------------------------------------------ main loop
    def run(self) -> float:
        loop = self.loop
        for rank in self.ranks:
            for op in rank.plan.gathers:
                rank.gathers.issued.append((op.layer, self.comms.issue(rank, op, 0.0, -1, -1)))
        for rank in self.ranks:
            self._run(rank)
        backend = self.backend
        in_network = self.comms.in_network
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
                    st = cursor.step
                    ops = grads.by_ready_point.get((~st.chunk if st.part == "weight" else st.chunk, cursor.op_index))
                    if ops:
                        for op in ops:
                            grads.issued.append(self.comms.issue(rank, op, t, cursor.step.chunk, -1))
                cursor.op_index += 1
                self._run(rank)
            elif kind == EV_FUTURE_DONE:
                self._complete(data, t)
            elif kind == EV_LAUNCHED:
                self._run(data)
            elif kind == EV_HOST_ISSUE:
                self._host_issue(t, *data)
            elif kind == EV_PASS_DONE:
                rank = data
                rank.cursor.op_index = 0
                self._end_pass(rank, t)
                self._run(rank)
            else:  # EV_GRAD_READY
                rank, ops = data
                step = rank.cursor.step
                for op in ops:
                    rank.grads.issued.append(self.comms.issue(rank, op, t, step.chunk if step else -1, -1))
        self.events = events
        stuck = [rank.rank for rank in self.ranks if not rank.done]
        if stuck:
            raise AssertionError(f"simulation deadlocked; ranks not finished: {stuck[:8]}")
        return max(rank.end for rank in self.ranks)

    # ------------------------------------------------------------------ results
    def breakdown(self, rank: RankState, total: float) -> Breakdown:
        """The rank's breakdown of an iteration of ``total`` seconds (engine.sim_results)."""
        return rank_breakdown(rank, total, self.pp)

    def representatives(self) -> list[RankState]:
        """The rank with tp = cp = dp = 0 of each stage."""
        by_rank = {rank.rank: rank for rank in self.ranks}
        return [by_rank[s * self.ranks_per_stage] for s in range(self.pp)]

    def timeline_parts(self) -> list:
        """Parts of the :class:`engine.timeline.Timeline` (engine.sim_results)."""
        return timeline_parts(self.ranks)
