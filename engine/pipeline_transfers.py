"""Pipeline transfers: the send/recv pairs that carry activations and gradients between stages.

Part of the event simulation of :mod:`engine.sim`, kept apart because its rules are the
pipeline's own (which pass feeds which, when a receive is posted, one send stream per
direction); the simulator decides when a rank sends or asks for its input and waits on
what these methods return.

A transfer is a :class:`~engine.entities.Future` with two parties: it starts when the
sender's pass has ended and the receiver has posted the receive (when it is ready to run
the pass that needs it, or earlier under the interleaved schedule's prefetch), on the
sender's send stream for that direction; the receiving pass starts when it has arrived.
A *virtual stage* is ``chunk * pp + stage`` (DualPipeV: a V, workload_gen.core.virtual_stages):
activations go from one to the next, so chunk c of the last stage feeds chunk c + 1 of the
first (DualPipeV: the last stage feeds its own chunk 1, a dependency without a transfer). A pass with nothing on the wire
(no send op) still orders its receiver: a pure dependency that ends when both joined.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from engine.communicators import Communicators
from engine.entities import Comm, Future, RankState, ReceiveKey
from engine.event_kinds import EV_FUTURE_DONE
from engine.loop import COMPLETION, EventLoop
from engine.program import PassSpec
from engine.schedules import Step
from workload_gen.core.records import Group
from workload_gen.core.virtual_stages import stage_chunk, virtual_stage

if TYPE_CHECKING:
    from engine.timeline import CollectiveRecord

PP_GROUP = Group.PP.value


class PipelineTransfers:
    """The pipeline transfers of one simulation, from the first party's join until the
    receiving pass starts."""

    def __init__(self, comms: Communicators, loop: EventLoop, *, pp: int, vpp: int, ranks_per_stage: int,
                 coll_rec: type[CollectiveRecord] | None = None, vshape: bool = False) -> None:
        self.comms = comms
        """Numbers the futures (one sequence with the collectives) and starts them on their stream."""
        self.loop = loop
        self.pp = pp
        self.num_virtual_stages = pp * vpp
        """Model chunk ``c`` of stage ``s`` is virtual stage ``virtual_stage(s, c, pp, vshape)``;
        activations flow from each virtual stage to the next."""
        self.vshape = vshape
        self.ranks_per_stage = ranks_per_stage
        self.coll_rec = coll_rec
        """The timeline's record type for a send, or None when the run keeps no timeline."""
        self._pipeline: dict[ReceiveKey, Future] = {}
        """Pipeline transfers, from the first party's join until the receiving pass starts."""
        self._send_streams: dict[tuple[int, int, bool], Comm] = {}
        """Pipeline send streams, keyed (rank, peer, forward): one per peer and direction, so a
        send waiting for its receiver holds back only later sends to that peer (DualPipeV's
        ranks send forward to both neighbours; Megatron's schedules have one peer per direction)."""

    def _input_key(self, rank: RankState, step: Step) -> ReceiveKey | None:
        """The transfer feeding ``step`` on ``rank``; None for a pass with no pipeline input
        (a deferred weight-gradient part has none: its input part received it)."""
        if step.part == "weight":
            return None
        virtual = virtual_stage(rank.stage, step.chunk, self.pp, self.vshape)
        if (virtual > 0) if step.forward else (virtual < self.num_virtual_stages - 1):  # has a pipeline input
            return (rank.rank, step.forward, virtual, step.microbatch)
        return None

    def _pp_peer(self, rank: RankState, stage: int) -> int:
        # PP is the outermost dimension of Megatron's rank order.
        return rank.rank + (stage - rank.stage) * self.ranks_per_stage

    def _transfer(self, key: ReceiveKey) -> Future:
        """The transfer feeding one pass: joined by the sender (pass end) and the receiver
        (when it asks for its input), like an NCCL send/recv pair."""
        fut = self._pipeline.get(key)
        if fut is None:
            fut = self._pipeline[key] = self.comms.new_future(PP_GROUP, None, (), 2)
        return fut

    def _join(self, fut: Future, stage: int, now: float) -> None:
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
            self.comms.start_next(fut.comm, now)

    def send(self, rank: RankState, step: Step, spec: PassSpec, now: float) -> Future | None:
        """The pass ends: join the transfer of its output to the next virtual stage."""
        virtual = virtual_stage(rank.stage, step.chunk, self.pp, self.vshape)
        dst_virtual = virtual + 1 if step.forward else virtual - 1
        if dst_virtual < 0 or dst_virtual >= self.num_virtual_stages:
            return None
        dst = self._pp_peer(rank, stage_chunk(dst_virtual, self.pp, self.vshape)[0])
        fut = self._transfer((dst, step.forward, dst_virtual, step.microbatch))
        if spec.send is not None:
            fut.op = spec.send
            fut.ranks = (rank.rank, dst)
            # One send stream per peer and direction: sends leave in the order they were issued.
            key = (rank.rank, dst, step.forward)
            comm = self._send_streams.get(key)
            if comm is None:
                comm = self._send_streams[key] = Comm()
            fut.comm = comm
            comm.queue.append(fut)
            if self.coll_rec is not None:
                rank.records.append(self.coll_rec(spec.send, fut, step.chunk, step.microbatch))
        self._join(fut, rank.stage, now)
        return fut

    def post_next_receive(self, rank: RankState, now: float, forward: bool | None = None) -> None:
        """Post the receive of the next pass's input (of the next pass in direction
        ``forward`` when given), if it has one and it is not posted."""
        cursor, steps = rank.cursor, rank.steps
        i = cursor.next_step
        if forward is not None:
            while i < len(steps) and (steps[i].forward != forward or steps[i].part == "weight"):
                i += 1
        if i >= len(steps):
            return
        key = self._input_key(rank, steps[i])
        if key is not None and key not in cursor.posted:
            cursor.posted.add(key)
            self._join(self._transfer(key), rank.stage, now)

    def receive(self, rank: RankState, step: Step, now: float) -> Future | None:
        """The rank is ready to run ``step``: the input transfer it must wait for (its
        receive posted now if it was not), or None when the input has arrived (it is then
        consumed) or the pass has none."""
        waiting = self.receive_all(rank, (step,), now)
        return waiting[0] if waiting else None

    def receive_all(self, rank: RankState, steps: tuple[Step, ...], now: float) -> list[Future]:
        """The rank is ready to run ``steps`` as one combined pass: post every input's receive,
        and return the transfers still on the way; when none is, consume them all (empty list)."""
        keys = [key for key in (self._input_key(rank, st) for st in steps) if key is not None]
        cursor = rank.cursor
        waiting = []
        for key in keys:
            fut = self._transfer(key)
            if key not in cursor.posted:
                if fut.end is not None:  # a transfer cannot end before its receive is posted
                    raise AssertionError(f"pipeline transfer {key} completed before its receive was posted")
                cursor.posted.add(key)  # first time here: post the receive
                self._join(fut, rank.stage, now)
            if fut.end is None:
                waiting.append(fut)
        if waiting:
            return waiting
        for key in keys:
            cursor.posted.discard(key)
            del self._pipeline[key]
        return []
