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


def hierarchical_dispatch(workload: Workload, domain_gpus: int) -> Workload:
    """``workload`` with its flex dispatch/combine all-to-alls sized for node-level
    deduplication (module docstring); unchanged unless the flex dispatcher's EP group spans
    nodes. ``domain_gpus``: GPUs per NVLink domain (SystemConfig.domain_gpus), the "node"
    whose copies are deduplicated (72 on NVL72)."""
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
    nbytes = round(tokens * model.hidden_size * b * copies * n / (n - k) * load)

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
