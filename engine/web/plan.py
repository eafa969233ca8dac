"""A page plan (a flat JSON object) <-> run-analytical flags, Megatron-LM flags and run YAML.

Units: the plan's fields are the CLI's (counts, tokens, a dtype name); nothing here has a
time or a size in bytes.

The plan is the page's form as data, and its one meaning is the run-analytical command
line it turns into (:func:`plan_argv`): the server runs exactly that argv through the
CLI's own parser and code path, so nothing here checks whether a layout is valid (the
library's messages say that). Here a value is only checked to be a scalar of a sane
length; the server joins each value to its flag (``--tp=4``), so no value can become a flag.
"""
from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from workload_gen.core.errors import ConfigError


@dataclass(frozen=True)
class Field:
    """One form field: its plan key, its run-analytical flag, its Megatron-LM spelling
    (None: Megatron has no such flag; trainsim's own flag is exported instead) and the
    parser's dest for it."""

    key: str
    flag: str
    megatron: str | None
    kind: str  # "text" (a value), "switch" (a flag present when true)
    dest: str | None
    """Where run-analytical's parser (engine/commands/config_flags.py) stores the flag's value;
    None for --system, which the parser defaults (pasted flags name it or keep the form's)."""


def _field(key: str, megatron: str | None, kind: str = "text", *, flag: str = "", dest: str | None = "") -> Field:
    """A :class:`Field` whose flag and dest follow the parser's rule unless given: the flag is
    the key spelled ``--with-dashes``, the dest ``p_`` + the key (a ParallelConfig field)."""
    return Field(key, flag or "--" + key.replace("_", "-"), megatron, kind, "p_" + key if dest == "" else dest)


FIELDS: tuple[Field, ...] = (
    _field("model", None, dest="model"),
    _field("system", None, dest=None),
    _field("num_layers", "--num-layers", dest="m_num_layers"),
    _field("world_size", None),
    _field("global_batch", "--global-batch-size"),
    _field("micro_batch", "--micro-batch-size"),
    _field("seq_length", "--seq-length"),
    _field("tp", "--tensor-model-parallel-size"),
    _field("pp", "--pipeline-model-parallel-size"),
    _field("vpp", "--num-virtual-stages-per-pipeline-rank"),
    _field("cp", "--context-parallel-size"),
    _field("ep", "--expert-model-parallel-size"),
    _field("etp", "--expert-tensor-parallel-size"),
    _field("recompute", "--recompute-granularity"),
    _field("dtype", None),
    _field("fp8_recipe", "--fp8-recipe"),
    _field("sp", "--sequence-parallel", "switch"),
    _field("dist_opt", "--use-distributed-optimizer", "switch", dest="p_distributed_optimizer"),
    _field("overlap_grad_reduce", "--overlap-grad-reduce", "switch"),
    _field("overlap_param_gather", "--overlap-param-gather", "switch"),
    _field("tp_comm_overlap", "--tp-comm-overlap", "switch"),
    _field("first_stage_layers", "--decoder-first-pipeline-num-layers"),
    _field("last_stage_layers", "--decoder-last-pipeline-num-layers"),
    _field("pipeline_layout", "--pipeline-model-parallel-layout", flag="--pp-layout"),
    _field("pipeline_schedule", None),
    _field("moe_token_dispatcher", "--moe-token-dispatcher-type", flag="--moe-token-dispatcher-type"),
    _field("moe_flex_dispatcher_backend", "--moe-flex-dispatcher-backend"),
    _field("overlap_moe_expert_parallel_comm", "--overlap-moe-expert-parallel-comm", "switch"),
)
"""The form, in the order its flags are written. Each key is the ParallelConfig/ModelConfig
field's short name; the flags are those of workload_gen/megatron_flags.py."""

BY_KEY = {f.key: f for f in FIELDS}
PARSED_DEST = {f.key: f.dest for f in FIELDS if f.dest is not None}
"""Plan key -> the dest the config parser stores it under (Field.dest)."""

MAX_VALUE_CHARS = 64
"""A form value longer than this is no preset name or count (the longest preset name is 18)."""

HF_CONFIG_KEY = "hf_config"
"""The plan key holding a pasted/uploaded Hugging Face config.json's text (instead of ``model``)."""
SYSTEM_YAML_KEY = "system_yaml"
"""The plan key holding a pasted/uploaded system YAML's text (instead of ``system``)."""
FILE_KEYS = (HF_CONFIG_KEY, SYSTEM_YAML_KEY)
"""Plan keys whose text the server writes to a file and passes by path, as a user would."""


