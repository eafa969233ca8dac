"""Megatron-Core's eager RoPE: when it runs, what it costs, and GPT-OSS's YaRN reaching it.

The byte counts are not read off the code under test: a real PyTorch autograd run of the
eager rotation (Megatron-Core rope_utils._apply_rotary_pos_emb_bshd and _rotate_half,
transcribed below) is traced op by op, and each ATen op's tensors summed. The concentration
factor is YaRN's published formula (arXiv 2309.00071, eq. 22).
"""
from __future__ import annotations

import math

import pytest
import torch

from workload_gen import costs
from workload_gen.builder import build
from workload_gen.core.errors import ConfigError
from workload_gen.core.model_config import ModelConfig
from workload_gen.core.model_presets import PRESETS
from workload_gen.core.parallel_config import ParallelConfig
from workload_gen.core.records import ComputeOp, OpKind, Phase

from aten_trace import AtenBytes, forward_backward


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = torch.chunk(x, 2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def _megatron_eager_rope(t: torch.Tensor, freqs: torch.Tensor, mscale: float) -> torch.Tensor:
    rot_dim = freqs.shape[-1]
    t, t_pass = t[..., :rot_dim], t[..., rot_dim:]
    cos_ = (torch.cos(freqs) * mscale).to(t.dtype)
    sin_ = (torch.sin(freqs) * mscale).to(t.dtype)
    t = (t * cos_) + (_rotate_half(t) * sin_)
    return torch.cat((t, t_pass), dim=-1)


def test_bytes_and_kernels_are_what_pytorch_runs():
    s, b, h, d = 8, 4, 16, 16
    x = torch.randn(s, b, h, d, dtype=torch.bfloat16, requires_grad=True)
    freqs = torch.rand(s, 1, 1, d)
    n = x.numel()
    fwd, bwd = forward_backward(lambda: _megatron_eager_rope(x, freqs, 1.3466), n // 2)
    elt = x.element_size()
    assert (fwd.bytes / (n * elt), bwd.bytes / (n * elt)) == costs.ROPE_UNFUSED_BYTES
    assert (len(fwd.ops), len(bwd.ops)) == costs.ROPE_UNFUSED_KERNELS
    # the whole cost of q and k: their elements at those rates, plus the angles' cos/sin passes
    # (cos: 4 + 4, scale: 4 + 4, cast: 4 + 2 bytes, for cos and sin, once per tensor)
    rows, width, positions, hd = 4096, (64 + 8) * 64, 4096, 64
    (ff, fb), (bf, bb), kernels = costs.rope_unfused(rows, width, positions, hd, 2)
    assert fb == 12 * 2 * rows * width + 2 * 2 * 22 * positions * hd
    assert bb == 14 * 2 * rows * width
    assert kernels == (24, 14)
    # against the fused kernel's one read and write each way: 6x (and the angles at one sequence) and 7x
    (_, fused_f), (_, fused_b) = costs.rope(rows, width, 2)
    assert 6 < fb / fused_f < 6.5 and bb / fused_b == 7


def test_yarn_concentration_factor():
    oss = PRESETS["gpt-oss-120b"]
    assert oss.position_embedding == "yarn" and oss.yarn_scaling_factor == 32
    assert oss.rope_cos_sin_scale == pytest.approx(0.1 * math.log(32) + 1)  # 1.3466
    base = dict(name="m", num_layers=2, hidden_size=256, num_attention_heads=4, vocab_size=1000)
    # DeepSeek-style mscale == mscale_all_dim: the ratio is 1; no scaling (factor <= 1): 1
    assert ModelConfig(**base, position_embedding="yarn", yarn_scaling_factor=40, yarn_mscale=1.0,
                       yarn_mscale_all_dim=1.0).rope_cos_sin_scale == 1.0
    assert ModelConfig(**base, position_embedding="yarn", yarn_scaling_factor=1.0).rope_cos_sin_scale == 1.0
    # plain RoPE never scales cos and sin, whatever the yarn fields say
    assert ModelConfig(**base, position_embedding="rope", yarn_scaling_factor=32).rope_cos_sin_scale == 1.0
    with pytest.raises(ConfigError, match="yarn_scaling_factor"):
        ModelConfig(**base, position_embedding="yarn", yarn_scaling_factor=float("nan"))


def _rope_ops(model: ModelConfig, **par) -> list[ComputeOp]:
    p = ParallelConfig(world_size=1, micro_batch=1, global_batch=1, seq_length=1024, **par)
    w = build(model, p)
    return [op for op in w.stages[0].chunks[0].forward + w.stages[0].chunks[0].backward
            if isinstance(op, ComputeOp) and op.kind is OpKind.ROPE and op.layer == 0]


def test_which_path_runs():
    llama = PRESETS["llama3-8b"]
    fused = _rope_ops(llama)
    assert [op.shape for op in fused] == [(1024, (32 + 8) * 128)] * 2
    # --no-rope-fusion: the eager path, its kernel count in the shape
    eager = _rope_ops(llama, rope_fusion=False)
    assert [(op.phase, op.shape) for op in eager] == [(Phase.FWD, (1024, 5120, 24)), (Phase.BWD_INPUT, (1024, 5120, 14))]
    assert eager[0].bytes > 5 * fused[0].bytes
    # GPT-OSS's YaRN takes it with the fusion on; its forward reads the angles of 1024 positions
    oss = _rope_ops(PRESETS["gpt-oss-20b"])
    width = (64 + 8) * 64
    assert [op.shape for op in oss] == [(1024, width, 24), (1024, width, 14)]
    # 12 element passes of q and k at 2 B, and cos / sin of 1024 x 64 angles for q and for k
    # (cos 4 + 4, scale 4 + 4, cast 4 + 2 bytes each)
    assert oss[0].bytes == 12 * 2 * 1024 * width + 2 * 2 * 22 * 1024 * 64


def test_mla_without_rope_fusion_is_refused():
    with pytest.raises(ConfigError, match="--no-rope-fusion with multi-latent attention"):
        _rope_ops(PRESETS["deepseek-v3"], rope_fusion=False)


def test_megatron_flags_reach_the_rope():
    """NVIDIA's GPT-OSS recipes as Megatron-LM flags: YaRN's spelling reaches the model (no
    learned position table), and --no-rope-fusion / --rotary-scaling-factor parse."""
    from engine.commands.config_flags import add_config_arguments
    from engine.commands.parser import OneLineParser
    from workload_gen.flag_values import configs_from_flags

    def build_from_flags(flags: list[str]):
        parser = OneLineParser(prog="run-analytical")
        add_config_arguments(parser)
        model, par, _ = configs_from_flags(vars(parser.parse_args(flags)))
        return build(model, par)

    argv = ["--num-layers", "2", "--hidden-size", "2880", "--num-attention-heads", "64", "--kv-channels", "64",
            "--group-query-attention", "--num-query-groups", "8", "--ffn-hidden-size", "2880",
            "--vocab-size", "201088", "--seq-length", "4096", "--micro-batch-size", "1", "--global-batch-size", "8",
            "--world-size", "8", "--swiglu", "--normalization", "RMSNorm",
            "--position-embedding-type", "yarn", "--rotary-scaling-factor", "32.0",
            "--yarn-original-max-position-embeddings", "4096", "--yarn-beta-fast", "32.0", "--yarn-beta-slow", "1.0",
            "--no-yarn-correction-range-round-to-int"]
    w = build_from_flags(argv)
    assert w.model.position_embedding == "yarn" and w.model.rope_cos_sin_scale == pytest.approx(1.34657, abs=1e-5)
    names = {op.name for op in w.stages[0].chunks[0].forward if isinstance(op, ComputeOp)}
    assert "rope" in names and "position_embedding" not in names
    off = build_from_flags([a for a in argv if not a.startswith(("--position-embedding-type", "yarn"))]
                           + ["--position-embedding-type", "rope", "--no-rope-fusion"])
    assert not off.parallel.rope_fusion


def test_each_eager_kernel_pays_a_launch_and_a_host_op():
    from compute_profile.estimator import explain, load_params
    from engine.host_launch import op_units

    p = load_params("b200")
    fwd, bwd = _rope_ops(PRESETS["gpt-oss-20b"])
    assert explain(fwd, "b200", p).launch_s == pytest.approx(24 * p.launch_overhead_s)
    assert explain(bwd, "b200", p).launch_s == pytest.approx(14 * p.launch_overhead_s)
    assert (op_units(fwd, 1, alltoall=False), op_units(bwd, 1, alltoall=False)) == (24, 14)
    fused = _rope_ops(PRESETS["llama3-8b"])[0]
    assert explain(fused, "b200", p).launch_s == pytest.approx(p.launch_overhead_s)
    assert op_units(fused, 1, alltoall=False) == 1


def test_the_torch_profile_times_the_eager_path():
    """compute-profile's torch benchmark of an eager RoPE op runs Megatron's op sequence (real
    kernels, here on the CPU), forward and backward: traced, the same ATen ops and bytes per
    element as the transcribed Megatron code above (one tensor's count)."""
    from compute_profile.kernels import build_bench

    rows, width = 64, 256
    for phase, kernels, per_elt in ((Phase.FWD, costs.ROPE_UNFUSED_KERNELS[0], costs.ROPE_UNFUSED_BYTES[0]),
                                    (Phase.BWD_INPUT, costs.ROPE_UNFUSED_KERNELS[1], costs.ROPE_UNFUSED_BYTES[1])):
        bench = build_bench(torch, OpKind.ROPE, phase, (rows, width, 24), "bf16", "rope", torch.device("cpu"))
        assert bench.note == "eager rope (Megatron unfused)"
        if bench.prepare is not None:
            bench.prepare()
        traced = AtenBytes(rows * width // 2)
        with traced:
            bench.step()
        assert (len(traced.ops), traced.bytes / (rows * width * 2)) == (kernels, per_elt)
