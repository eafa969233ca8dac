"""YAML-shaped dict -> (ModelConfig, ParallelConfig): the one place a run's configs are made.

Every way in ends in :func:`configs_from_dict`, so they cannot disagree: a run YAML
(``-c run.yaml``, read by :func:`load_yaml`) is the dict itself; flags, ours or
Megatron-LM's, are turned into the same dict by :func:`workload_gen.flag_values.flags_to_dict`
on top of the YAML (flags win). The schema, every key with its meaning, is in
docs/workload.md ("YAML schema"); ``parallel:`` and ``training:`` accept any
ParallelConfig field (they form one config; the split is only how the docs group them).
Top-level sections that belong to other stages (``system``, ``engine``, ...) are ignored
here. With no model and no parallel settings at all, :data:`DEFAULT_JOB` is used, so that
``gen-workload`` with no arguments produces a sensible workload.
"""
from __future__ import annotations

import functools
import math
import typing
from collections.abc import Mapping, Sequence
from dataclasses import fields
from pathlib import Path
from typing import Any

from workload_gen.core.errors import ConfigError
from workload_gen.core.model_config import ModelConfig
from workload_gen.core.model_presets import PRESETS, get_preset, preset_equal_to
from workload_gen.core.parallel_config import ParallelConfig, check_against_model

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
    "account_for_embedding_in_pipeline_split", "account_for_loss_in_pipeline_split", "pipeline_layout",
    "pipeline_schedule",
)
TRAINING_KEYS: tuple[str, ...] = tuple(
    f.name for f in fields(ParallelConfig) if f.name not in LAYOUT_KEYS
)
MODEL_KEYS: tuple[str, ...] = tuple(f.name for f in fields(ModelConfig))


def section_of(field: str) -> str:
    """The YAML section a ParallelConfig field belongs to (either is accepted): where the docs
    list it and where a command-line flag puts it."""
    return "parallel" if field in LAYOUT_KEYS or field == "num_layers_per_virtual_pipeline_stage" else "training"


OTHER_SECTIONS: frozenset[str] = frozenset({"system", "network", "engine", "sweep", "search", "profile", "output", "gpu"})
"""Top-level YAML sections owned by other stages; ignored by the workload loader."""

# ---------------------------------------------------------------------------------------
# dict -> configs
# ---------------------------------------------------------------------------------------

@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    """The resolved annotations of a config class (resolved once per class)."""
    return typing.get_type_hints(cls)


