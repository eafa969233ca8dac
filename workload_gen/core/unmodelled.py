"""Recipe options the configs accept but the simulator does not model yet: the one table.

Megatron-LM's MoE recipes pass flags whose mechanisms the simulator may not model. Each such
flag sets a ParallelConfig field, so a recipe is written in Megatron's spelling. An option in
:data:`UNMODELLED` set to anything but the value that changes nothing is *simulated without
its mechanism* and named in one warning line (:func:`unmodelled`): the commands print it
whatever ``-q`` says and summary.json lists it under ``unmodelled``, because a number that
silently leaves out what the recipe relies on misleads (the MoE physics issue, item 4).
Combinations that cannot be simulated meaningfully without their mechanism (fp8 parameter
gathers in layouts whose buffers are not modelled, nested checkpoints) are still refused in
``ParallelConfig.__post_init__`` through :func:`check_modelled`, one line each.
Spellings, types and defaults: Megatron-LM ``megatron/training/arguments.py`` and
``megatron/core/transformer/transformer_config.py`` at commit
d98e8a64ddf34856e74b24714e3bedb2f5a39553.
"""
from __future__ import annotations

from typing import Any

from workload_gen.core.errors import ConfigError

UNMODELLED: tuple[tuple[str, str, object, str], ...] = (
    # (field, Megatron's flag, the value that changes nothing, the missing mechanism)
    ("main_params_dtype", "--main-params-dtype", "fp32",
     "fp16 main weights with a per-tensor scale: TE FusedAdam's unscale and rescale passes around the kernel"),
    ("use_megatron_fsdp", "--use-megatron-fsdp", False,
     "Megatron FSDP: parameters sharded and all-gathered per module in forward and backward"),
)
"""Every recipe option simulated without its mechanism (with a warning) unless it has the
value that changes nothing."""

_DISPATCHERS: dict[str, str] = {
    "allgather": "the allgather token dispatcher: every token all-gathered over TP x EP and selected locally",
}

_MOMENTS: tuple[tuple[str, str], ...] = (("fp32", "fp32"), ("bf16", "bf16"))
"""Adam moment dtypes modelled (workload_gen.core.optimizer_state): fp32, and both bf16, which
Transformer Engine's kernel reads and writes as bf16 (FusedAdam ``fuse_unscale``)."""

_NESTED: tuple[str, ...] = ("shared_experts",)
"""Modules Megatron would checkpoint inside the whole-MoE checkpoint of --recompute-modules
moe that are not modelled together with it. moe_act and layernorm are: Megatron's pre-MLP
norm checkpoint re-makes the MoE checkpoint's input, the MoE forward re-runs, and the expert
activation, dropped again by its own checkpoint in that re-run, runs a third time before fc2's
backward (moe_layer.py, experts.py, transformer_layer.py at d98e8a64; layer_ops.moe_block)."""


def refusal(flag: str, mechanism: str) -> str:
    """The one line's tail for a refused combination: the flag and the mechanism the
    simulator lacks (refused, not simulated without it: the numbers would not mean anything)."""
    return f"not modelled yet: {flag} ({mechanism})"


def unmodelled(par: Any) -> tuple[str, ...]:
    """One line per recipe option ``par`` sets whose mechanism the simulator does not model:
    the flag, its value and the mechanism the prediction leaves out (the dispatcher first:
    DeepEP's and HybridEP's own options only matter under flex). Empty when every option
    the configuration sets is modelled."""
    lines: list[str] = []
    if par.moe_token_dispatcher in _DISPATCHERS:
        value = par.moe_token_dispatcher
        lines.append(warning(f"--moe-token-dispatcher-type {value}", _DISPATCHERS[value]))
    for name, flag, noop, mechanism in UNMODELLED:
        value = getattr(par, name)
        if value != noop:
            shown = " ".join(map(str, value)) if isinstance(value, tuple) else value
            lines.append(warning(f"{flag} {shown}" if not isinstance(value, bool) else flag, mechanism))
    return tuple(lines)


def warning(flag: str, mechanism: str) -> str:
    """The warning line for an option simulated without its mechanism."""
    return f"not modelled: {flag} ({mechanism}); simulated without it"


def check_modelled_with_model(model: Any, par: Any) -> None:
    """The refusals that need the model: layernorm recompute under fp8/fp4 with multi-latent
    attention, whose input norm is a module of its own whose consumers (the duplicated down
    projections) would save their bf16 input and re-quantize it (not modelled); and
    --no-rope-fusion with multi-latent attention (standard attention's eager RoPE is modelled,
    workload_gen.costs.rope_unfused; MLA's is not)."""
    if model.multi_latent_attention and not par.rope_fusion:
        raise ConfigError("rope_fusion", False, refusal(
            "--no-rope-fusion with multi-latent attention",
            "Megatron-Core's eager MLA RoPE on the rotary heads and the concatenations that lay out q and k"))
    if (model.multi_latent_attention and par.recompute == "selective" and "layernorm" in par.recompute_modules
            and par.dtype in ("fp8", "fp4")):
        raise ConfigError("recompute_modules", list(par.recompute_modules), refusal(
            f"--recompute-modules layernorm with {par.dtype} and multi-latent attention",
            "Transformer Engine then saves the down projections' bf16 input and re-quantizes it in the backward"))


