"""Where a quantized MoE layer pads each expert's token rows to the GEMM alignment.

Why: Transformer Engine's FP8 and FP4 grouped GEMMs need every expert's row count to be a
multiple of an alignment (the quantized operand's tiles and scale layout). Routed counts are
not, so someone pads them, and who does it decides what it costs:

- the expert module (Megatron-LM ``TEGroupedMLP.forward``, ``experts.py``: TE's ``Fp8Padding``
  before fc1 and ``Fp8Unpadding`` after fc2, on the hidden states and on the router
  probabilities): a copy of every routed row into a padded buffer and back, in the forward and
  again in the backward. TE skips the copy only when every count is already aligned
  (``transformer_engine/pytorch/module/fp8_padding.py``: ``if m_splits == padded_m_splits``);
- the flex dispatcher with HybridEP (or NCCL EP): its dispatch kernel writes the padded layout
  itself (``pad_multiple``, Megatron-LM token_dispatcher.py since e8b9df15, 2025-11-18), so
  the expert module skips its copy (``moe_utils.skip_routed_expert_padding`` at d98e8a64);
- the router, with ``--moe-router-padding-for-quantization`` (old spelling
  ``--moe-router-padding-for-fp8``): it marks extra (token, expert) slots in the routing map
  (``moe_utils.pad_routing_map``) so each expert's count from this rank is already aligned. No
  copy; the padding slots travel through the all-to-alls and the GEMMs as real rows.

Alignment (Megatron-LM d98e8a64 ``fp8_utils.get_fp8_align_size`` and
``fp4_utils.get_fp4_align_size``): 32 rows for MXFP8, 16 for the other FP8 recipes, 128 for FP4.

Expected padding: a count's remainder modulo the alignment is taken as uniform, so an aligned
count gains (align - 1) / 2 rows on average, per expert and per padding site.

Units: rows (token copies).
"""
from __future__ import annotations

FP8_ALIGN_MXFP8 = 32
"""MXFP8's row alignment: Megatron-LM d98e8a64 fp8_utils.get_fp8_align_size (TE's Fp8Padding
agrees: "32 for MXFP8")."""
FP8_ALIGN = 16
"""Every other FP8 recipe's (delayed, tensorwise, blockwise): the same function's else branch."""
FP4_ALIGN = 128
"""NVFP4's: Megatron-LM d98e8a64 fp4_utils.get_fp4_align_size (TE's Fp8Padding: "128 for NVFP4")."""


def quantization_align(dtype: str, fp8_recipe: str) -> int:
    """Rows an expert's count is padded to a multiple of under ``dtype`` (0: not quantized)."""
    if dtype == "fp4":
        return FP4_ALIGN
    if dtype == "fp8":
        return FP8_ALIGN_MXFP8 if fp8_recipe == "mxfp8" else FP8_ALIGN
    return 0


def mean_pad_rows(counts: int, align: int) -> float:
    """Expected rows added when ``counts`` separate row counts are each rounded up to ``align``."""
    return counts * (align - 1) / 2 if align > 1 else 0.0


def experts_pad(align: int, flex_backend: str | None, router_padding: bool, rows_per_expert: float | None) -> bool:
    """Whether the expert module copies its rows into an aligned buffer (and back).

    ``align``: :func:`quantization_align` of the layer (0: not quantized, nothing to align);
    ``flex_backend``: the flex dispatcher's backend, None for alltoall (Megatron decides by the
    configured backend, whatever the EP size); ``rows_per_expert``:
    every local expert's row count when it is fixed (drop-and-pad: the capacity times the EP
    size), None when it follows the routing; a fixed aligned count needs no copy."""
    if not align or router_padding or flex_backend in ("hybridep", "ncclep"):
        return False
    return not (rows_per_expert is not None and float(rows_per_expert).is_integer()
                and int(rows_per_expert) % align == 0)
