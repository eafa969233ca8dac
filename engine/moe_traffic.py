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

from dataclasses import replace

from engine.passes import is_flex_kernel
from workload_gen.core.errors import ConfigError
from workload_gen.core.gpu_specs import get_gpu
from workload_gen.core.moe_dispatch import rank_hit_probability
from workload_gen.core.moe_routing import rank_load_factor
from workload_gen.core.placement import GroupShape, group_ranks
from workload_gen.core.records import CollectiveOp, Group, Workload


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
    import math

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

    def fix(ops):
        return tuple(replace(op, bytes=nbytes) if type(op) is CollectiveOp and is_flex_kernel(op) else op
                     for op in ops)

    stages = tuple(replace(st, chunks=tuple(replace(ch, forward=fix(ch.forward), backward=fix(ch.backward))
                                            for ch in st.chunks)) for st in workload.stages)
    return replace(workload, stages=stages)


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
