"""Kernel costs from workload_gen.costs, each against a count by hand; and the layer ops
taking theirs from there (costs.py is the one home of every kernel's FLOPs and bytes)."""
from __future__ import annotations

import pytest
from wg_helpers import layer_ops, make

from workload_gen import costs
from workload_gen.core.records import ComputeOp, Phase

B = 2  # bf16 activations


def test_rmsnorm_on_a_small_tile():
    # 8 rows x 64: 512 elements; forward 4 FLOPs each, reads x and writes y in bf16
    fwd, bwd = costs.norm("rmsnorm", 8, 64, B)
    assert fwd == (4.0 * 512, 512 * 2 * 2)
    assert bwd == (8.0 * 512, 512 * 2 * 3)  # reads x and dy, writes dx


def test_swiglu_reads_both_halves_of_fc1():
    # width 128 outputs per row, 8 rows: reads 2 x 1024 values, writes 1024, in bf16
    fwd, bwd = costs.activation("swiglu", 8, 128, B)
    assert fwd[1] == (2 * 1024 + 1024) * 2
    assert bwd[1] == (2 * 1024 + 1024 + 2 * 1024) * 2  # reads gate, up and dy; writes d(gate), d(up)


def test_router_forward_by_hand():
    # 16 tokens, h 64, 8 experts: the logits GEMM 2*16*64*8, softmax/top-k 5 per logit;
    # reads x (16x64) and W_r (64x8) in bf16, writes fp32 logits and probabilities (2 x 16x8)
    fwd, dgrad, wgrad = costs.router(16, 64, 8, B, 4)
    assert fwd == (2.0 * 16 * 64 * 8 + 5.0 * 16 * 8, (16 * 64 + 64 * 8) * 2 + 2 * 16 * 8 * 4)
    assert dgrad[0] == wgrad[0] == 2.0 * 16 * 64 * 8
    assert wgrad[1] == (16 * 64 + 16 * 8) * 2 + 2 * 64 * 8 * 4  # main grad read and written in fp32


def test_permute_moves_each_row_in_and_out():
    # 32 routed copies of 16 tokens, h 64: reads 16 rows, writes 32
    assert costs.permute(16, 32, 64, B, weighted=False) == (0.0, (16 + 32) * 64 * 2)
    assert costs.permute(32, 16, 64, B, weighted=True)[0] == 32 * 64  # one multiply per routed value


def test_loss_keeps_an_fp32_copy_of_the_logits():
    fwd, bwd = costs.loss(4, 1000, B)
    assert fwd[1] == bwd[1] == 4 * 1000 * (2 + 4)


def test_adam_step_of_megatron_bf16():
    # 1000 parameters, fp32 main grads: 16 FLOPs and 30 B each (optimizer_state's count)
    assert costs.adam_step(1000, "adam", "bf16", 4, 2) == (16_000.0, 30_000.0)
    # 400 of them per-tensor fp8 primary weights: no 2-byte bf16 weight write for those
    assert costs.adam_step(1000, "adam", "bf16", 4, 2, fp8_weights=400) == (16_000.0, 30_000.0 - 2 * 400)


def test_layer_ops_take_their_costs_from_costs_py():
    """Every element-wise op of a Llama layer (norms, RoPE, SwiGLU, residuals) carries the
    cost costs.py gives for its shape."""
    w = make("llama3-8b", world_size=2, tp=2, sp=True, global_batch=2, seq_length=512)
    fwd = [op for op in layer_ops(w, 0) if isinstance(op, ComputeOp)]
    by_name = {op.name: op for op in fwd}
    # By hand (T = 512 tokens, T/tp = 256 under SP, h 4096): the norms 4 FLOPs and 2 bf16
    # elements per 256 x 4096 element; RoPE on 512 rows of (32 + 8 heads)/tp x 128 = 2560
    # columns, 3 FLOPs and read + write each; SwiGLU on 512 x 14336/tp = 7168 outputs, 6 FLOPs
    # each, reading both fc1 halves and writing one; the residual 3 FLOPs and 3 bf16 + 1 mask
    # byte per 256 x 4096 element.
    n_sp = 256 * 4096
    expected = {"input_norm": (4.0 * n_sp, 2 * n_sp * B), "pre_mlp_norm": (4.0 * n_sp, 2 * n_sp * B),
                "rope": (3.0 * 512 * 2560, 2 * 512 * 2560 * B), "swiglu": (6.0 * 512 * 7168, 3 * 512 * 7168 * B),
                "attn_residual": (3.0 * n_sp, n_sp * (3 * B + 1))}
    assert {name: (by_name[name].flops, by_name[name].bytes) for name in expected} == expected
    for name in ("input_norm", "pre_mlp_norm"):
        op = by_name[name]
        assert (op.flops, op.bytes) == costs.norm("rmsnorm", *op.shape, B)[0]
    rope = by_name["rope"]
    assert (rope.flops, rope.bytes) == costs.rope(*rope.shape, B)[0]
    act = by_name["swiglu"]
    assert (act.flops, act.bytes) == costs.activation("swiglu", *act.shape, B)[0]
    res = by_name["attn_residual"]
    assert (res.flops, res.bytes) == costs.residual(*res.shape, B)[0]
    assert all(op.phase is Phase.FWD for op in fwd)


@pytest.mark.parametrize("recipe", ["delayed", "tensorwise", "mxfp8", "blockwise"])
def test_fp8_weight_cast_is_costs_fp8_cast(recipe):
    w = make("llama3-8b", world_size=2, tp=2, sp=True, global_batch=2, seq_length=512, dtype="fp8", fp8_recipe=recipe)
    op = next(o for o in w.stages[0].iteration if o.name == "fp8_weight_cast")
    assert (op.flops, op.bytes) == costs.fp8_cast(op.shape[0], 1, recipe)
    # By hand: Llama 3 8B's layer, tp 2: qkv 4096 x (4096 + 2 x 1024)/2 + proj 4096 x 4096/2
    # + fc1 4096 x 2 x 14336/2 + fc2 14336 x 4096/2 = 109,051,904, plus its two 4096 norm
    # weights (replicated) = 109,060,096; 32 layers on the one stage: 3,489,923,072, 3 FLOPs each
    assert op.shape == (3_489_923_072, 1)
    assert op.flops == 3.0 * 3_489_923_072
