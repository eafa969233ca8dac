"""What each config field means, its unit and its YAML key: the text of every config flag's --help.

The meaning comes from the field's attribute docstring in its dataclass (read by
:func:`field_docs`), or from :data:`FIELD_MEANING` where the dataclass has none; the unit
from :data:`FIELD_UNIT`. Kept apart from the flag tables (workload_gen/megatron_flags.py)
and the loader (workload_gen/config_loading.py): a flag's help is documentation, not
configuration.
"""
from __future__ import annotations

import functools
import re
import sys

_FIELD_LINE = re.compile(r"    ([A-Za-z_]\w*)\s*:(?!=)")
_TRIPLE = ('"' * 3, "'" * 3)


@functools.cache
def field_docs(cls: type) -> dict[str, str]:
    """The attribute docstrings of a dataclass (the string right under each field), read
    from its module's source; {} when the source is not available.

    A line scan, not ``ast``: the flag help of every command needs these at start-up, and
    parsing the config modules cost ~8 ms a process (tests/workload_gen/test_field_docs.py
    checks the scan against ast on every config dataclass). Within the class body (4-space
    indent), a field line ``name: ...`` (continuation lines indented deeper) followed by a
    line opening with triple quotes gives that string, whitespace collapsed."""
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
    return docs


FIELD_MEANING: dict[str, str] = {
    # Fields whose dataclass has no docstring for them (model_config.py, parallel_config.py).
    "hidden_size": "Width of the residual stream (the model dimension).",
    "num_attention_heads": "Query heads per attention layer.",
    "vocab_size": "Vocabulary size (unpadded; Megatron pads it, see --make-vocab-size-divisible-by).",
    "activation": "MLP activation: gelu or squared_relu (on one fc1 output) or swiglu (gate and up halves of fc1).",
    "normalization": "Norm layers: layernorm (weight and bias) or rmsnorm (weight only).",
    "position_embedding": "Position embedding: learned (absolute, GPT-3), rope (rotary, no weights), "
                          "yarn (rotary with YaRN's scaled frequencies, GPT-OSS) or none.",
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
    "moe_expert_capacity_factor": "x a balanced expert's load", "moe_hybridep_num_sms": "SMs",
    "moe_router_num_groups": "expert groups", "moe_router_group_topk": "groups per token",
}
"""The unit of each numeric field (shown in --help)."""


def field_help(cls: type, field: str, section: str) -> str:
    """--help text of the flag for ``cls.field``: what it means (its docstring, else
    :data:`FIELD_MEANING`), its unit, and its YAML key."""
    text = FIELD_MEANING.get(field) or field_docs(cls).get(field) or field.replace("_", " ")
    unit = FIELD_UNIT.get(field)
    # a flag's None is "not given"; argparse formats help with %
    text = text.rstrip(".").replace("None means", "not given means").replace("%", "%%")
    return f"{text} [{unit}] (YAML {section}.{field})" if unit else f"{text} (YAML {section}.{field})"