def _text(key: str, value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise ConfigError(key, value, "must be a number or a name")
    text = str(value).strip()
    if len(text) > MAX_VALUE_CHARS:
        raise ConfigError(key, value, f"at most {MAX_VALUE_CHARS} characters (a count or a name)")
    return text


def _switch(key: str, value: Any) -> bool:
    if value in (True, "true", "1", 1, "on"):
        return True
    if value in (False, "false", "0", 0, "off", "", None):
        return False
    raise ConfigError(key, value, "must be true or false")


def _given(plan: Mapping[str, Any]) -> Iterator[tuple[Field, str | bool]]:
    """The fields ``plan`` sets, in the form's order, each with its checked value: True for a
    switch that is on, the stripped text of a value that is not empty (an empty field is left
    to the CLI's default, an off switch is no flag). Every export reads the plan through this,
    so they agree on what a plan sets."""
    for f in FIELDS:
        value = plan.get(f.key)
        if f.kind == "switch":
            if _switch(f.key, value):
                yield f, True
        elif value not in (None, ""):
            yield f, _text(f.key, value)


def plan_argv(plan: Mapping[str, Any], files: Mapping[str, str] | None = None, *, attached: bool = False) -> list[str]:
    """The run-analytical flags of ``plan`` (empty fields are left to the CLI's defaults).

    ``files``: where the plan's pasted texts were written, by key (FILE_KEYS): a Hugging Face
    config replaces ``--model`` (``--hf-config PATH``), a system YAML ``--system``.
    ``attached``: each value joined to its flag (``--tp=4``), as the server parses them: a
    value is then one argument whatever it holds (``-1``, ``4 --out x``), so no value can
    become a flag, and the parser's message about it is the one it gives the user typing it."""
    if not isinstance(plan, Mapping):
        raise ConfigError("plan", plan, "must be a JSON object of form fields")
    unknown = sorted(set(plan) - set(BY_KEY) - set(FILE_KEYS))
    if unknown:
        raise ConfigError("plan", unknown[0], f"unknown field; valid: {', '.join([*BY_KEY, *FILE_KEYS])}")
    files = files or {}
    pasted = {key: (flag, files[file_key]) for key, flag, file_key in
              (("model", "--hf-config", HF_CONFIG_KEY), ("system", "--system", SYSTEM_YAML_KEY)) if file_key in files}
    given = dict(_given({k: v for k, v in plan.items() if k not in pasted}))
    argv: list[str] = []
    for f in FIELDS:  # a pasted file's flag takes its field's place
        flag, value = pasted.get(f.key) or (f.flag, given.get(f))
        if value is True:
            argv.append(flag)
        elif value is not None:
            argv.extend([f"{flag}={value}"] if attached else [flag, value])
    return argv


def megatron_argv(plan: Mapping[str, Any]) -> list[str]:
    """The plan as Megatron-LM's flags (what a launch script says), plus trainsim's own
    ``--model``/``--world-size``/``--system`` where Megatron has none; the config parser of
    every command reads them back (the page's "paste Megatron flags")."""
    precisions = {"bf16": ["--bf16"], "fp16": ["--fp16"], "fp8": ["--bf16", "--fp8-format", "hybrid"],
                  "fp4": ["--bf16", "--fp4-format", "e2m1", "--fp4-recipe", "nvfp4"]}
    argv: list[str] = []
    for f, value in _given(plan):
        flag = f.megatron or f.flag
        if value is True:
            argv.append(flag)
        elif f.key == "dtype":
            argv += precisions.get(value, [flag, value])
        elif not (f.key == "recompute" and value == "none"):  # Megatron: no --recompute-granularity is none
            argv += [flag, value]
    return argv


def plan_yaml(plan: Mapping[str, Any]) -> str:
    """The plan as a run YAML (``run-analytical -c FILE``; sections as workload_gen.config_loading
    reads them): the model preset with its overrides, and the parallel/training fields."""
    import yaml

    from workload_gen.config_loading import section_of

    model: dict[str, Any] = {"preset": plan.get("model") or None}
    sections: dict[str, dict[str, Any]] = {"parallel": {}, "training": {}}
    for f, value in _given(plan):
        if f.key == "num_layers":
            model["num_layers"] = _number(value)
        elif f.key not in ("model", "system"):
            field = PARSED_DEST[f.key][2:]
            sections[section_of(field)][field] = value if value is True else _number(value)
    doc = {"model": model if len(model) > 1 else model["preset"], **{k: v for k, v in sections.items() if v}}
    system = "YOUR_SYSTEM.yaml" if plan.get(SYSTEM_YAML_KEY) else plan.get("system") or "h100"
    header = f"# run-analytical -c this.yaml --system {system}\n"
    return header + yaml.safe_dump(doc, sort_keys=False)


def _number(value: Any) -> Any:
    text = str(value)
    return int(text) if text.isdigit() else text


def plan_from_values(values: Mapping[str, Any]) -> dict[str, Any]:
    """The plan of a namespace the config parser filled (pasted flags): only the fields the
    flags set; dtype fp8 from Megatron's ``--fp8-format``."""
    plan: dict[str, Any] = {}
    for key, dest in PARSED_DEST.items():
        value = values.get(dest)
        if value is not None:
            plan[key] = value
    if values.get("p_fp8") is not None:
        plan["dtype"] = "fp8"
    if values.get("p_fp4") is not None:
        plan["dtype"] = "fp4"  # NVFP4 (its only recipe, nvfp4, is the default)
    return plan
