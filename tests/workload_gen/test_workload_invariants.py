"""Invariants over many random valid layouts: FLOPs conserved across ranks, groups consistent,
order properties, exact round trip. Deterministic (seeded) so failures reproduce."""
from __future__ import annotations

import random

import pytest
from test_workload_build import _check_programs

from formats.native import read_native, write_native
from workload_gen import build, model_flops_per_iteration
from workload_gen.core.errors import ConfigError
from workload_gen.core.model_config import ModelConfig
from workload_gen.core.parallel_config import ParallelConfig, check_against_model
from workload_gen.core.placement import group_size
from workload_gen.core.records import CollectiveOp, ComputeOp, OpKind, Phase

DENSE = ModelConfig(name="t-dense", num_layers=8, hidden_size=256, num_attention_heads=8, num_query_groups=4,
                    ffn_hidden_size=768, vocab_size=1000, activation="swiglu", normalization="rmsnorm",
                    position_embedding="rope", add_bias_linear=False, tied_embeddings=False)
GPT = ModelConfig(name="t-gpt", num_layers=8, hidden_size=256, num_attention_heads=8, vocab_size=1000,
                  max_position_embeddings=4096)
MOE = ModelConfig(name="t-moe", num_layers=8, hidden_size=256, num_attention_heads=8, num_query_groups=8,
                  ffn_hidden_size=512, vocab_size=1000, activation="swiglu", normalization="rmsnorm",
                  position_embedding="rope", add_bias_linear=False, tied_embeddings=False, num_experts=8,
                  moe_router_topk=2, moe_ffn_hidden_size=256, moe_shared_expert_intermediate_size=256,
                  num_dense_layers=2)
MLA = ModelConfig(name="t-mla", num_layers=8, hidden_size=256, num_attention_heads=8, vocab_size=1000,
                  ffn_hidden_size=512, activation="swiglu", normalization="rmsnorm", position_embedding="rope",
                  add_bias_linear=False, tied_embeddings=False, num_experts=8, moe_router_topk=2,
                  moe_ffn_hidden_size=128, num_dense_layers=1, multi_latent_attention=True, q_lora_rank=96,
                  kv_lora_rank=64, qk_head_dim=32, qk_pos_emb_head_dim=16, v_head_dim=32)


def _random_configs(n: int, seed: int = 0):
    rng = random.Random(seed)
    out = []
    while len(out) < n:
        model = rng.choice([DENSE, GPT, MOE, MLA])
        tp, pp, cp = rng.choice([1, 2, 4]), rng.choice([1, 2, 4]), rng.choice([1, 2])
        vpp = rng.choice([1, 2]) if pp > 1 else 1
        dp = rng.choice([1, 2, 4])
        ep = rng.choice([1, 2, 4, 8]) if model.is_moe else 1
        kw = dict(world_size=tp * pp * cp * dp, tp=tp, pp=pp, vpp=vpp, cp=cp, ep=ep, moe_load_imbalance=1.0,
                  sp=tp > 1 and (model.is_moe or rng.random() < 0.5), micro_batch=rng.choice([1, 2]),
                  seq_length=rng.choice([256, 512]), cp_comm=rng.choice(["p2p", "all_gather", "a2a"]),
                  recompute=rng.choice(["none", "selective", "full"]), recompute_method=rng.choice(["uniform", "block"]),
                  distributed_optimizer=rng.random() < 0.5, overlap_grad_reduce=rng.random() < 0.5,
                  dtype=rng.choice(["bf16", "fp16", "fp8"]), make_vocab_size_divisible_by=1)
        kw["global_batch"] = kw["micro_batch"] * dp * pp * rng.choice([1, 2])
        if model.is_moe and rng.random() < 0.3 and tp > 1:
            kw["etp"] = 1
        try:
            par = ParallelConfig(**kw)
            check_against_model(model, par)
        except ConfigError:
            continue
        out.append((model, par))
    return out


CONFIGS = _random_configs(40)


@pytest.mark.parametrize("i", range(len(CONFIGS)))
def test_random_layouts_keep_the_invariants(i, tmp_path):
    model, par = CONFIGS[i]
    w = build(model, par)
    _check_programs(w)
    for _, _, op in w.ops():
        if isinstance(op, CollectiveOp):
            assert op.group_size == group_size(par, op.group) and op.bytes > 0
    # Every rank's GEMM FLOPs (fwd, dgrad, wgrad) + 3x forward attention, over micro-batches and
    # all ranks of each stage, equal the model FLOPs (causal attention; vocabulary unpadded here).
    ranks_per_stage = par.world_size // par.pp
    total = 0.0
    for st in w.stages:
        for ch in st.chunks:
            for op in ch.forward + ch.backward:
                if not isinstance(op, ComputeOp) or op.phase == Phase.RECOMPUTE:
                    continue
                if op.kind in (OpKind.GEMM, OpKind.GROUPED_GEMM, OpKind.ROUTER):
                    total += op.flops
                elif op.kind == OpKind.ATTENTION and op.phase == Phase.FWD:
                    total += 3 * op.flops
    total *= par.num_microbatches * ranks_per_stage
    expected = model_flops_per_iteration(model, par, causal=True)
    assert total == pytest.approx(expected, rel=1e-3), (model.name, par)
    path = tmp_path / "w.txt"
    write_native(w, path)
    assert read_native(path) == w
