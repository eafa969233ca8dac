"""Sequence-parallel all-gathers of a quantized linear layer move the quantized tensor, derived by
hand from Transformer Engine's code.

What TE does (TransformerEngine v2.0-v2.18 ``module/linear.py`` and ``module/base.py``
``grad_output_preprocess``; ``distributed.py`` ``gather_along_first_dim``): a column-parallel
layer under sequence parallelism quantizes its local input shard and all-gathers that through
NCCL (``_all_gather_fp8``, ``_all_gather_mxfp8``, ``_all_gather_nvfp4``); a row-parallel
layer's backward quantizes its local dY and gathers it the same way; the wgrad re-gather of X
moves the quantized copy saved in forward. Reduce-scatters carry GEMM outputs, which are bf16.
With ``--tp-comm-overlap`` the userbuffers hold fp8 under fp8 training, but Megatron registers
them unquantized under fp4 (initialize.py), so those gathers move bf16.

Model below: h 64, 4 heads of 16 in 2 query groups, SwiGLU ffn 128, TP 2 with sequence
parallelism, one sequence of 128 tokens: every SP all-gather of a layer's X or dY is
[128, 64] = 8,192 elements, every reduce-scatter of a projection output [128, 64].
"""
from __future__ import annotations

import pytest

from workload_gen.builder import build
from workload_gen.core.model_config import ModelConfig
from workload_gen.core.parallel_config import ParallelConfig
from workload_gen.core.records import CollectiveOp, CollKind

from wg_helpers import layer_ops

ELEMS = 128 * 64
"""Elements of every SP all-gather and reduce-scatter of this model's attention block."""


def _model() -> ModelConfig:
    return ModelConfig(num_layers=4, hidden_size=64, num_attention_heads=4, num_query_groups=2,
                       ffn_hidden_size=128, vocab_size=1000, activation="swiglu", normalization="rmsnorm",
                       position_embedding="rope", add_bias_linear=False, tied_embeddings=False)


def _tp_colls(dtype: str, **kw) -> dict[str, CollectiveOp]:
    par = ParallelConfig(world_size=2, tp=2, sp=True, seq_length=128, global_batch=1, dtype=dtype, **kw)
    w = build(_model(), par)
    ops = layer_ops(w, 1, "fwd") + layer_ops(w, 1, "bwd")
    return {op.name: op for op in ops if isinstance(op, CollectiveOp) and op.name.startswith(("qkv_", "proj_"))}


@pytest.mark.parametrize("dtype, per_elem", [
    ("bf16", 2.0),
    ("fp8", 1.0),  # e4m3; the scales (one per tensor, per 32 or per 128 values) are not counted
    ("fp4", 0.5 + 1 / 16),  # e2m1 (0.5 B) and one E4M3 scale per 16 values (TE docs, NVFP4 format)
])
def test_nccl_sp_gathers_move_the_gemm_input_dtype(dtype, per_elem):
    """Without --tp-comm-overlap: X forward (qkv_ag), dY of the row-parallel proj
    (proj_ag_bwd) and X again for qkv's wgrad (qkv_ag_bwd) are 8,192 elements at the GEMM
    input's bytes; the reduce-scatters stay 2 B per element."""
    c = _tp_colls(dtype)
    for name in ("qkv_ag", "proj_ag_bwd", "qkv_ag_bwd"):
        assert c[name].kind is CollKind.ALL_GATHER
        assert c[name].bytes == pytest.approx(ELEMS * per_elem, abs=1), name
    for name in ("proj_rs", "qkv_rs_bwd"):
        assert c[name].kind is CollKind.REDUCE_SCATTER
        assert c[name].bytes == ELEMS * 2, name


def test_userbuffer_gathers_are_fp8_under_fp8_and_bf16_under_fp4():
    """--tp-comm-overlap: fp8 userbuffers gather 1 B and reduce-scatter 1 B (fp8 output
    buffers); fp4's userbuffers are registered unquantized, so 2 B both ways."""
    fp8 = _tp_colls("fp8", tp_comm_overlap=True)
    fp4 = _tp_colls("fp4", tp_comm_overlap=True)
    assert fp8["qkv_ag"].bytes == ELEMS * 1 and fp8["proj_rs"].bytes == ELEMS * 1
    assert fp4["qkv_ag"].bytes == ELEMS * 2 and fp4["proj_rs"].bytes == ELEMS * 2

