"""Three ways in, one result: YAML, short flags and Megatron-LM's own flags.

All three end in :func:`configs_from_dict`, so they cannot disagree:

- YAML (``-c run.yaml``) is the dict itself (schema below);
- flags (``--tp 8`` or ``--tensor-model-parallel-size 8``) are turned into the same dict
  by :func:`configs_from_args`, on top of the YAML when both are given (flags win).

YAML schema (every key optional; see docs/workload.md)::

    model: llama3-70b              # a preset name, or a mapping:
    model:
      preset: llama3-70b           # optional; without it every required field must be given
      num_layers: 40               # any ModelConfig field overrides the preset
    parallel:                      # layout
      world_size: 256
      tp: 8
      sp: true
      pp: 4
      vpp: 2                       # or num_layers_per_virtual_pipeline_stage: 5
      cp: 1
      cp_comm: p2p                 # p2p | all_gather | a2a
      ep: 1
      etp: null                    # null = same as tp
      first_stage_layers: null     # uneven pipeline (vpp 1): layers on the first/last stage
      last_stage_layers: null
    training:
      micro_batch: 1
      global_batch: 512
      seq_length: 4096
      dtype: bf16                  # bf16 | fp16 | fp32 | fp8
      fp8_recipe: delayed          # fp8 only: delayed | tensorwise | mxfp8 | blockwise
      attention_backend: flash     # flash (fused kernel) | unfused (scores through memory)
      recompute: selective         # none | selective | full
      recompute_method: uniform    # uniform | block
      recompute_num_layers: null
      distributed_optimizer: true
      optimizer: adam              # adam (Megatron) | distributed_fused_adam (NeMo; needs distributed_optimizer)
      overlap_grad_reduce: true
      overlap_param_gather: true
      tp_comm_overlap: false
      overlap_p2p_comm: true       # interleaved schedule only
      ddp_bucket_size: null        # elements; null = Megatron's max(40M, 1M*dp)
      grad_reduce_in_fp32: null    # null = Megatron's default (true for bf16)
      make_vocab_size_divisible_by: 128

Both ``parallel:`` and ``training:`` accept any of these keys (they form one
ParallelConfig); the split above is only how the docs group them. Top-level sections that belong to other stages (``system``, ``engine``, ...) are
ignored here. With no model and no parallel settings at all, :data:`DEFAULT_JOB` is used
so that ``gen-workload`` with no arguments produces a sensible workload.

Megatron flags that do not change the workload (``--lr``, ``--save``, ...) are accepted
and ignored; they are listed in :data:`IGNORED_MEGATRON_FLAGS`. Anything else unknown
is an argparse error (exit 2).
"""
from __future__ import annotations

import argparse
import ast
import math
import re
import typing
from collections.abc import Mapping
from dataclasses import fields
from pathlib import Path
from typing import Any

from workload_gen.errors import ConfigError
from workload_gen.model_config import ModelConfig
from workload_gen.model_presets import PRESETS, get_preset
from workload_gen.parallel_config import ParallelConfig, check_against_model

DEFAULT_MODEL = "llama3-8b"
DEFAULT_JOB: dict[str, dict[str, object]] = {
    "parallel": {"world_size": 8, "tp": 2, "sp": True, "pp": 1, "cp": 1, "ep": 1},
    "training": {
        "micro_batch": 1, "global_batch": 32, "seq_length": 8192, "dtype": "bf16",
        "recompute": "none", "distributed_optimizer": True,
        "overlap_grad_reduce": True, "overlap_param_gather": True,
    },
}
"""Used only when neither a model nor any parallel/training setting is given: Llama-3.1 8B
on one 8-GPU node, TP 2 with SP, 4-way DP with the distributed optimizer, 8 micro-batches
of 8192 tokens (a common NeMo/Megatron recipe shape)."""