_ALIASES: dict[str, dict[str, str]] = {
    "normalization": {"layernorm": "layernorm", "rmsnorm": "rmsnorm"},
    "position_embedding": {"learned": "learned", "learned_absolute": "learned", "rope": "rope",
                           "yarn": "yarn", "none": "none"},
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
    if typing.get_origin(hint) is tuple:
        # a list of names (Megatron's nargs='+'); one name alone is a list of one
        items = [value] if isinstance(value, str) else value
        if isinstance(items, (list, tuple)) and all(isinstance(x, str) for x in items):
            return tuple(items)
        raise ConfigError(f"{where}.{key}", value, "must be a list of names", source)
    if bool in allowed:
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{where}.{key}", value, "must be true or false", source)
    if float in allowed:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        raise ConfigError(f"{where}.{key}", value, "must be a number", source)
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
        hint = did_you_mean(str(unknown[0]), MODEL_KEYS + ("preset", "hf_config"))
        raise ConfigError(f"model.{unknown[0]}", spec[unknown[0]],
                          f"unknown model field{hint or '; valid: ' + ', '.join(MODEL_KEYS)}", source)
    values = {k: _coerce(ModelConfig, k, v, "model", source) for k, v in spec.items()}
    try:
        if preset is not None:
            base = get_preset(preset, source)
            merged = base.to_dict()
            changed = sorted(k for k, v in values.items() if getattr(base, k) != v)  # to_dict omits some defaults
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

    dp must make expert_tp*ep*pp divide the world size (Megatron-Core's only rule for the
    expert layout: with parallel folding ep need not divide dp*cp).
    """
    tp, pp, cp, ep = (int(kw.get(k) or 1) for k in ("tp", "pp", "cp", "ep"))
    etp = int(kw.get("etp") or tp)
    base = tp * pp * cp
    dp = 1
    while (base * dp) % (etp * ep * pp):
        dp += 1
        if dp > 1_000_000:  # unreachable for positive ints; guards a silent hang
            raise ConfigError("world_size", None, "could not derive a valid world size; give --world-size")
    world = base * dp
    return world * (8 // math.gcd(world, 8))


def _layout_vpp(kw: Mapping[str, Any], vstage: object, source: str | None) -> int:
    """vpp as the pipeline layout gives it (its stages / pp), as Megatron-LM's arguments.py
    sets virtual_pipeline_model_parallel_size; a different vpp, or layers per virtual stage,
    given too is refused (Megatron allows only one of the three)."""
    from workload_gen.core.pipeline_layout import parse_layout

    text, pp = kw["pipeline_layout"], int(kw.get("pp") or 1)
    if vstage is not None:
        raise ConfigError("parallel.pipeline_layout", text, "cannot be combined with "
                          "num_layers_per_virtual_pipeline_stage (Megatron allows one of the two)", source)
    try:
        vpp = parse_layout(text, pp).vpp
    except ConfigError as exc:
        raise _with_source(exc, source, "parallel") from None
    if kw.get("vpp") not in (None, vpp):
        raise ConfigError("parallel.vpp", kw["vpp"], f"conflicts with pipeline_layout, whose "
                          f"{vpp * pp} virtual stages over pp={pp} give vpp={vpp}", source)
    return vpp


def did_you_mean(name: str, valid: Sequence[str]) -> str:
    """"; did you mean X?" for the closest valid name (difflib, as the commands' flag parser
    does), or "" when none is close."""
    import difflib

    close = difflib.get_close_matches(name, list(valid), n=1, cutoff=0.75)
    return f"; did you mean {close[0]}?" if close else ""


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
        hf = {"architectures", "hidden_size", "num_hidden_layers", "model_type"} & set(map(str, data))
        if hf:  # a Hugging Face config.json given where a run file belongs
            raise ConfigError(unknown[0], "...", "this looks like a Hugging Face config.json (it has "
                              f"{sorted(hf)[0]!r}); give it with --hf-config, not -c", source)
        raise ConfigError(unknown[0], "...", "unknown section; valid: model, parallel, training"
                          + did_you_mean(str(unknown[0]), ("model", "parallel", "training")), source)
    layout = _section(data, "parallel", source)
    training = _section(data, "training", source)
    spec = data.get("model")
    if (notes is not None and source is None and isinstance(spec, Mapping)
            and not {"preset", "hf_config", "hidden_size"} & set(spec)):
        # command-line model fields without a model (``--num-layers 4`` alone): they modify the
        # default job's model, as the user of a default job means, instead of describing a
        # custom model that lacks its shape
        data["model"] = {"preset": DEFAULT_MODEL, **spec}
        notes.append(f"note: no model given: the model fields given ({', '.join(sorted(map(str, spec)))}) modify {DEFAULT_MODEL}, "
                     "the default job's model")
        if not layout and not training:
            layout, training = dict(DEFAULT_JOB["parallel"]), dict(DEFAULT_JOB["training"])
    elif notes is not None and spec is None and (layout or training):
        notes.append(f"note: no model given: {DEFAULT_MODEL}, with ParallelConfig's defaults for every setting "
                     "not given (not the default job's)")
    if data.get("model") is None and not layout and not training:
        layout, training = dict(DEFAULT_JOB["parallel"]), dict(DEFAULT_JOB["training"])
    elif notes is not None and not layout and not training:
        # only the model changed: the layout is ParallelConfig's bare defaults, not the default
        # job's (issue 29: --model llama3-70b alone ran at TP 1 on 8 GPUs, needing 1.3 TB per GPU)
        notes.append("note: only the model was given: no parallelism, data-parallel on 8 GPUs, "
                     f"{ParallelConfig().seq_length}-token sequences (ParallelConfig's defaults, not the "
                     "built-in default job's TP 2 with SP and 8192 tokens); give the layout, or run `search`")
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
                hint = did_you_mean(str(k), valid)
                raise ConfigError(f"{name}.{k}", v, f"unknown key{hint or '; valid: ' + ', '.join(valid)}", source)
            value = _coerce(ParallelConfig, k, v, name, source)
            if k in kw and kw[k] != value:
                raise ConfigError(f"{name}.{k}", v, f"conflicts with parallel.{k}={kw[k]!r}", source)
            kw[k] = value
    if vstage is not None:
        vstage = _coerce(ParallelConfig, "pp", vstage, "parallel", source)  # a positive int
        pp = kw.get("pp", 1)
        if kw.get("first_stage_layers") is not None or kw.get("last_stage_layers") is not None:
            # Megatron-LM's arguments.py asserts the same: the layers per virtual stage differ by rank
            raise ConfigError("parallel.num_layers_per_virtual_pipeline_stage", vstage,
                              "cannot be combined with uneven first/last stages; give vpp "
                              "(--num-virtual-stages-per-pipeline-rank) instead", source)
        if model.num_layers % (pp * vstage):
            raise ConfigError(
                "parallel.num_layers_per_virtual_pipeline_stage", vstage,
                f"num_layers={model.num_layers} must be divisible by pp*{vstage}={pp * vstage}", source,
            )
        vpp = model.num_layers // (pp * vstage)
        if "vpp" in kw and kw["vpp"] != vpp:
            raise ConfigError("parallel.vpp", kw["vpp"], f"conflicts with num_layers_per_virtual_pipeline_stage (vpp={vpp})", source)
        kw["vpp"] = vpp
    if kw.get("pipeline_layout") is not None:
        kw["vpp"] = _layout_vpp(kw, vstage, source)
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
    from workload_gen.core.yaml_file import read_yaml_mapping

    return read_yaml_mapping(path, "model/parallel/training sections")


def load_config_file(path: str | Path) -> tuple[ModelConfig, ParallelConfig]:
    return configs_from_dict(load_yaml(path), str(path))
