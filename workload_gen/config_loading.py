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
      account_for_embedding_in_pipeline_split: false   # the embedding / the loss take a layer
      account_for_loss_in_pipeline_split: false        # slot of the first / last virtual stage
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
      defer_embedding_wgrad_compute: false   # pp > 1: output-layer wgrad into the pipeline flush
      wgrad_deferral_limit: 0      # micro-batches deferred; 0 = all

Both ``parallel:`` and ``training:`` accept any of these keys (they form one
ParallelConfig); the split above is only how the docs group them. Top-level sections that belong to other stages (``system``, ``engine``, ...) are
ignored here. With no model and no parallel settings at all, :data:`DEFAULT_JOB` is used
so that ``gen-workload`` with no arguments produces a sensible workload.

Megatron flags that do not change the workload (``--lr``, ``--save``, ...) are accepted
and ignored, with one note on stderr listing them; they are in :data:`IGNORED_MEGATRON_FLAGS`.
Megatron flags that would change the iteration but are not modelled
(:data:`NOT_MODELLED_MEGATRON_FLAGS`) are refused with "not modelled: FLAG" (exit 2).
Anything else unknown is an argparse error (exit 2). ``--hf-config config.json`` reads the
model from a Hugging Face config (:mod:`workload_gen.hf_config`).
"""
from __future__ import annotations

import argparse
import math
import re
import sys
import typing
from collections.abc import Mapping
from dataclasses import fields
from pathlib import Path
from typing import Any

from workload_gen.errors import ConfigError
from workload_gen.model_config import ModelConfig
from workload_gen.model_presets import PRESETS, get_preset, preset_equal_to
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
    "account_for_embedding_in_pipeline_split", "account_for_loss_in_pipeline_split",
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
    "activation": {"gelu": "gelu", "swiglu": "swiglu", "squared_relu": "squared_relu", "squared-relu": "squared_relu",
                   "relu2": "squared_relu"},
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
    hf_path = spec.pop("hf_config", None)
    if hf_path is not None:
        # model: {hf_config: config.json} (run YAML, sweep base): a Hugging Face config.
        from workload_gen.hf_config import load_hf_config

        if preset is not None:
            raise ConfigError("model.hf_config", hf_path, "give either preset or hf_config, not both", source)
        hf_model = load_hf_config(hf_path).model
        if hf_model.name in PRESETS:
            preset = hf_model.name
        else:
            spec = {**hf_model.to_dict(), **spec}
    unknown = sorted((k for k in spec if k not in MODEL_KEYS), key=str)
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
        model = ModelConfig(**values)
        if model.name == "custom":
            # Name the preset a config equals (pasted launch arguments, a Hugging Face config).
            return preset_equal_to(model) or model
        return model
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


def configs_from_dict(data: Mapping[str, Any] | None, source: str | None = None, *,
                      notes: list[str] | None = None) -> tuple[ModelConfig, ParallelConfig]:
    """Build and cross-check the two configs from the YAML-shaped dict described above.

    With ``notes`` (a list; the command-line path passes one), Megatron-LM's own rules
    apply where it warns instead of failing, and the warnings are appended to it (one line
    each; shown on stderr once the configs are valid): sequence parallelism asked for at
    tp 1 is switched off, as Megatron does, and a world size that was not given is derived
    and reported. Without it (sweep points, library calls) both stay strict/silent."""
    data = dict(data or {})
    unknown = sorted((k for k in data if k not in ("model", "parallel", "training") and k not in OTHER_SECTIONS),
                     key=str)
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
    warnings: list[str] = []
    if notes is not None and kw.get("sp") and int(kw.get("tp") or 1) == 1:
        # Megatron-LM (arguments.py): "Disabling sequence parallelism because tensor model
        # parallelism is 1" -- a warning, not an error.
        kw["sp"] = False
        warnings.append("warning: --sequence-parallel with tensor parallel size 1: sequence parallelism "
                        "disabled (as Megatron-LM does)")
    if kw.get("world_size") is None:
        kw["world_size"] = _default_world(kw)
        tp, pp, cp = (int(kw.get(k) or 1) for k in ("tp", "pp", "cp"))
        warnings.append(
            f"warning: --world-size not given; using {kw['world_size']} GPUs (tp*pp*cp = {tp}*{pp}*{cp} = "
            f"{tp * pp * cp}, times the smallest data-parallel size that fits ep and etp, rounded up to whole "
            f"8-GPU nodes): data-parallel size {kw['world_size'] // (tp * pp * cp)}")
    if kw.get("global_batch") is None:
        dp = kw["world_size"] // (int(kw.get("tp") or 1) * int(kw.get("pp") or 1) * int(kw.get("cp") or 1))
        kw["global_batch"] = int(kw.get("micro_batch") or 1) * max(dp, 1) * int(kw.get("pp") or 1)
    try:
        par = ParallelConfig(**kw)
        check_against_model(model, par)
    except ConfigError as exc:
        raise _with_source(exc, source, "parallel") from None
    if notes is not None:
        notes.extend(warnings)
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
    ("--squared-relu", "activation", "squared_relu"),
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
    (("--wgrad-deferral-limit",), "wgrad_deferral_limit", int, None),
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
    (("--account-for-embedding-in-pipeline-split",), "account_for_embedding_in_pipeline_split"),
    (("--account-for-loss-in-pipeline-split",), "account_for_loss_in_pipeline_split"),
    (("--defer-embedding-wgrad-compute",), "defer_embedding_wgrad_compute"),
)

# --- help text from the fields' docstrings ------------------------------------------------

_FIELD_DOCS: dict[type, dict[str, str]] = {}


_FIELD_LINE = re.compile(r"    ([A-Za-z_]\w*)\s*:(?!=)")
_TRIPLE = ('"' * 3, "'" * 3)


def field_docs(cls: type) -> dict[str, str]:
    """The attribute docstrings of a dataclass (the string right under each field), read
    from its module's source; {} when the source is not available.

    A line scan, not ``ast``: the flag help of every command needs these at start-up, and
    parsing the config modules cost ~8 ms a process (tests/workload_gen/test_field_docs.py
    checks the scan against ast on every config dataclass). Within the class body (4-space
    indent), a field line ``name: ...`` (continuation lines indented deeper) followed by a
    line opening with triple quotes gives that string, whitespace collapsed."""
    if cls not in _FIELD_DOCS:
        docs: dict[str, str] = {}
        module = sys.modules.get(cls.__module__)
        try:
            with open(getattr(module, "__file__", None), encoding="utf-8") as f:  # type: ignore[arg-type]
                lines = f.read().splitlines()
        except (OSError, TypeError, ValueError):
            lines = []
        head = f"class {cls.__name__}"
        start = next((i for i, ln in enumerate(lines) if ln.startswith(head) and ln[len(head):len(head) + 1] in ":(["),
                     None)
        i, n = (start + 1 if start is not None else len(lines)), len(lines)
        pending: str | None = None
        while i < n:
            ln = lines[i]
            if ln.strip() and not ln.startswith(" "):
                break  # the class body has ended
            if ln.startswith("    ") and not ln.startswith("     "):  # a statement of the class body
                stripped = ln.strip()
                if pending is not None and stripped[:3] in _TRIPLE:
                    quote, body = stripped[:3], stripped[3:]
                    while quote not in body and i + 1 < n:
                        i += 1
                        body += "\n" + lines[i]
                    docs[pending] = " ".join(body[:body.index(quote)].split()) if quote in body else ""
                    pending = None
                else:
                    m = _FIELD_LINE.match(ln)
                    pending = m.group(1) if m else None
            i += 1
        _FIELD_DOCS[cls] = docs
    return _FIELD_DOCS[cls]


FIELD_MEANING: dict[str, str] = {
    # Fields whose dataclass has no docstring for them (model_config.py, parallel_config.py).
    "hidden_size": "Width of the residual stream (the model dimension).",
    "num_attention_heads": "Query heads per attention layer.",
    "vocab_size": "Vocabulary size (unpadded; Megatron pads it, see --make-vocab-size-divisible-by).",
    "activation": "MLP activation: gelu or squared_relu (on one fc1 output) or swiglu (gate and up halves of fc1).",
    "normalization": "Norm layers: layernorm (weight and bias) or rmsnorm (weight only).",
    "position_embedding": "Position embedding: learned (absolute, GPT-3) or rope (rotary, no weights).",
    "moe_router_topk": "Routed experts each token goes to.",
    "multi_latent_attention": "Multi-latent attention (DeepSeek-V2/V3) instead of standard attention.",
    "kv_lora_rank": "MLA: width of the compressed (latent) K/V projection.",
    "v_head_dim": "MLA: width of each head's value vector.",
    "q_lora_rank": "MLA: width of the compressed query projection; None means q is projected directly "
                   "(DeepSeek-V2-Lite).",
    "world_size": "GPUs in the job (tp x pp x cp x dp); derived from the layout with a warning when not given.",
    "pp": "Pipeline-parallel size (Megatron --pipeline-model-parallel-size).",
    "micro_batch": "Sequences per micro-batch on one data-parallel rank.",
    "global_batch": "Sequences per iteration over all data-parallel ranks (micro-batches = global / (micro x dp)).",
    "seq_length": "Tokens per sequence.",
    "dtype": "Training precision of the GEMMs and activations.",
    "recompute": "Activation recomputation: none, selective (attention core) or full (whole layers).",
    "recompute_method": "Full recompute: uniform (every layer in groups) or block (the first N layers per stage).",
    "overlap_grad_reduce": "Overlap the data-parallel gradient reduction with the backward pass.",
    "overlap_param_gather": "Overlap the distributed optimizer's parameter all-gather with the next forward.",
    "tp_comm_overlap": "Overlap tensor-parallel communication with the GEMMs (Transformer Engine userbuffers).",
    "num_layers_per_virtual_pipeline_stage": "Layers per virtual pipeline chunk (Megatron's way to set vpp).",
}
"""What a field means, for the fields whose dataclass gives no (or no self-contained) docstring;
it takes precedence over the docstring."""

FIELD_UNIT: dict[str, str] = {
    "num_layers": "layers", "hidden_size": "elements per token", "num_attention_heads": "heads",
    "num_query_groups": "heads", "kv_channels": "elements per head", "ffn_hidden_size": "elements",
    "vocab_size": "tokens", "max_position_embeddings": "positions", "num_experts": "experts",
    "moe_router_topk": "experts per token", "moe_ffn_hidden_size": "elements",
    "moe_shared_expert_intermediate_size": "elements", "num_dense_layers": "layers",
    "dense_ffn_hidden_size": "elements", "q_lora_rank": "elements", "kv_lora_rank": "elements",
    "qk_head_dim": "elements per head", "qk_pos_emb_head_dim": "elements per head", "v_head_dim": "elements per head",
    "world_size": "GPUs", "tp": "GPUs", "pp": "stages", "vpp": "chunks per stage", "cp": "GPUs", "ep": "GPUs",
    "etp": "GPUs", "micro_batch": "sequences", "global_batch": "sequences", "seq_length": "tokens",
    "first_stage_layers": "layers", "last_stage_layers": "layers", "recompute_num_layers": "layers",
    "ddp_bucket_size": "elements", "make_vocab_size_divisible_by": "tokens",
    "num_layers_per_virtual_pipeline_stage": "layers",
}
"""The unit of each numeric field (shown in --help)."""


def _section_of(field: str) -> str:
    return "parallel" if field in LAYOUT_KEYS or field == "num_layers_per_virtual_pipeline_stage" else "training"


def field_help(cls: type, field: str, section: str) -> str:
    """--help text of the flag for ``cls.field``: what it means (its docstring, else
    :data:`FIELD_MEANING`), its unit, and its YAML key."""
    text = FIELD_MEANING.get(field) or field_docs(cls).get(field) or field.replace("_", " ")
    unit = FIELD_UNIT.get(field)
    # a flag's None is "not given"; argparse formats help with %
    text = text.rstrip(".").replace("None means", "not given means").replace("%", "%%")
    return f"{text} [{unit}] (YAML {section}.{field})" if unit else f"{text} (YAML {section}.{field})"


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
IGNORED_MEGATRON_FLAGS.update({
    # From Megatron-LM's megatron/training/arguments.py (and the dataclass configs it builds
    # flags from): RoPE frequency scaling, numerics checks, checkpoint formats, kernel
    # choices, FP8 scaling bookkeeping, NCCL tuning files, logging and profiling switches.
    "--use-rope-scaling": False, "--rope-scaling-factor": True, "--mscale": True, "--mscale-all-dim": True,
    "--rotary-seq-len-interpolation-factor": True,
    "--check-for-nan-in-loss-and-grad": False, "--no-check-for-nan-in-loss-and-grad": False,
    "--check-for-spiky-loss": False, "--check-for-large-grads": False, "--rerun-mode": True,
    "--check-weight-hash-across-dp-replicas-interval": True,
    "--use-dist-ckpt": False, "--auto-detect-ckpt-format": False, "--async-save": False,
    "--use-persistent-ckpt-worker": False, "--ckpt-fully-parallel-load": False,
    "--ckpt-assume-constant-structure": False, "--dist-ckpt-strictness": True, "--ckpt-step": True,
    "--non-persistent-save-interval": True, "--non-persistent-ckpt-type": True,
    "--non-persistent-global-ckpt-dir": True, "--pretrained-checkpoint": True, "--finetune": False,
    "--exit-on-missing-checkpoint": False, "--exit-signal-handler": False,
    "--override-opt_param-scheduler": False, "--use-checkpoint-opt_param-scheduler": False,
    "--no-persist-layer-norm": False, "--apply-layernorm-1p": False, "--calculate-per-token-loss": False,
    "--tp-comm-overlap-cfg": True, "--nccl-communicator-config-path": True,
    "--fp8-amax-history-len": True, "--fp8-amax-compute-algo": True, "--fp8-margin": True, "--fp8-interval": True,
    "--rampup-batch-size": True,
    "--lr-wsd-decay-style": True, "--lr-wsd-decay-samples": True, "--lr-wsd-decay-iters": True,
    "--decoupled-lr": True, "--decoupled-min-lr": True, "--start-weight-decay": True, "--end-weight-decay": True,
    "--weight-decay-incr-style": True, "--use-cpu-initialization": False, "--init-method-xavier-uniform": False,
    "--dataloader-type": True, "--num-dataset-builder-threads": True, "--reset-position-ids": False,
    "--reset-attention-mask": False, "--eod-mask-loss": False, "--no-mmap-bin-files": False,
    "--train-data-path": True, "--valid-data-path": True, "--test-data-path": True,
    "--log-validation-ppl-to-tensorboard": False, "--log-memory-to-tensorboard": False,
    "--log-world-size-to-tensorboard": False, "--log-progress": False, "--tensorboard-log-interval": True,
    "--tensorboard-queue-size": True, "--wandb-save-dir": True, "--logging-level": True,
    "--no-one-logger": False, "--one-logger-project": True, "--one-logger-run-name": True,
    "--use-pytorch-profiler": False, "--profile-step-start": True, "--profile-step-end": True,
    "--record-memory-history": False, "--memory-snapshot-path": True, "--log-straggler": False,
    "--empty-unused-memory-level": True, "--te-rng-tracker": False,
    "--moe-permute-fusion": False, "--moe-router-fusion": False, "--moe-use-legacy-grouped-gemm": False,
    "--moe-per-layer-logging": False, "--moe-router-pre-softmax": False, "--moe-router-enable-expert-bias": False,
    "--moe-router-bias-update-rate": True, "--moe-token-drop-policy": True, "--mtp-loss-scaling-factor": True,
    "--ddp-average-in-collective": False,
})
_MULTI_VALUE_IGNORED: frozenset[str] = frozenset({
    "--data-path", "--train-data-path", "--valid-data-path", "--test-data-path", "--rampup-batch-size",
})
"""Ignored flags that take several values (Megatron's nargs='*'), e.g. --rampup-batch-size 16 16 5859375."""

NOT_MODELLED_MEGATRON_FLAGS: dict[str, tuple[bool, str | None, str]] = {
    # flag: (takes a value, the value that changes nothing (accepted and ignored) or None, what it would change)
    "--overlap-param-gather-with-optimizer-step": (False, None, "overlaps the parameter all-gather with the optimizer step"),
    "--pipeline-model-parallel-layout": (True, None, "changes the layers per pipeline stage"),
    "--microbatch-group-size-per-virtual-pipeline-stage": (True, None, "changes the pipeline schedule"),
    "--use-precision-aware-optimizer": (False, None, "changes the optimizer state's dtypes and memory"),
    "--main-params-dtype": (True, "fp32", "changes the optimizer state's memory"),
    "--main-grads-dtype": (True, "fp32", "changes the optimizer state's memory"),
    "--exp-avg-dtype": (True, "fp32", "changes the optimizer state's memory"),
    "--exp-avg-sq-dtype": (True, "fp32", "changes the optimizer state's memory"),
    "--optimizer-cpu-offload": (False, None, "moves the optimizer step to the CPU"),
    "--num-distributed-optimizer-instances": (True, "1", "shards the optimizer over part of the data-parallel group"),
    "--distribute-saved-activations": (False, None, "splits recomputation checkpoints over TP (memory and communication)"),
    "--recompute-modules": (True, None, "recomputes other modules than selective recompute's attention core"),
    "--cpu-offloading": (False, None, "offloads activations to the CPU"),
    "--cpu-offloading-num-layers": (True, None, "offloads activations to the CPU"),
    "--fp8-param-gather": (False, None, "gathers FP8 parameters (halves the all-gather)"),
    "--first-last-layers-bf16": (False, None, "keeps some layers in BF16 under FP8"),
    "--num-layers-at-start-in-bf16": (True, None, "keeps some layers in BF16 under FP8"),
    "--num-layers-at-end-in-bf16": (True, None, "keeps some layers in BF16 under FP8"),
    "--disable-tp-comm-overlap-ag": (False, None, "changes which TP communication overlaps"),
    "--disable-tp-comm-overlap-rs": (False, None, "changes which TP communication overlaps"),
    "--disable-tp-comm-bulk-dgrad": (False, None, "changes which TP communication overlaps"),
    "--disable-tp-comm-bulk-wgrad": (False, None, "changes which TP communication overlaps"),
    "--disable-tp-comm-split-ag": (False, None, "changes which TP communication overlaps"),
    "--disable-tp-comm-split-rs": (False, None, "changes which TP communication overlaps"),
    "--delay-wgrad-compute": (False, None, "moves weight-gradient GEMMs to overlap EP communication"),
    "--overlap-moe-expert-parallel-comm": (False, None, "overlaps EP all-to-all with other micro-batches"),
    "--moe-shared-expert-overlap": (False, None, "overlaps the shared experts with the token dispatch"),
    "--moe-expert-capacity-factor": (True, None, "drops or pads tokens per expert"),
    "--moe-pad-expert-input-to-capacity": (False, None, "pads tokens per expert"),
    "--moe-router-num-groups": (True, None, "limits routing to device groups (changes the dispatch)"),
    "--moe-router-group-topk": (True, None, "limits routing to device groups (changes the dispatch)"),
    "--moe-enable-deepep": (False, None, "uses DeepEP's dispatch kernels"),
    "--moe-layer-recompute": (False, None, "recomputes the MoE layer"),
    "--mtp-num-layers": (True, "0", "adds multi-token-prediction layers"),
    "--enable-cuda-graph": (False, None, "captures CUDA graphs (removes launch overheads)"),
    "--external-cuda-graph": (False, None, "captures CUDA graphs (removes launch overheads)"),
    "--cuda-graph-impl": (True, "none", "captures CUDA graphs (removes launch overheads)"),
    "--use-torch-fsdp2": (False, None, "shards parameters with FSDP instead of the distributed optimizer"),
    "--use-custom-fsdp": (False, None, "shards parameters with FSDP instead of the distributed optimizer"),
    "--use-megatron-fsdp": (False, None, "shards parameters with FSDP instead of the distributed optimizer"),
    "--data-parallel-sharding-strategy": (True, "no_shard", "shards parameters with FSDP"),
    "--hierarchical-context-parallel-sizes": (True, None, "splits CP communication hierarchically"),
    "--use-tp-pp-dp-mapping": (False, None, "changes which ranks form each group (placement on nodes)"),
    "--ddp-num-buckets": (True, None, "changes the gradient buckets"),
    "--use-sharp": (False, None, "runs the data-parallel reduction in the switch (SHARP)"),
    "--no-fp8-wgrad": (False, None, "runs the weight-gradient GEMMs in higher precision under FP8"),
}
"""Real Megatron-LM flags that would change the simulated iteration but are not modelled:
refused with "not modelled: FLAG" (exit 2), unless given the value that changes nothing."""

_IGNORED_DESTS: dict[str, str] = {}
"""argparse dest -> flag of every accepted-and-ignored flag (for the one note on stderr)."""


class _NotModelled(argparse.Action):
    """A Megatron-LM flag the simulator does not model: one-line usage error (exit 2), or,
    given its no-op value, recorded as ignored."""

    def __init__(self, option_strings, dest, reason: str = "", noop: str | None = None, **kwargs) -> None:
        self.reason = reason
        self.noop = noop
        super().__init__(option_strings, dest, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        if self.noop is not None and values == self.noop:
            setattr(namespace, self.dest, values)
            return
        shown = option_string if values in (None, []) else f"{option_string} {values}"
        parser.error(f"not modelled: {shown} ({self.reason}; the simulator has no model of it)")


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
                       help=field_help(ModelConfig, field, "model"))
    for flag, field, value in _MODEL_SWITCHES:
        g.add_argument(flag, dest=f"m_{field}", action="store_const", const=value,
                       help=f"sets {field} to {value}: " + field_help(ModelConfig, field, "model"))
    g.add_argument("--group-query-attention", dest="m_group_query_attention", action="store_true", default=None,
                   help="Megatron GQA switch (num_query_groups defaults to 1 with it)")
    g.add_argument("--moe-layer-freq", dest="m_moe_layer_freq", metavar="FREQ",
                   help="Megatron MoE layer pattern: 1, or '([0]*k+[1]*n)' for k leading dense layers")
    for flags, field, typ, choices in _PAR_VALUE_FLAGS:
        g.add_argument(*flags, dest=f"p_{field}", type=typ, choices=choices,
                       metavar="N" if typ is int and choices is None else None,
                       help=field_help(ParallelConfig, field, _section_of(field)))
    for flags, field in _PAR_BOOL_FLAGS:
        g.add_argument(flags[0], dest=f"p_{field}", action=argparse.BooleanOptionalAction, default=None,
                       help=field_help(ParallelConfig, field, _section_of(field)))
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
    g.add_argument("--hf-config", dest="hf_config", metavar="CONFIG_JSON",
                   help="model from a Hugging Face config.json (Llama 2/3, Mistral, Mixtral, Qwen2/3 dense and "
                        "MoE, DeepSeek-V2/V3, GPT-2, GPT-NeoX); instead of --model, model flags override it")
    ig = parser.add_argument_group("ignored Megatron-LM flags")
    for flag, takes_value in IGNORED_MEGATRON_FLAGS.items():
        dest = "ignored_" + flag.lstrip("-").replace("-", "_")
        _IGNORED_DESTS[dest] = flag
        if flag in _MULTI_VALUE_IGNORED:
            ig.add_argument(flag, dest=dest, nargs="*", help=argparse.SUPPRESS)
        elif takes_value:
            ig.add_argument(flag, dest=dest, help=argparse.SUPPRESS)
        else:
            ig.add_argument(flag, dest=dest, action="store_true", default=None, help=argparse.SUPPRESS)
    for flag, (takes_value, noop, reason) in NOT_MODELLED_MEGATRON_FLAGS.items():
        dest = "ignored_" + flag.lstrip("-").replace("-", "_")
        _IGNORED_DESTS[dest] = flag
        ig.add_argument(flag, dest=dest, action=_NotModelled, nargs=None if takes_value else 0,
                        reason=reason, noop=noop, help=argparse.SUPPRESS)


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
    import ast  # only for a pattern the regular expression above does not take

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
    for section in ("parallel", "training"):
        if data.get(section) is not None and not isinstance(data[section], Mapping):
            raise ConfigError(section, data[section], "must be a mapping of parallel/training fields")
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
    notes: list[str] = []
    hf_path = getattr(args, "hf_config", None)
    if hf_path:
        from workload_gen.hf_config import load_hf_config

        if getattr(args, "model", None):
            raise ConfigError("--hf-config", hf_path, f"give either --model ({args.model}) or --hf-config, not both")
        hf = load_hf_config(hf_path)
        notes += hf.notes
        base = dict(base)
        if hf.model.name in PRESETS:
            base["model"] = {"preset": hf.model.name}
        else:
            base["model"] = {k: v for k, v in hf.model.to_dict().items()}
    has_flags = any(v is not None for k, v in vars(args).items() if k.startswith(("m_", "p_")))
    where = path or hf_path
    source = (f"{where} + flags" if has_flags else str(where)) if where else None
    model, par = configs_from_dict(args_to_dict(args, base), source, notes=notes)
    ignored = [flag for dest, flag in _IGNORED_DESTS.items() if getattr(args, dest, None) not in (None, False)]
    if ignored:
        notes.insert(0, f"note: ignored Megatron-LM flags (they do not change the simulated iteration): "
                        f"{', '.join(ignored)}")
    for line in notes:
        print(line, file=sys.stderr)
    return model, par
