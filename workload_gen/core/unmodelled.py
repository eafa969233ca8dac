"""Recipe options the configs accept but the simulator does not model yet: the one table.

Megatron-LM's MoE recipes pass flags whose mechanisms (DeepEP's kernels, overlaps, CUDA
graphs, ...) the MoE physics issue (27) will model. Each such flag sets a ParallelConfig
field, so a recipe is written in Megatron's spelling today; a value other than the one
that changes nothing is refused with one line that names the flag and the missing
mechanism. The check runs in ``ParallelConfig.__post_init__``, so YAML, flags, sweep
points and library calls refuse alike: there is one table and nothing to disagree.
Spellings, types and defaults: Megatron-LM ``megatron/training/arguments.py`` and
``megatron/core/transformer/transformer_config.py`` at commit
d98e8a64ddf34856e74b24714e3bedb2f5a39553.
"""
from __future__ import annotations

from typing import Any

from workload_gen.core.errors import ConfigError

ISSUE = "the MoE physics issue models it"

UNMODELLED: tuple[tuple[str, str, object, str], ...] = (
    # (field, Megatron's flag, the value that changes nothing, the missing mechanism)
    ("moe_enable_deepep", "--moe-enable-deepep", False,
     "DeepEP's dispatch/combine kernels: their NVLink+RDMA traffic and the SMs they take"),
    ("moe_hybridep_num_sms", "--moe-hybridep-num-sms", None,
     "HybridEP's dispatch/combine kernels and the SMs they reserve"),
    ("overlap_moe_expert_parallel_comm", "--overlap-moe-expert-parallel-comm", False,
     "the EP all-to-all overlapped with another micro-batch's compute (1F1B A2A overlap)"),
    ("delay_wgrad_compute", "--delay-wgrad-compute", False,
     "weight-gradient GEMMs delayed to overlap the EP all-to-all"),
    ("moe_shared_expert_overlap", "--moe-shared-expert-overlap", False,
     "the shared experts run on a side stream under the token dispatch"),
    ("cuda_graph_impl", "--cuda-graph-impl", "none",
     "CUDA graphs: launch overheads and the dispatcher's host synchronisation removed"),
    ("cuda_graph_scope", "--cuda-graph-scope", (),
     "CUDA graphs over the chosen modules: launch overheads and host synchronisation removed"),
    ("fp8_param_gather", "--fp8-param-gather", False,
     "fp8 weights (TE Float8Tensor): the parameter all-gather in 1-byte buffers of their own, "
     "the weights' memory and the fp8 cast moved into the optimizer step"),
    ("main_params_dtype", "--main-params-dtype", "fp32",
     "fp16 main weights with a per-tensor scale: TE FusedAdam's unscale and rescale passes around the kernel"),
    ("overlap_param_gather_with_optimizer_step", "--overlap-param-gather-with-optimizer-step", False,
     "the first bucket's parameter all-gather overlapped with the optimizer step"),
    ("moe_router_num_groups", "--moe-router-num-groups", None,
     "group-limited (device/node-limited) routing: where each token's expert copies go"),
    ("moe_router_group_topk", "--moe-router-group-topk", None,
     "group-limited (device/node-limited) routing: where each token's expert copies go"),
    ("use_megatron_fsdp", "--use-megatron-fsdp", False,
     "Megatron FSDP: parameters sharded and all-gathered per module in forward and backward"),
)
"""Every recipe option refused unless it has the value that changes nothing."""

_DISPATCHERS: dict[str, str] = {
    "allgather": "the allgather token dispatcher: every token all-gathered over TP x EP and selected locally",
    "flex": "the flex token dispatcher: DeepEP/HybridEP fused dispatch/combine over NVLink+RDMA and their SM use",
}

_MOMENTS: tuple[tuple[str, str], ...] = (("fp32", "fp32"), ("bf16", "bf16"))
"""Adam moment dtypes modelled (workload_gen.core.optimizer_state): fp32, and both bf16, which
Transformer Engine's kernel reads and writes as bf16 (FusedAdam ``fuse_unscale``)."""

_NESTED: tuple[str, ...] = ("moe_act", "shared_experts", "layernorm")
"""Modules Megatron would checkpoint inside (or around) the whole-MoE checkpoint of
--recompute-modules moe: nested checkpoints are not modelled yet."""


def refusal(flag: str, mechanism: str) -> str:
    """The one line's tail: the flag and the mechanism the simulator lacks."""
    return f"not modelled yet: {flag} ({mechanism}; {ISSUE})"


def check_modelled(par: Any) -> None:
    """Raise one ConfigError naming the field, its value, the flag and the missing
    mechanism for the first recipe option set to something the simulator does not model
    (the dispatcher first: DeepEP's and HybridEP's own options only matter under flex)."""
    if par.moe_token_dispatcher in _DISPATCHERS:
        value = par.moe_token_dispatcher
        raise ConfigError("moe_token_dispatcher", value,
                          refusal(f"--moe-token-dispatcher-type {value}", _DISPATCHERS[value]))
    for name, flag, noop, mechanism in UNMODELLED:
        value = getattr(par, name)
        if value != noop:
            raise ConfigError(name, list(value) if isinstance(value, tuple) else value, refusal(flag, mechanism))
    if (par.exp_avg_dtype, par.exp_avg_sq_dtype) not in _MOMENTS:
        raise ConfigError("exp_avg_dtype", [par.exp_avg_dtype, par.exp_avg_sq_dtype], refusal(
            f"--exp-avg-dtype {par.exp_avg_dtype} --exp-avg-sq-dtype {par.exp_avg_sq_dtype}",
            "moments other than both fp32 or both bf16: TE FusedAdam's fp32 copies, unscaled before "
            "and rescaled after the kernel"))
    if par.recompute == "selective":
        nested = [m for m in _NESTED if m in par.recompute_modules]
        if "moe" in par.recompute_modules and nested:
            raise ConfigError("recompute_modules", list(par.recompute_modules), refusal(
                f"--recompute-modules moe {nested[0]}",
                "a checkpoint nested in (or beside) the whole MoE layer's: which ops re-run twice"))
        for module in ("moe_act", "layernorm"):
            if module in par.recompute_modules and par.dtype == "fp8":
                raise ConfigError("recompute_modules", list(par.recompute_modules), refusal(
                    f"--recompute-modules {module} with fp8",
                    "Transformer Engine then saves the next GEMM's bf16 input and re-quantizes it in the backward"))