LAYOUT_KEYS: tuple[str, ...] = (
    "world_size", "tp", "sp", "pp", "vpp", "cp", "cp_comm", "ep", "etp", "first_stage_layers", "last_stage_layers",
)
TRAINING_KEYS: tuple[str, ...] = tuple(
    f.name for f in fields(ParallelConfig) if f.name not in LAYOUT_KEYS
)
MODEL_KEYS: tuple[str, ...] = tuple(f.name for f in fields(ModelConfig))
OTHER_SECTIONS: frozenset[str] = frozenset({"system", "network", "engine", "sweep", "search", "profile", "output", "gpu"})
"""Top-level YAML sections owned by other stages; ignored by the workload loader."""

# ---------------------------------------------------------------------------------------
# dict -> configs
# ---------------------------------------------------------------------------------------

_HINTS_CACHE: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    if cls not in _HINTS_CACHE:
        _HINTS_CACHE[cls] = typing.get_type_hints(cls)
    return _HINTS_CACHE[cls]


_ALIASES: dict[str, dict[str, str]] = {
    "normalization": {"layernorm": "layernorm", "rmsnorm": "rmsnorm"},
    "position_embedding": {"learned": "learned", "learned_absolute": "learned", "rope": "rope"},
    "activation": {"gelu": "gelu", "swiglu": "swiglu"},
}


def _literal_values(hint: Any) -> tuple[object, ...]:
    """The allowed values of ``Literal[...]`` (or ``Literal[...] | None``); () otherwise."""
    if typing.get_origin(hint) is typing.Literal:
        return typing.get_args(hint)
    return tuple(v for a in typing.get_args(hint) if typing.get_origin(a) is typing.Literal for v in typing.get_args(a))


def _coerce(cls: type, key: str, value: object, where: str, source: str | None) -> object:
    """Check ``value`` against the annotated type of ``cls.key``; one clear error if wrong."""
    hint = _hints(cls)[key]
    args = typing.get_args(hint)
    allowed = set(args) if args else {hint}
    if value is None:
        if type(None) in allowed:
            return None
        raise ConfigError(f"{where}.{key}", value, "must be set", source)
    if key in _ALIASES and isinstance(value, str):
        v = _ALIASES[key].get(value.lower())
        if v is None:
            raise ConfigError(f"{where}.{key}", value, f"valid: {', '.join(sorted(set(_ALIASES[key].values())))}", source)
        return v
    lits = _literal_values(hint)
    if lits:
        if value not in lits:
            raise ConfigError(f"{where}.{key}", value, f"valid: {', '.join(map(str, lits))}", source)
        return value
    if bool in allowed:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{where}.{key}", value, "must be true or false", source)
    if int in allowed:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        raise ConfigError(f"{where}.{key}", value, "must be an integer", source)
    if str in allowed:
        if isinstance(value, str):
            return value
        raise ConfigError(f"{where}.{key}", value, "must be a string", source)
    return value


def _section(data: Mapping[str, Any], name: str, source: str | None) -> dict[str, Any]:
    sec = data.get(name)
    if sec is None:
        return {}
    if not isinstance(sec, Mapping):
        raise ConfigError(name, sec, "must be a mapping of key: value", source)
    return dict(sec)


def _resolve_model(spec: object, source: str | None) -> ModelConfig:
    if spec is None:
        return get_preset(DEFAULT_MODEL)
    if isinstance(spec, str):
        return get_preset(spec, source)
    if not isinstance(spec, Mapping):
        raise ConfigError("model", spec, "must be a preset name or a mapping of model fields", source)
    spec = dict(spec)
    preset = spec.pop("preset", None)
    unknown = sorted(k for k in spec if k not in MODEL_KEYS)
    if unknown:
        raise ConfigError(f"model.{unknown[0]}", spec[unknown[0]], f"unknown model field; valid: {', '.join(MODEL_KEYS)}", source)
    values = {k: _coerce(ModelConfig, k, v, "model", source) for k, v in spec.items()}
    try:
        if preset is not None:
            base = get_preset(preset, source)
            merged = base.to_dict()
            changed = sorted(k for k, v in values.items() if merged[k] != v)
            if not changed:
                return base  # flags that restate the preset (pasted launch arguments) change nothing
            merged.update(values)
            merged["source"] = values.get("source", f"{base.source}; overridden: {', '.join(changed)}")
            return ModelConfig(**merged)
        missing = [k for k in ("num_layers", "hidden_size", "num_attention_heads", "vocab_size") if k not in values]
        if missing:
            raise ConfigError(
                f"model.{missing[0]}", None,
                f"required for a custom model (or choose a preset: {', '.join(PRESETS)})", source,
            )
        values.setdefault("name", "custom")
        return ModelConfig(**values)
    except ConfigError as exc:
        raise _with_source(exc, source, "model") from None