def check_modelled(par: Any) -> None:
    """Raise one ConfigError naming the field, its value, the flag and the missing
    mechanism for a combination the simulator refuses (see the module docstring).

    Under fp8/fp4, moe_act and layernorm recompute are modelled as Megatron runs them
    (Transformer Engine >= 2.6, current scaling): the GEMM that reads the re-made tensor (the
    experts' fc2, the shared experts' fc1) saves its bf16 input (set_save_original_input) and
    quantizes it again in the backward (layer_ops). Megatron refuses them with delayed scaling
    (transformer_config.py at d98e8a64), and so does this check."""
    if par.fp8_param_gather:  # --reuse-grad-buf-for-mxfp8-param-ag alone acts on no weight
        _check_fp8_param_gather(par)
    if (par.exp_avg_dtype, par.exp_avg_sq_dtype) not in _MOMENTS:
        raise ConfigError("exp_avg_dtype", [par.exp_avg_dtype, par.exp_avg_sq_dtype], refusal(
            f"--exp-avg-dtype {par.exp_avg_dtype} --exp-avg-sq-dtype {par.exp_avg_sq_dtype}",
            "moments other than both fp32 or both bf16: TE FusedAdam's fp32 copies, unscaled before "
            "and rescaled after the kernel"))
    if par.recompute == "selective":
        quantized_act = [m for m in ("moe_act", "layernorm") if m in par.recompute_modules]
        if quantized_act and par.dtype == "fp8" and par.fp8_recipe == "delayed":
            raise ConfigError("recompute_modules", list(par.recompute_modules),
                              f"--recompute-modules {quantized_act[0]} needs an fp8 recipe other than delayed "
                              "(Megatron: 'Delayed scaling does not support moe_act and layernorm recompute for fp8')")
        nested = [m for m in _NESTED if m in par.recompute_modules]
        if "moe" in par.recompute_modules and nested:
            raise ConfigError("recompute_modules", list(par.recompute_modules), refusal(
                f"--recompute-modules moe {nested[0]}",
                "a checkpoint nested in (or beside) the whole MoE layer's: which ops re-run twice"))



def _check_fp8_param_gather(par: Any) -> None:
    """--fp8-param-gather is modelled (workload_gen.builder, engine.memory) for Megatron's
    distributed optimizer with per-tensor fp8 (delayed, tensorwise) and with MXFP8 through the
    gradient buffer; Megatron itself requires fp8 training and the distributed optimizer
    (arguments.py at d98e8a64: "--fp8-param-gather only supported with distributed
    optimizer"). The other combinations are refused, each naming what is missing."""
    if par.dtype != "fp8":
        raise ConfigError("fp8_param_gather", True, "needs fp8 training (--fp8-format): the weights are "
                          "created as fp8 tensors under Transformer Engine's fp8_model_init")
    if not par.distributed_optimizer:
        raise ConfigError("fp8_param_gather", True, "needs --use-distributed-optimizer (Megatron: "
                          "'--fp8-param-gather only supported with distributed optimizer')")
    if par.optimizer != "adam":
        raise ConfigError("fp8_param_gather", True, refusal(
            f"--fp8-param-gather with {par.optimizer}", "NeMo/Apex fp8 parameters (fp8_params) in that optimizer"))
    if par.use_precision_aware_optimizer and (par.main_params_dtype != "fp32" or par.fp8_recipe == "delayed"):
        # Megatron's use_precision_aware_optimizer_no_fp8_or_ds_fp8 (optimizer_config.py): only
        # then does FusedAdam, not the distributed optimizer, write the fp8 weights
        raise ConfigError("fp8_param_gather", True, refusal(
            "--fp8-param-gather with --use-precision-aware-optimizer (delayed scaling or 16-bit main params)",
            "Transformer Engine's FusedAdam writing the fp8 weights itself"))
    if par.fp8_recipe == "blockwise":
        raise ConfigError("fp8_param_gather", True, refusal(
            "--fp8-param-gather with --fp8-recipe blockwise",
            "TE's blockwise partial cast of the master shard and the column-wise copy made after the all-gather"))
    if par.fp8_recipe == "mxfp8" and not par.reuse_grad_buf_for_mxfp8_param_ag:
        raise ConfigError("fp8_param_gather", True, refusal(
            "--fp8-param-gather with mxfp8 without --reuse-grad-buf-for-mxfp8-param-ag",
            "MXFP8 weights mapped into the parameter buffer (TE's replace_raw_data has no MXFP8 layout)"))
    if par.reuse_grad_buf_for_mxfp8_param_ag and par.fp8_recipe != "mxfp8":
        raise ConfigError("reuse_grad_buf_for_mxfp8_param_ag", True, refusal(
            f"--reuse-grad-buf-for-mxfp8-param-ag with --fp8-recipe {par.fp8_recipe}",
            "per-tensor fp8 weights staged through the gradient buffer"))
