"""Parsed command-line values -> the YAML-shaped dict -> configs, with the notes to show.

A command parses its flags (engine/commands/config_flags.py builds that parser from the
tables in workload_gen/megatron_flags.py) and hands the values here as a plain mapping;
nothing here parses arguments or prints. The keys follow the parser's convention: ``m_FIELD``
sets a ModelConfig field, ``p_FIELD`` a ParallelConfig field, ``ignored_FLAG`` records an
accepted-and-ignored Megatron flag; ``config``, ``model`` and ``hf_config`` name a run YAML,
a preset and a Hugging Face config.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from workload_gen.config_loading import configs_from_dict, load_yaml, section_of
from workload_gen.core.errors import ConfigError
from workload_gen.core.model_config import ModelConfig
from workload_gen.core.model_presets import PRESETS
from workload_gen.core.parallel_config import ParallelConfig
from workload_gen.megatron_flags import MODEL_VALUE_CONVERTERS, ignored_flags_given, moe_layer_freq

_VSTAGE = "num_layers_per_virtual_pipeline_stage"


def flags_to_dict(values: Mapping[str, Any], base: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Overlay the flag ``values`` on ``base`` (a YAML-shaped dict); flags win."""
    data: dict[str, Any] = dict(base or {})
    model_spec = data.get("model")
    model: dict[str, Any] = (
        {"preset": model_spec} if isinstance(model_spec, str) else dict(model_spec) if isinstance(model_spec, Mapping)
        else {} if model_spec is None else {"preset": model_spec}
    )
    if values.get("model"):
        model["preset"] = values["model"]
    overrides = {k[2:]: v for k, v in values.items() if k.startswith("m_") and v is not None}
    if overrides.get("activation_gate") == "quick_gelu" and "activation" not in overrides:
        overrides["activation"] = "swiglu"  # Megatron's --quick-geglu is a gated activation
    gqa = overrides.pop("group_query_attention", None)
    if gqa and "num_query_groups" not in overrides:
        overrides["num_query_groups"] = 1
    freq = overrides.pop("moe_layer_freq", None)
    if freq is not None:
        freq = moe_layer_freq(freq)  # leading dense layers, or a per-layer pattern (Llama 4)
        pattern = "".join(map(str, freq)) if isinstance(freq, tuple) else None
        overrides.update(num_dense_layers=0 if pattern else freq, moe_layer_pattern=pattern)
    for name, convert in MODEL_VALUE_CONVERTERS.items():
        if name in overrides:
            overrides[name] = convert(overrides[name])
    model.update(overrides)
    if model:
        data["model"] = model if set(model) != {"preset"} else model["preset"]
    for section in ("parallel", "training"):
        if data.get(section) is not None and not isinstance(data[section], Mapping):
            raise ConfigError(section, data[section], "must be a mapping of parallel/training fields")
    layout = dict(data.get("parallel") or {})
    training = dict(data.get("training") or {})
    flags = {k[2:]: v for k, v in values.items() if k.startswith("p_") and v is not None}
    fp8, fp4 = flags.pop("fp8", None), flags.pop("fp4", None)
    if fp8 is not None and fp4 is not None:
        # Megatron's validate_args: "--fp4-format and --fp8-format cannot be used simultaneously"
        raise ConfigError("--fp4-format", fp4, "cannot be combined with --fp8-format (Megatron: choose one)")
    if fp8 is not None:
        flags["dtype"] = "fp8"
    if fp4 is not None:
        flags["dtype"] = "fp4"
    if flags.get("moe_expert_capacity_factor", 0) < 0:
        flags["moe_expert_capacity_factor"] = None  # Megatron's TransformerConfig: a negative factor is dropless
    if flags.pop("moe_layer_recompute", None):
        # Megatron's deprecated --moe-layer-recompute (TransformerConfig): selective recompute
        # with "moe" added to the modules (refused with full recompute, as Megatron does)
        if flags.get("recompute", "selective") not in ("selective", "none"):
            raise ConfigError("--moe-layer-recompute", True, "cannot be combined with full recompute (as in Megatron)")
        flags["recompute"] = "selective"
        modules = tuple(flags.get("recompute_modules") or ("core_attn",))
        flags["recompute_modules"] = modules + (("moe",) if "moe" not in modules else ())
    for k, v in flags.items():
        # A flag replaces the key wherever the YAML put it (either section is accepted).
        drop = {k} | ({_VSTAGE} if k == "vpp" else set()) | ({"vpp"} if k == _VSTAGE else set())
        for sec in (layout, training):
            for d in drop:
                sec.pop(d, None)
        (layout if section_of(k) == "parallel" else training)[k] = v
    if layout:
        data["parallel"] = layout
    if training:
        data["training"] = training
    return data