def _with_source(exc: ConfigError, source: str | None, where: str) -> ConfigError:
    if exc.source or not source:
        return exc
    field = exc.field if "." in exc.field else f"{where}.{exc.field}"
    return ConfigError(field, exc.value, exc.valid, source)


def _default_world(kw: Mapping[str, Any]) -> int:
    """Smallest valid world size for the layout, rounded up to whole 8-GPU nodes.

    dp must make ep divide dp*cp and expert_tp*ep*pp divide the world size.
    """
    tp, pp, cp, ep = (int(kw.get(k) or 1) for k in ("tp", "pp", "cp", "ep"))
    etp = int(kw.get("etp") or tp)
    base = tp * pp * cp
    dp = 1
    while (dp * cp) % ep or (base * dp) % (etp * ep * pp):
        dp += 1
        if dp > 1_000_000:  # unreachable for positive ints; guards a silent hang
            raise ConfigError("world_size", None, "could not derive a valid world size; give --world-size")
    world = base * dp
    return world * (8 // math.gcd(world, 8))


def configs_from_dict(data: Mapping[str, Any] | None, source: str | None = None) -> tuple[ModelConfig, ParallelConfig]:
    """Build and cross-check the two configs from the YAML-shaped dict described above."""
    data = dict(data or {})
    unknown = sorted(k for k in data if k not in ("model", "parallel", "training") and k not in OTHER_SECTIONS)
    if unknown:
        raise ConfigError(unknown[0], "...", "unknown section; valid: model, parallel, training", source)
    layout = _section(data, "parallel", source)
    training = _section(data, "training", source)
    if data.get("model") is None and not layout and not training:
        layout, training = dict(DEFAULT_JOB["parallel"]), dict(DEFAULT_JOB["training"])
    model = _resolve_model(data.get("model"), source)

    # Layout and training keys are documented in their own sections, but both sections map
    # onto one ParallelConfig, so either section accepts any of its fields (sweep specs put
    # batch sizes under parallel:). Typos are still errors.
    vstage = layout.pop("num_layers_per_virtual_pipeline_stage", training.pop("num_layers_per_virtual_pipeline_stage", None))
    valid = LAYOUT_KEYS + TRAINING_KEYS
    kw: dict[str, Any] = {}
    for name, sec in (("parallel", layout), ("training", training)):
        for k, v in sec.items():
            if k not in valid:
                raise ConfigError(f"{name}.{k}", v, f"unknown key; valid: {', '.join(valid)}", source)
            value = _coerce(ParallelConfig, k, v, name, source)
            if k in kw and kw[k] != value:
                raise ConfigError(f"{name}.{k}", v, f"conflicts with parallel.{k}={kw[k]!r}", source)
            kw[k] = value
    if vstage is not None:
        vstage = _coerce(ParallelConfig, "pp", vstage, "parallel", source)  # a positive int
        pp = kw.get("pp", 1)
        if model.num_layers % (pp * vstage):
            raise ConfigError(
                "parallel.num_layers_per_virtual_pipeline_stage", vstage,
                f"num_layers={model.num_layers} must be divisible by pp*{vstage}={pp * vstage}", source,
            )
        vpp = model.num_layers // (pp * vstage)
        if "vpp" in kw and kw["vpp"] != vpp:
            raise ConfigError("parallel.vpp", kw["vpp"], f"conflicts with num_layers_per_virtual_pipeline_stage (vpp={vpp})", source)
        kw["vpp"] = vpp
    if kw.get("world_size") is None:
        kw["world_size"] = _default_world(kw)
    if kw.get("global_batch") is None:
        dp = kw["world_size"] // (int(kw.get("tp") or 1) * int(kw.get("pp") or 1) * int(kw.get("cp") or 1))
        kw["global_batch"] = int(kw.get("micro_batch") or 1) * max(dp, 1) * int(kw.get("pp") or 1)
    try:
        par = ParallelConfig(**kw)
        check_against_model(model, par)
    except ConfigError as exc:
        raise _with_source(exc, source, "parallel") from None
    return model, par


def load_yaml(path: str | Path) -> dict[str, Any]:
    """Read a run YAML (model/parallel/training sections)."""
    from workload_gen.yaml_file import read_yaml_mapping

    return read_yaml_mapping(path, "model/parallel/training sections")


def load_config_file(path: str | Path) -> tuple[ModelConfig, ParallelConfig]:
    return configs_from_dict(load_yaml(path), str(path))


# ---------------------------------------------------------------------------------------
# argparse
# ---------------------------------------------------------------------------------------

# (flags, dest, kwargs); dests are prefixed m_ (model field), p_ (parallel/training field).
_MODEL_VALUE_FLAGS: tuple[tuple[tuple[str, ...], str, type], ...] = (
    (("--num-layers",), "num_layers", int),
    (("--hidden-size",), "hidden_size", int),
    (("--ffn-hidden-size",), "ffn_hidden_size", int),
    (("--num-attention-heads",), "num_attention_heads", int),
    (("--num-query-groups",), "num_query_groups", int),
    (("--kv-channels",), "kv_channels", int),
    (("--vocab-size",), "vocab_size", int),
    (("--max-position-embeddings",), "max_position_embeddings", int),
    (("--num-experts",), "num_experts", int),
    (("--moe-router-topk",), "moe_router_topk", int),
    (("--moe-ffn-hidden-size",), "moe_ffn_hidden_size", int),
    (("--moe-shared-expert-intermediate-size",), "moe_shared_expert_intermediate_size", int),
    (("--num-dense-layers",), "num_dense_layers", int),
    (("--dense-ffn-hidden-size",), "dense_ffn_hidden_size", int),
    (("--q-lora-rank",), "q_lora_rank", int),
    (("--kv-lora-rank",), "kv_lora_rank", int),
    (("--qk-head-dim",), "qk_head_dim", int),
    (("--qk-pos-emb-head-dim",), "qk_pos_emb_head_dim", int),
    (("--v-head-dim",), "v_head_dim", int),
    (("--activation",), "activation", str),
    (("--normalization",), "normalization", str),
    (("--position-embedding-type",), "position_embedding", str),
)
# Megatron boolean switches that set a model field to a constant.
_MODEL_SWITCHES: tuple[tuple[str, str, object], ...] = (
    ("--swiglu", "activation", "swiglu"),
    ("--untie-embeddings-and-output-weights", "tied_embeddings", False),
    ("--disable-bias-linear", "add_bias_linear", False),
    ("--add-qkv-bias", "add_qkv_bias", True),
    ("--qk-layernorm", "qk_layernorm", True),
    ("--multi-latent-attention", "multi_latent_attention", True),
    ("--use-rotary-position-embeddings", "position_embedding", "rope"),
)

_PAR_VALUE_FLAGS: tuple[tuple[tuple[str, ...], str, type, tuple[str, ...] | None], ...] = (
    (("--world-size",), "world_size", int, None),
    (("--tp", "--tensor-model-parallel-size"), "tp", int, None),
    (("--pp", "--pipeline-model-parallel-size"), "pp", int, None),
    (("--vpp", "--num-virtual-stages-per-pipeline-rank"), "vpp", int, None),
    (("--num-layers-per-virtual-pipeline-stage",), "num_layers_per_virtual_pipeline_stage", int, None),
    (("--cp", "--context-parallel-size"), "cp", int, None),
    (("--cp-comm", "--cp-comm-type"), "cp_comm", str, ("p2p", "all_gather", "a2a")),
    (("--first-stage-layers", "--decoder-first-pipeline-num-layers"), "first_stage_layers", int, None),
    (("--last-stage-layers", "--decoder-last-pipeline-num-layers"), "last_stage_layers", int, None),
    (("--ep", "--expert-model-parallel-size"), "ep", int, None),
    (("--etp", "--expert-tensor-parallel-size"), "etp", int, None),
    (("--micro-batch", "--micro-batch-size"), "micro_batch", int, None),
    (("--global-batch", "--global-batch-size"), "global_batch", int, None),
    (("--seq-length",), "seq_length", int, None),
    (("--dtype",), "dtype", str, ("bf16", "fp16", "fp32", "fp8")),
    (("--fp8-recipe",), "fp8_recipe", str, ("delayed", "tensorwise", "mxfp8", "blockwise")),
    (("--recompute", "--recompute-granularity"), "recompute", str, ("none", "selective", "full")),
    (("--recompute-method",), "recompute_method", str, ("uniform", "block")),
    (("--recompute-num-layers",), "recompute_num_layers", int, None),
    (("--ddp-bucket-size",), "ddp_bucket_size", int, None),
    (("--optimizer",), "optimizer", str, ("adam", "distributed_fused_adam")),  # Megatron's adam, NeMo's optim.name
    (("--make-vocab-size-divisible-by",), "make_vocab_size_divisible_by", int, None),
)
# Our on/off switches (each also has --no-...); the Megatron spelling is an alias.
_PAR_BOOL_FLAGS: tuple[tuple[tuple[str, ...], str], ...] = (
    (("--sp", "--sequence-parallel"), "sp"),
    (("--dist-opt", "--use-distributed-optimizer"), "distributed_optimizer"),
    (("--overlap-grad-reduce",), "overlap_grad_reduce"),
    (("--overlap-param-gather",), "overlap_param_gather"),
    (("--tp-comm-overlap",), "tp_comm_overlap"),
    (("--overlap-p2p-communication",), "overlap_p2p_comm"),
    (("--grad-reduce-in-fp32", "--accumulate-allreduce-grads-in-fp32"), "grad_reduce_in_fp32"),
)

IGNORED_MEGATRON_FLAGS: dict[str, bool] = {
    # flag: takes a value. Real Megatron-LM flags that change neither the computation's
    # shapes nor its communication (optimizer hyper-parameters, data, logging,
    # checkpointing, kernel-fusion switches whose cost the profile measures anyway).
    "--lr": True, "--min-lr": True, "--lr-decay-style": True, "--lr-decay-iters": True,
    "--lr-warmup-iters": True, "--lr-warmup-fraction": True, "--lr-warmup-samples": True,
    "--lr-decay-samples": True, "--weight-decay": True, "--clip-grad": True,
    "--adam-beta1": True, "--adam-beta2": True, "--adam-eps": True,
    "--init-method-std": True, "--train-iters": True, "--train-samples": True, "--seed": True,
    "--save": True, "--load": True, "--save-interval": True, "--eval-interval": True,
    "--eval-iters": True, "--log-interval": True, "--data-path": True, "--split": True,
    "--tokenizer-type": True, "--tokenizer-model": True, "--vocab-file": True, "--merge-file": True,
    "--data-cache-path": True, "--num-workers": True, "--distributed-backend": True,
    "--distributed-timeout-minutes": True, "--attention-dropout": True, "--hidden-dropout": True,
    "--norm-epsilon": True, "--rotary-base": True, "--rotary-percent": True,
    "--rotary-scaling-factor": True, "--transformer-impl": True,
    "--tensorboard-dir": True, "--wandb-project": True, "--wandb-exp-name": True,
    "--moe-router-load-balancing-type": True, "--moe-aux-loss-coeff": True,
    "--moe-z-loss-coeff": True, "--moe-grouped-gemm": False,
    "--moe-router-score-function": True, "--moe-router-topk-scaling-factor": True,
    "--moe-router-dtype": True, "--moe-input-jitter-eps": True, "--loss-scale": True,
    "--initial-loss-scale": True, "--min-loss-scale": True, "--loss-scale-window": True,
    "--hysteresis": True, "--ckpt-format": True, "--exit-interval": True, "--exit-duration-in-mins": True,
    "--use-flash-attn": False, "--use-mcore-models": False, "--no-masked-softmax-fusion": False,
    "--no-bias-gelu-fusion": False, "--no-bias-dropout-fusion": False, "--no-bias-swiglu-fusion": False,
    "--no-rope-fusion": False, "--no-gradient-accumulation-fusion": False,
    "--attention-softmax-in-fp32": False, "--apply-query-key-layer-scaling": False,
    "--no-async-tensor-model-parallel-allreduce": False, "--use-checkpoint-args": False,
    "--no-load-optim": False, "--no-load-rng": False, "--no-save-optim": False, "--no-save-rng": False,
    "--log-throughput": False, "--log-timers-to-tensorboard": False, "--log-params-norm": False,
    "--log-num-zeros-in-grad": False, "--timing-log-level": True, "--eval-only": False,
    "--mock-data": False, "--no-create-attention-mask-in-dataloader": False,
    "--manual-gc": False, "--manual-gc-interval": True, "--use-legacy-models": False,
    "--ckpt-fully-parallel-save": False, "--bias-swiglu-fusion": False, "--cross-entropy-loss-fusion": False,
}
"""Real Megatron-LM flags accepted and ignored (flag -> whether it takes a value)."""


def add_config_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``-c``, ``--model``, the short flags and their Megatron-LM aliases to ``parser``.

    Every flag defaults to None (not given), so :func:`configs_from_args` can tell a
    flag from a default and layer the flags over the YAML file.
    """
    g = parser.add_argument_group("model and training config (YAML, short flags or Megatron-LM flags)")
    g.add_argument("-c", "--config", metavar="YAML", help="run file with model:/parallel:/training: sections")
    g.add_argument("--model", metavar="PRESET", help=f"model preset ({', '.join(PRESETS)}); default {DEFAULT_MODEL}")
    for flags, field, typ in _MODEL_VALUE_FLAGS:
        g.add_argument(*flags, dest=f"m_{field}", type=typ, metavar="N" if typ is int else "NAME",
                       help=f"model {field}")
    for flag, field, value in _MODEL_SWITCHES:
        g.add_argument(flag, dest=f"m_{field}", action="store_const", const=value, help=f"set model {field}={value}")
    g.add_argument("--group-query-attention", dest="m_group_query_attention", action="store_true", default=None,
                   help="Megatron GQA switch (num_query_groups defaults to 1 with it)")
    g.add_argument("--moe-layer-freq", dest="m_moe_layer_freq", metavar="FREQ",
                   help="Megatron MoE layer pattern: 1, or '([0]*k+[1]*n)' for k leading dense layers")
    for flags, field, typ, choices in _PAR_VALUE_FLAGS:
        g.add_argument(*flags, dest=f"p_{field}", type=typ, choices=choices,
                       metavar="N" if typ is int and choices is None else None, help=field)
    for flags, field in _PAR_BOOL_FLAGS:
        g.add_argument(flags[0], dest=f"p_{field}", action=argparse.BooleanOptionalAction, default=None, help=field)
        if len(flags) > 1:
            g.add_argument(*flags[1:], dest=f"p_{field}", action="store_const", const=True, help=argparse.SUPPRESS)
    g.add_argument("--bf16", dest="p_dtype", action="store_const", const="bf16", help="dtype bf16 (Megatron)")
    g.add_argument("--fp16", dest="p_dtype", action="store_const", const="fp16", help="dtype fp16 (Megatron)")
    g.add_argument("--fp8-format", dest="p_fp8", metavar="FORMAT",
                   help="Megatron FP8 training (dtype fp8); the format (e4m3, hybrid) does not change the timing")
    g.add_argument("--attention-backend", dest="p_attention_backend", type=_attention_backend,
                   metavar="flash|fused|auto|unfused|local",
                   help="Megatron's attention implementation: flash, fused and auto never materialise the "
                        "scores (attention_backend flash); unfused and local do (unfused)")
    g.add_argument("--moe-token-dispatcher-type", dest="dispatcher", choices=("alltoall",),
                   help="Megatron MoE token dispatcher; the workload models 'alltoall' (the only one accepted)")
    g.add_argument("--recompute-activations", dest="p_recompute", action="store_const", const="selective",
                   help=argparse.SUPPRESS)
    ig = parser.add_argument_group("ignored Megatron-LM flags")
    for flag, takes_value in IGNORED_MEGATRON_FLAGS.items():
        dest = "ignored_" + flag.lstrip("-").replace("-", "_")
        if takes_value:
            ig.add_argument(flag, dest=dest, help=argparse.SUPPRESS)
        else:
            ig.add_argument(flag, dest=dest, action="store_true", help=argparse.SUPPRESS)


def _attention_backend(text: str) -> str:
    """Megatron's --attention-backend choices onto ours (what matters for time and memory
    is whether the s x s scores go through memory)."""
    table = {"flash": "flash", "fused": "flash", "auto": "flash", "unfused": "unfused", "local": "unfused"}
    if text not in table:
        raise argparse.ArgumentTypeError(f"invalid choice {text!r} (flash, fused, auto, unfused, local)")
    return table[text]


def _moe_layer_freq(text: str) -> int | None:
    """Leading dense layers from Megatron's --moe-layer-freq, or None for 'all MoE'."""
    text = text.strip()
    if text.isdigit():
        if int(text) == 1:
            return 0
        raise ConfigError("moe_layer_freq", text, "only 1 or a leading-dense pattern like '([0]*3+[1]*58)' is supported")
    m = re.fullmatch(r"\(?\s*\[\s*0\s*\]\s*\*\s*(\d+)\s*\+\s*\[\s*1\s*\]\s*\*\s*(\d+)\s*\)?", text)
    if m:
        return int(m.group(1))
    try:
        pattern = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        pattern = None
    if isinstance(pattern, list) and pattern and all(x in (0, 1) for x in pattern):
        k = pattern.index(1) if 1 in pattern else len(pattern)
        if all(x == 1 for x in pattern[k:]):
            return k
    raise ConfigError("moe_layer_freq", text, "only 1 or a leading-dense pattern like '([0]*3+[1]*58)' is supported")


