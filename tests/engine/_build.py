"""Hand-made workloads and a closed-form network for the engine tests.

The backend is a real analytical model, stated here: a collective of S bytes on n ranks
takes ``latency + S / bw`` seconds, whatever else is on the network (contention-free).
"""
from __future__ import annotations

import heapq
from dataclasses import replace
import math

from network.backend import Completion, Transfer
from workload_gen.core.model_config import ModelConfig
from workload_gen.core.parallel_config import ParallelConfig
from workload_gen.core.records import (
    ChunkProgram,
    CollectiveOp,
    CollKind,
    ComputeOp,
    Group,
    OpKind,
    Phase,
    StageProgram,
    TimeSource,
    Workload,
)
from workload_gen.core.system import SYSTEMS

SYSTEM = replace(SYSTEMS["h100"], host_op_s=0.0)
"""The H100 node with an ideal host: these timelines are worked out by hand in whole seconds
without the host's launch work (tested on its own in test_host_launch)."""


class LinearBackend:
    """time = latency + bytes / bw per transfer; no sharing of links."""

    name = "linear"

    def __init__(self, bw: float = 1e11, latency: float = 0.0, contention_free: bool = True) -> None:
        self.bw, self.latency = bw, latency
        self.contention_free = contention_free
        self._heap: list[tuple[float, int]] = []
        self.submitted: list[tuple[Transfer, float]] = []

    def time(self, op: CollectiveOp) -> float:
        return self.latency + op.bytes / self.bw

    def collective_time(self, op: CollectiveOp, ranks: tuple[int, ...]) -> float:
        return self.time(op)

    def submit(self, transfer: Transfer, now: float) -> None:
        self.submitted.append((transfer, now))
        heapq.heappush(self._heap, (now + self.time(transfer.op), transfer.id))

    def next_completion_time(self) -> float:
        return self._heap[0][0] if self._heap else math.inf

    def advance_to(self, t: float) -> list[Completion]:
        out = []
        while self._heap and self._heap[0][0] <= t:
            ft, i = heapq.heappop(self._heap)
            out.append(Completion(i, ft))
        return out

    def advance_until(self, t: float) -> list[Completion]:
        first = self.next_completion_time()
        return self.advance_to(first) if first <= t else []


def cop(name: str, layer: int, phase: Phase, t: float, kind: OpKind = OpKind.GEMM) -> ComputeOp:
    return ComputeOp(name, layer, phase, kind, (1, 1, 1), "bf16", 1.0, 1.0, t, TimeSource.ESTIMATED)


def coll(name: str, layer: int, phase: Phase, group: Group, nbytes: int, n: int,
         kind: CollKind = CollKind.ALL_REDUCE, overlappable: bool = False, peer: int = 0) -> CollectiveOp:
    return CollectiveOp(name, layer, phase, kind, group, n, nbytes, overlappable, peer)


def model(layers: int) -> ModelConfig:
    return ModelConfig(num_layers=layers, hidden_size=64, num_attention_heads=4, vocab_size=128)


def workload(
    *, pp: int = 1, vpp: int = 1, m: int = 1, tp: int = 1, dp: int = 1, layers_per_chunk: int = 1,
    f: float = 1.0, b: float = 2.0, tp_bytes: int = 0, tp_overlap: bool = False, pp_bytes: int = 0,
    dp_bytes: tuple[int, ...] = (), overlap_grad: bool = False, opt_time: float = 0.0,
    gather_bytes: tuple[int, ...] = (), emb_bytes: int = 0, **par_kw,
) -> Workload:
    """pp*vpp chunks of ``layers_per_chunk`` layers; a chunk's forward takes ``f / vpp``
    seconds of compute and its backward ``b / vpp`` (so a whole stage takes f and b), split
    evenly over its layers. ``tp_bytes`` adds one TP all-reduce after each layer's compute
    in both directions. ``dp_bytes``: one DP gradient bucket per entry, bucket i holding
    layer i of the stage's first chunk (lowest layer of the bucket). ``gather_bytes``: a
    parameter all-gather per entry after the optimizer (layer i of the first chunk).
    ``emb_bytes``: a tied-embedding all-reduce between the first and last stage."""
    layers = pp * vpp * layers_per_chunk
    par = ParallelConfig(
        world_size=tp * pp * dp, tp=tp, pp=pp, vpp=vpp, global_batch=m * dp, micro_batch=1,
        seq_length=8, overlap_grad_reduce=overlap_grad, **par_kw,
    )
    stages = []
    for s in range(pp):
        chunks = []
        for c in range(vpp):
            v = c * pp + s
            ls = tuple(range(v * layers_per_chunk, (v + 1) * layers_per_chunk))
            fwd, bwd = [], []
            for layer in ls:
                fwd.append(cop("fc", layer, Phase.FWD, f / vpp / layers_per_chunk))
                if tp_bytes:
                    fwd.append(coll("tp_ar", layer, Phase.FWD, Group.TP, tp_bytes, tp, overlappable=tp_overlap))
            for layer in reversed(ls):
                bwd.append(cop("fc", layer, Phase.BWD_INPUT, b / vpp / layers_per_chunk / 2))
                if tp_bytes:
                    bwd.append(coll("tp_ar", layer, Phase.BWD_INPUT, Group.TP, tp_bytes, tp, overlappable=tp_overlap))
                bwd.append(cop("fc", layer, Phase.BWD_WEIGHT, b / vpp / layers_per_chunk / 2))
            if pp_bytes:
                if v < pp * vpp - 1:
                    fwd.append(coll("pp_send", ls[-1], Phase.FWD, Group.PP, pp_bytes, 2, CollKind.SEND_RECV, peer=1))
                if v > 0:
                    bwd.append(coll("pp_send", ls[0], Phase.BWD_INPUT, Group.PP, pp_bytes, 2, CollKind.SEND_RECV, peer=-1))
            chunks.append(ChunkProgram(s, c, ls, tuple(fwd), tuple(bwd)))
        it = []
        first_layers = chunks[0].layers
        for i, nb in enumerate(dp_bytes):
            it.append(coll(f"grad_bucket{i}", first_layers[i], Phase.ITERATION, Group.DP, nb, dp,
                           CollKind.ALL_REDUCE, overlappable=overlap_grad))
        if emb_bytes and pp > 1 and s in (0, pp - 1):
            it.append(coll("emb_ar", -1, Phase.ITERATION, Group.EMB, emb_bytes, 2))
        if opt_time:
            it.append(cop("adam", -1, Phase.ITERATION, opt_time, OpKind.OPTIMIZER))
        for i, nb in enumerate(gather_bytes):
            it.append(coll(f"param_ag{i}", first_layers[i], Phase.ITERATION, Group.DP, nb, dp, CollKind.ALL_GATHER))
        stages.append(StageProgram(s, tuple(chunks), tuple(it), params=1000, dense_params=1000))
    return Workload(model(layers), par, tuple(stages), params_total=1000 * pp, gpu="h100-sxm")