def _vocab_from_tokenizer(data: dict[str, Any], values: Mapping[str, Any], notes: list[str]) -> None:
    """A custom model without --vocab-size takes it from Megatron's tokenizer flags, as
    Megatron does (workload_gen.tokenizer_vocab), and says so in a note; an unknown tokenizer
    is refused with the fix named."""
    from workload_gen.megatron_flags import ignored_dest
    from workload_gen.tokenizer_vocab import tokenizer_vocab

    model = data.get("model")
    if not isinstance(model, dict) or "vocab_size" in model or model.get("preset") or model.get("hf_config"):
        return
    ttype, tmodel = values.get(ignored_dest("--tokenizer-type")), values.get(ignored_dest("--tokenizer-model"))
    if ttype is None and tmodel is None:
        return
    got = tokenizer_vocab(ttype, tmodel)
    if got is None:
        flag = "--tokenizer-model" if tmodel else "--tokenizer-type"
        raise ConfigError(flag, tmodel or ttype, "its vocabulary size is not known here; give --vocab-size N "
                          "(the tokenizer's vocab_size, e.g. from its config.json)")
    model["vocab_size"], origin = got
    notes.append(f"note: vocab_size {got[0]} from {origin}")


PARAM_GATHER_WITHOUT_GRAD_OVERLAP = (
    "note: Megatron-LM's arguments.py refuses --overlap-param-gather without --overlap-grad-reduce; "
    "Megatron-Core's DDP runs it (Megatron-Bridge's H100 DeepSeek-V3 recipe does): simulated as Megatron-Core "
    "runs it, the gradient reduce-scatter after the last backward and the parameter all-gather under the "
    "next forward")
"""The one Megatron-LM argument check the flag path does not enforce: the simulator models
Megatron-Core, and Megatron-Bridge builds this combination without Megatron-LM's CLI."""


def configs_from_flags(values: Mapping[str, Any]) -> tuple[ModelConfig, ParallelConfig, list[str]]:
    """Configs from parsed flag values, and the lines the command should show (the ignored
    Megatron flags, Megatron's own warnings, a Hugging Face config's notes), in order."""
    path = values.get("config")
    base = load_yaml(path) if path else {}
    notes: list[str] = []
    hf_path = values.get("hf_config")
    if hf_path:
        from workload_gen.hf_config import load_hf_config

        if values.get("model"):
            raise ConfigError("--hf-config", hf_path, f"give either --model ({values['model']}) or --hf-config, not both")
        hf = load_hf_config(hf_path)
        notes += hf.notes
        base = dict(base)
        if hf.model.name in PRESETS:
            base["model"] = {"preset": hf.model.name}
        else:
            base["model"] = hf.model.to_dict()
    has_flags = any(v is not None for k, v in values.items() if k.startswith(("m_", "p_")))
    where = path or hf_path
    source = (f"{where} + flags" if has_flags else str(where)) if where else None
    data = flags_to_dict(values, base)
    _vocab_from_tokenizer(data, values, notes)
    model, par = configs_from_dict(data, source, notes=notes)
    if par.overlap_param_gather and not par.overlap_grad_reduce:
        notes.append(PARAM_GATHER_WITHOUT_GRAD_OVERLAP)
    ignored = ignored_flags_given(values)
    if ignored:
        notes.insert(0, f"note: ignored Megatron-LM flags (they do not change the simulated iteration): "
                        f"{', '.join(ignored)}")
    return model, par, notes
