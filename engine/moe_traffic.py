"""The flex dispatcher's traffic once the node size is known: one RDMA copy per remote node.

Why here and not in the workload: the workload is built without a system, so it sizes the
flex dispatcher's all-to-all by distinct EP *ranks* (workload_gen.core.moe_dispatch). When
the EP group spans several NVLink domains, DeepEP's internode kernels and HybridEP send
each token over RDMA once per remote *node* that holds one of its experts, to the GPU of
the same rail, which forwards it over NVLink to the ranks that need it (DeepEP
``internode.cu`` dispatch: RDMA sender, NVLink forwarder, receiver warps; the same
hierarchy DeepSeek-V3's report describes, sec. 3.2.2). A token with top-8 experts over
four nodes crosses the scale-out fabric at most three times, not up to eight.

The engine's backends time an all-to-all from one byte count, split by the group's shape:
``(n - k) / n`` of it leaves the node (network.busbw, alltoall path, k ranks per node). So
the dispatch and combine ops get the byte count whose inter-node share is the RDMA volume,

    bytes = T * h * b * R * n / (n - k) * r,   R = (nodes - 1) * P(a given remote node is hit),

P from the same uniform (force-balanced, optionally group-limited) routing as the rank
count, with a node's experts those of its k consecutive EP ranks, and r the busiest rank's
load over the mean (workload_gen.core.moe_routing), as in the workload's own count. Within one node the
workload's own count stands. The NVLink share this implies is smaller than the forwarding
DeepEP does, which is not the bottleneck at ~9x the NIC's bandwidth (stated in
docs/engine.md).
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace

from engine.passes import is_flex_kernel
from workload_gen.core.errors import ConfigError
from workload_gen.core.gpu_specs import get_gpu
from workload_gen.core.moe_dispatch import distinct_ranks, rank_hit_probability
from workload_gen.core.moe_routing import rank_load_factor
from workload_gen.core.placement import GroupShape, group_ranks
from workload_gen.core.records import CollectiveOp, Group, Workload
from workload_gen.core.system import SystemConfig


def remote_node_copies(num_experts: int, topk: int, ep: int, nodes: int,
                       num_groups: int | None = None, group_topk: int | None = None) -> float:
    """Expected RDMA copies of one token: remote nodes holding one of its experts (uniform
    routing; the EP group's ``ep`` ranks in ``nodes`` equal nodes of consecutive ranks)."""
    if nodes <= 1:
        return 0.0
    if ep % nodes or num_experts % nodes:
        raise ValueError(f"EP {ep} over {nodes} nodes is not an even split")
    return (nodes - 1) * rank_hit_probability(num_experts, topk, nodes, num_groups, group_topk)


FLEX_RDMA_GBPS: dict[str, dict[int, tuple[float, float]]] = {
    "hybridep": {16: (54.47, 53.35), 32: (47.36, 52.53), 64: (41.24, 46.57)},
    "deepep": {16: (43.0, 43.0), 32: (58.0, 57.0), 64: (51.0, 50.0)},
}
"""The flex kernels' published inter-node rates, EP ranks (8 GPUs per node, one ConnectX-7
400 Gb/s NIC each) -> (dispatch, combine) GB/s, 4096 tokens of hidden 7168, top-8:

- hybridep: H100, through the torch API that Megatron-Core calls, 16 SMs (its default;
  Megatron's recipes give 16-32), BF16 dispatch, 8 local experts per rank, uniform routing
  (deepseek-ai/DeepEP@41cad944 docs/README_Hybrid-EP.md, "H100 Platform" table);
- deepep: DeepEP's normal kernels on H800, FP8 dispatch and BF16 combine, top-4 groups
  (deepseek-ai/DeepEP@0297fc80 docs/legacy.md, "Normal kernels with NVLink and RDMA
  forwarding").

Both benchmarks count one RDMA token per (token, node holding one of its experts) *including
the sender's own node* (HybridEP's tests/test_hybrid_ep.py count_rdma_send_from_routing_map:
"we do not set the local node map to zeros", to align with DeepEP's count; both tables exceed
the NIC's 50 GB/s at 4 nodes otherwise). By symmetry every node is hit with the same
probability, so only (nodes - 1) / nodes of the counted bytes cross the fabric."""
FLEX_LINE_RATE = 400e9 / 8
"""The benchmarks' per-GPU NIC: ConnectX-7 400 Gb/s (DeepEP: "CX7 InfiniBand 400 Gb/s RDMA
network card (~50 GB/s maximum bandwidth)"; DGX H100 datasheet)."""


def flex_rdma_efficiency(backend: str, nodes: int) -> float:
    """Fraction of the NIC's line rate that the flex dispatcher's RDMA traffic achieves with the
    EP group over ``nodes`` nodes: from :data:`FLEX_RDMA_GBPS`, the mean of dispatch and combine
    times (nodes - 1) / nodes over the line rate, log-linear in the node count between the
    published 2, 4 and 8 nodes and held outside them. At 2 nodes HybridEP reaches 0.54 and
    DeepEP 0.43, at 4-8 nodes 0.75-0.77 and 0.86-0.88: per-token work (GPU-initiated RDMA
    writes, NVLink forwarding, the torch API's metadata) and not the wire bounds these kernels
    on few nodes, where NCCL's all-to-all reaches ~0.9. Other GPUs and NICs take the same
    fractions (the only inter-node tables published; stated in docs/engine.md)."""
    table = FLEX_RDMA_GBPS.get(backend, FLEX_RDMA_GBPS["hybridep"])
    points = sorted((ranks // 8, (d + c) / 2 * 1e9 * (1 - 8 / ranks) / FLEX_LINE_RATE)
                    for ranks, (d, c) in table.items())
    if nodes <= points[0][0]:
        return points[0][1]
    for (n0, e0), (n1, e1) in zip(points, points[1:]):
        if nodes <= n1:
            w = (math.log2(nodes) - math.log2(n0)) / (math.log2(n1) - math.log2(n0))
            return e0 + w * (e1 - e0)
    return points[-1][1]


def hierarchical_dispatch(workload: Workload, domain_gpus: int, nic_efficiency: float | None = None) -> Workload:
    """``workload`` with its flex dispatch/combine all-to-alls sized for node-level
    deduplication (module docstring); unchanged unless the flex dispatcher's EP group spans
    nodes. ``domain_gpus``: GPUs per NVLink domain (SystemConfig.domain_gpus), the "node"
    whose copies are deduplicated (72 on NVL72). ``nic_efficiency``: the fraction of the NIC's
    line rate the backend's all-to-all path assumes (SystemConfig.nic_efficiency); given, the
    bytes are scaled by it over :func:`flex_rdma_efficiency` of the run's backend, so that the backend times the
    RDMA volume at the kernels' published rate instead of NCCL's."""
    par, model = workload.parallel, workload.model
    if model is None or par.ep <= 1 or par.flex_backend is None:
        return workload
    shape = GroupShape.from_ranks(group_ranks(par, Group.EP, 0), domain_gpus)
    n, nodes, k = shape.n, shape.nodes, shape.per_node
    if nodes <= 1 or k * nodes != n:
        return workload  # one node, or an uneven split: the rank-level count stands
    copies = remote_node_copies(model.num_experts, model.moe_router_topk, n, nodes,
                                par.moe_router_num_groups, par.moe_router_group_topk)
    tokens = par.routed_tokens
    b = par.param_bytes
    # the busiest rank receives rank_load_factor x the mean, as the workload's own count does
    load = rank_load_factor(model, par, tokens)
    rate = 1.0 if nic_efficiency is None else nic_efficiency / flex_rdma_efficiency(par.flex_backend, nodes)
    nbytes = round(tokens * model.hidden_size * b * copies * n / (n - k) * load * rate)
    return _resize_flex_kernels(workload, lambda _: nbytes)


def _resize_flex_kernels(workload: Workload, size: Callable[[int], int], meta: dict[str, str] | None = None) -> Workload:
    """``workload`` with every flex dispatch/combine all-to-all's bytes replaced by ``size(bytes)``
    (and ``meta`` added to Workload.meta): the one rewrite both sizings above and below use."""
    def fix(ops):
        return tuple(replace(op, bytes=size(op.bytes)) if type(op) is CollectiveOp and is_flex_kernel(op) else op
                     for op in ops)

    stages = tuple(replace(st, chunks=tuple(replace(ch, forward=fix(ch.forward), backward=fix(ch.backward))
                                            for ch in st.chunks)) for st in workload.stages)
    return replace(workload, stages=stages, meta={**workload.meta, **(meta or {})})


FLEX_NVLINK_GBPS: dict[str, dict[tuple[int, int], tuple[float, float]]] = {
    "hybridep": {(8, 16): (550.10, 538.44), (8, 32): (545.71, 568.94),
                 (16, 16): (472.84, 474.48), (16, 32): (523.48, 521.55),
                 (24, 16): (441.89, 444.40), (24, 32): (507.32, 483.76),
                 (32, 16): (485.50, 423.19), (32, 32): (484.22, 464.54),
                 (36, 16): (469.96, 418.27), (36, 32): (479.02, 447.89)},
    "deepep": {(8, 16): (362.01, 310.21), (8, 24): (512.72, 425.95), (8, 32): (615.78, 519.57),
               (16, 16): (328.80, 278.34), (16, 24): (442.47, 378.32), (16, 32): (520.76, 442.51),
               (24, 16): (324.64, 126.53), (24, 24): (450.22, 163.62), (24, 32): (502.84, 207.10)},
}
"""The flex kernels' published rates inside one NVLink domain, (EP ranks, SMs) -> (BF16 dispatch,
combine) GB/s, through the torch API that Megatron-Core calls, on GB200 NVL72 (ranks beyond 4 span
compute trays over the NVLink switches): 4096 tokens of hidden 7168 per rank, top-8, 8 local
experts per rank, uniform random routing (deepseek-ai/DeepEP@41cad944 docs/README_Hybrid-EP.md,
"GB200 Platform" tables). A rate is the bytes a rank *receives*, its own tokens included, over
the call's time (tests/test_hybrid_ep.py: ``dispatched_hidden.numel() * 2``), which by symmetry
is the per-rank byte count of the workload's dispatch and combine (T x D x h x 2,
workload_gen.core.moe_dispatch). The same page's B200 rows at 8 ranks and 16 SMs agree within
3% (HybridEP 535.94 / 530.86; DeepEP 348 / 302). The kernels alone run 1.27-1.36x faster
(HybridEP at 8 ranks and 16 SMs: 750.15 / 684.27 GB/s): the torch API adds the copies into and out of the
registered buffers, GPU work a training step pays too."""
FLEX_NVLINK_BENCH_BW = 900e9
"""The benchmarks' NVLink: NVLink 5, 900 GB/s per GPU and direction (GB200 NVL72, DGX B200)."""
FLEX_BENCH_SHAPE = (4096, 7168, 8, 8)
"""The benchmarks' tokens per rank, hidden size, top-k and local experts per rank."""


def flex_nvlink_rate(backend: str, ranks: int, sms: int) -> float | None:
    """Bytes/s per rank (received, own tokens included) of the flex kernels' dispatch and
    combine, their mean, at ``ranks`` EP ranks inside one NVLink 5 domain on ``sms`` SMs
    (:data:`FLEX_NVLINK_GBPS`): linear in the SM count and log-linear in the rank count
    between published points, held outside them; None for a backend without a table."""
    table = FLEX_NVLINK_GBPS.get(backend)
    if table is None:
        return None

    def at_ranks(n: int) -> float:
        pts = sorted((s, (d + c) / 2) for (r, s), (d, c) in table.items() if r == n)
        if sms <= pts[0][0]:
            return pts[0][1]
        for (s0, v0), (s1, v1) in zip(pts, pts[1:]):
            if sms <= s1:
                return v0 + (sms - s0) / (s1 - s0) * (v1 - v0)
        return pts[-1][1]

    sizes = sorted({r for r, _ in table})
    if ranks <= sizes[0]:
        return at_ranks(sizes[0]) * 1e9
    for n0, n1 in zip(sizes, sizes[1:]):
        if ranks <= n1:
            w = (math.log2(ranks) - math.log2(n0)) / (math.log2(n1) - math.log2(n0))
            return (at_ranks(n0) + w * (at_ranks(n1) - at_ranks(n0))) * 1e9
    return at_ranks(sizes[-1]) * 1e9


def nvlink_dispatch(workload: Workload, system: SystemConfig) -> Workload:
    """``workload`` with its flex dispatch/combine all-to-alls sized so that, inside one NVLink 5
    domain, the backend times them at the flex kernels' published rate (:func:`flex_nvlink_rate`)
    instead of NCCL's all-to-all; unchanged when the EP group spans domains (then
    :func:`hierarchical_dispatch` sizes the RDMA share), on another NVLink than the benchmarks'
    (on an H100's NVLink 4 no figure is published, and Megatron-LM's MoE layer baselines there,
    HybridEP inside one node, agree with NCCL's rate: docs/validation.md), or for a backend
    without a table.

    The rate is taken net of the per-call cost the backend adds to every NVLink all-to-all (its
    latency and the efficiency curve's half time, network.efficiency): at the benchmark's own
    size the backend then gives the benchmark's time, and elsewhere the same per-call cost as
    any other collective. Bytes are scaled by the backend's large-message all-to-all rate over
    that net rate (the shipped efficiency table's curve for the system; a user's own table is
    not seen here)."""
    from network.busbw import Link
    from network.efficiency import shipped_efficiency

    par, model = workload.parallel, workload.model
    backend = par.flex_backend
    if model is None or par.ep <= 1 or backend is None or system.nvlink_bw != FLEX_NVLINK_BENCH_BW:
        return workload
    if NVLINK_RATE_META in workload.meta:
        return workload  # already sized (a result's workload run again, e.g. for a drawing)
    shape = GroupShape.from_ranks(group_ranks(par, Group.EP, 0), system.domain_gpus)
    n = shape.n
    if shape.nodes != 1 or n <= 1:
        return workload
    sms = par.moe_hybridep_num_sms if par.moe_hybridep_num_sms is not None else DEFAULT_FLEX_SMS
    rate = flex_nvlink_rate(backend, n, sms)
    if rate is None:
        return workload
    tokens, hidden, topk, local = FLEX_BENCH_SHAPE
    bench_bytes = tokens * hidden * 2 * distinct_ranks(local * n, topk, n)
    curve = shipped_efficiency(system.name).curve(Link.NVLINK, "alltoall")
    per_call = system.nvlink_latency_s + curve.half_time_s
    # the published time less the backend's per-call cost (kept at least half the published
    # time: a system whose per-call cost neared it would otherwise imply an unbounded rate)
    net = bench_bytes / max(bench_bytes / rate - per_call, bench_bytes / rate / 2)
    backend_rate = system.nvlink_busbw * curve.peak_fraction * n / (n - 1)
    scale = backend_rate / net
    return _resize_flex_kernels(workload, lambda b: round(b * scale), {NVLINK_RATE_META: f"{net:.6g}"})


def size_flex_dispatch(workload: Workload, system: SystemConfig) -> Workload:
    """The flex dispatcher's all-to-alls sized for ``system`` (the job's NVLink domain already
    chosen: SystemConfig.for_job): one RDMA copy per remote domain at the kernels' inter-node
    rate when the EP group spans domains (:func:`hierarchical_dispatch`), the kernels' NVLink 5
    rate inside one (:func:`nvlink_dispatch`); each leaves the other case unchanged."""
    workload = hierarchical_dispatch(workload, system.domain_gpus, system.nic_efficiency)
    return nvlink_dispatch(workload, system)


NVLINK_RATE_META = "flex_nvlink_rate_bytes_per_s"
"""Workload.meta key :func:`nvlink_dispatch` sets (the net rate it sized the flex all-to-alls
for, bytes/s per rank): a workload carrying it is not resized again."""

DEFAULT_FLEX_SMS = 20
"""SMs DeepEP's (and, unless told, HybridEP's) dispatch and combine kernels run on: Megatron-LM
token_dispatcher.py at d98e8a64, _DeepepManager ("None -> 20, DeepEP's historical mcore
default"), and transformer_config.py moe_hybridep_num_sms ("None uses the default from DeepEP")."""


def flex_sm_slowdown(workload: Workload) -> float:
    """Fractional slow-down of compute kernels that run while the flex dispatcher's kernels
    do: those kernels hold ``sms`` of the GPU's SMs for their whole duration (DeepEP and
    HybridEP launch persistent blocks on a fixed SM count), so a compute-bound kernel beside
    them gets ``sm_count - sms`` SMs and takes ``sm_count / (sm_count - sms)`` times as long;
    ``sms / (sm_count - sms)`` is the slow-down. 0 without the flex dispatcher. It matters only
    where compute runs beside the dispatch (the EP all-to-all overlap)."""
    par = workload.parallel
    if par.ep <= 1 or par.flex_backend is None:
        return 0.0
    sms = par.moe_hybridep_num_sms if par.moe_hybridep_num_sms is not None else DEFAULT_FLEX_SMS
    gpu = get_gpu(workload.gpu) if workload.gpu else None
    if gpu is None:
        return 0.0  # no GPU attached: no SM count to divide (a workload without compute times)
    if not 0 < sms < gpu.sm_count:
        raise ConfigError("moe_hybridep_num_sms", sms, f"must be between 1 and {gpu.sm_count - 1} "
                                                       f"({gpu.name} has {gpu.sm_count} SMs)")
    return sms / (gpu.sm_count - sms)