def args_to_dict(args: argparse.Namespace, base: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Overlay the flags in ``args`` on ``base`` (a YAML-shaped dict); flags win."""
    data: dict[str, Any] = {k: v for k, v in (base or {}).items()}
    model_spec = data.get("model")
    model: dict[str, Any] = (
        {"preset": model_spec} if isinstance(model_spec, str) else dict(model_spec) if isinstance(model_spec, Mapping)
        else {} if model_spec is None else {"preset": model_spec}
    )
    if getattr(args, "model", None):
        model["preset"] = args.model
    overrides = {k[2:]: v for k, v in vars(args).items() if k.startswith("m_") and v is not None}
    gqa = overrides.pop("group_query_attention", None)
    if gqa and "num_query_groups" not in overrides:
        overrides["num_query_groups"] = 1
    freq = overrides.pop("moe_layer_freq", None)
    if freq is not None:
        overrides["num_dense_layers"] = _moe_layer_freq(freq)
    model.update(overrides)
    if model:
        data["model"] = model if set(model) != {"preset"} else model["preset"]
    layout = dict(data.get("parallel") or {})
    training = dict(data.get("training") or {})
    flags = {k[2:]: v for k, v in vars(args).items() if k.startswith("p_") and v is not None}
    if flags.pop("fp8", None) is not None:
        flags["dtype"] = "fp8"
    for k, v in flags.items():
        # A flag replaces the key wherever the YAML put it (either section is accepted).
        drop = {k} | ({"num_layers_per_virtual_pipeline_stage"} if k == "vpp" else set()) | (
            {"vpp"} if k == "num_layers_per_virtual_pipeline_stage" else set())
        for sec in (layout, training):
            for d in drop:
                sec.pop(d, None)
        (layout if k in LAYOUT_KEYS or k == "num_layers_per_virtual_pipeline_stage" else training)[k] = v
    if layout:
        data["parallel"] = layout
    if training:
        data["training"] = training
    return data


def configs_from_args(args: argparse.Namespace) -> tuple[ModelConfig, ParallelConfig]:
    """Configs from a namespace filled by a parser that got :func:`add_config_arguments`."""
    path = getattr(args, "config", None)
    base = load_yaml(path) if path else {}
    has_flags = any(v is not None for k, v in vars(args).items() if k.startswith(("m_", "p_")))
    source = (f"{path} + flags" if has_flags else str(path)) if path else None
    return configs_from_dict(args_to_dict(args, base), source)
