"""Megatron's MoE and recipe flags (issue 26, item 2): each lands in a ParallelConfig field
under Megatron's spelling, and is either modelled (expert capacity and padding), accepted
because it changes nothing the workload models (the load-balancing switch, the flex
backend under alltoall, bf16 gradient reduction), or refused in one line that names the
flag and the missing mechanism, by YAML and flags alike."""
from __future__ import annotations

import argparse
import shlex

import pytest

from engine.commands.config_flags import add_config_arguments
from engine.commands.gen_workload import main
from engine.memory import layer_activation_bytes
from workload_gen import build
from workload_gen.config_loading import configs_from_dict
from workload_gen.core.errors import ConfigError
from workload_gen.core.moe_capacity import routed_copies
from workload_gen.core.parallel_config import RECIPE_FIELDS, ParallelConfig
from workload_gen.core.records import CollKind, Group, OpKind, Phase
from workload_gen.core.unmodelled import UNMODELLED, unmodelled
from workload_gen.flag_values import configs_from_flags

from wg_helpers import colls, comps, layer_ops

# Mixtral-8x7B on one 8-GPU node, EP 8: 8 experts, top-2, h 4096, expert FFN 14336 (SwiGLU).
# Even EP ranks (moe_load_imbalance 1): the hand counts below are the mean rank's.
MIXTRAL = {"model": "mixtral-8x7b",
           "parallel": {"world_size": 8, "ep": 8},
           "training": {"seq_length": 4096, "global_batch": 8, "moe_load_imbalance": 1.0}}
ROUTED_FLAGS = "--model mixtral-8x7b --world-size 8 --ep 8 --seq-length 4096 --global-batch 8"
MIXTRAL_FLAGS = f"{ROUTED_FLAGS} --moe-load-imbalance 1.0"


def _mixtral(**training):
    data = {**MIXTRAL, "training": {**MIXTRAL["training"], **training}}
    return configs_from_dict(data, "run.yaml")


def _flags(argv: str):
    parser = argparse.ArgumentParser()
    add_config_arguments(parser)
    return configs_from_flags(vars(parser.parse_args(shlex.split(argv))))


def _dispatch(model, par):
    return colls(layer_ops(build(model, par), 0), Group.EP, CollKind.ALL_TO_ALL, Phase.FWD)[0]


# --- modelled: capacity and padding -----------------------------------------------------

def test_routed_copies_follow_megatrons_get_capacity():
    # 4096 tokens x top-2 over 8 experts: 1024 copies per expert.
    assert routed_copies(4096, 2, 8, None, False) == 8192  # dropless
    assert routed_copies(4096, 2, 8, 1.5, False) == 8192  # capacity 1536 >= 1024: nothing dropped
    assert routed_copies(4096, 2, 8, 1.5, True) == 8 * 1536  # padded to the capacity
    assert routed_copies(4096, 2, 8, 1.3, True) == 8 * 1332  # ceil(1024 * 1.3) = ceil(1331.2)
    assert routed_copies(4096, 2, 8, 0.5, False) == 8 * 512  # each expert keeps 512 of 1024


def test_padding_to_capacity_grows_the_all_to_all_and_the_expert_gemms():
    """Dropless: each rank sends its 4096 tokens x 2 = 8192 copies of h=4096 bf16 values,
    8192*4096*2 = 67,108,864 bytes. Factor 1.5, padded: every expert gets its capacity
    ceil(1024*1.5) = 1536 from every rank, 8*1536 = 12288 copies = 100,663,296 bytes, and
    the one local expert's GEMMs see 12288 rows (etp 1)."""
    model, plain = _mixtral()
    assert _dispatch(model, plain).bytes == 67_108_864
    model, padded = _mixtral(moe_expert_capacity_factor=1.5, moe_pad_expert_input_to_capacity=True)
    assert _dispatch(model, padded).bytes == 100_663_296
    fc1 = [op for op in comps(layer_ops(build(model, padded), 0), OpKind.GROUPED_GEMM, Phase.FWD)
           if op.name.endswith("fc1")][0]
    assert fc1.shape == (1, 12288, 2 * 14336, 4096)


def test_a_capacity_below_the_load_drops_tokens_and_one_above_changes_nothing():
    """Uniform routing: with factor >= 1 no expert overflows, the workload is the dropless
    one; factor 0.5 keeps ceil(1024*0.5) = 512 per expert, 4096 copies = 33,554,432 bytes."""
    model, plain = _mixtral()
    _, roomy = _mixtral(moe_expert_capacity_factor=1.5)
    assert build(model, roomy).stages == build(model, plain).stages
    _, tight = _mixtral(moe_expert_capacity_factor=0.5)
    assert _dispatch(model, tight).bytes == 33_554_432


def test_padding_adds_the_padded_copies_to_the_saved_activations():
    """Per token copy a Mixtral MoE layer saves (bf16, etp 1): the permuted input 2h, FC1
    output 2*2f and FC2 input 2f = 2*4096 + 4*14336 + 2*14336 = 94,208 bytes (the expert
    output is not saved: the probabilities are applied in the activation). Padding adds
    12288 - 8192 = 4096 copies: 385,875,968 bytes. The dropless
    layout is taken evenly loaded (moe_load_imbalance 1): padded, every rank receives exactly
    its 12288 copies, while dropless the busiest rank would receive more than its 8192
    (workload_gen.core.moe_routing)."""
    model, plain = _mixtral(moe_load_imbalance=1.0)
    _, padded = _mixtral(moe_expert_capacity_factor=1.5, moe_pad_expert_input_to_capacity=True)
    extra = layer_activation_bytes(model, padded, 0).total - layer_activation_bytes(model, plain, 0).total
    assert extra == 4096 * 94_208


def test_capacity_flags_equal_the_yaml_and_a_negative_factor_is_dropless():
    _, yaml_par = _mixtral(moe_expert_capacity_factor=1.5, moe_pad_expert_input_to_capacity=True)
    _, flag_par, _ = _flags(f"{MIXTRAL_FLAGS} --moe-expert-capacity-factor 1.5 --moe-pad-expert-input-to-capacity")
    assert flag_par == yaml_par
    _, neg, _ = _flags(f"{MIXTRAL_FLAGS} --moe-expert-capacity-factor -1")
    assert neg.moe_expert_capacity_factor is None  # Megatron's TransformerConfig reads < 0 as dropless
    with pytest.raises(ConfigError, match="moe_pad_expert_input_to_capacity=True is invalid; needs moe_expert_capacity"):
        _mixtral(moe_pad_expert_input_to_capacity=True)
    with pytest.raises(ConfigError, match="training.moe_expert_capacity_factor='x' is invalid; must be a number"):
        _mixtral(moe_expert_capacity_factor="x")


def test_a_capacity_workload_file_reads_back(tmp_path):
    from formats.workload_files import read_workload

    out = tmp_path / "w.txt"
    assert main([*shlex.split(MIXTRAL_FLAGS), "--moe-expert-capacity-factor", "1.5",
                 "--moe-pad-expert-input-to-capacity", "-o", str(out)]) == 0
    text = out.read_text()
    assert "# parallel.moe_expert_capacity_factor: 1.5" in text and "parallel.cuda_graph_impl" not in text
    assert read_workload(out).parallel.moe_pad_expert_input_to_capacity is True


# --- accepted: changes nothing the workload models -----------------------------------

def test_forced_balance_routes_at_the_uniform_statistic():
    """--moe-router-force-load-balancing is modelled: the busiest EP rank then receives the
    uniform top-k statistic's excess (a fraction of a percent at 4096 tokens, top-2 of 8),
    not the learned-routing prior; the ops grow by exactly that factor."""
    from workload_gen.core.moe_routing import LEARNED_RANK_IMBALANCE, rank_load_factor

    model, learned, _ = _flags(ROUTED_FLAGS)
    _, forced, _ = _flags(f"{ROUTED_FLAGS} --moe-router-force-load-balancing")
    r = rank_load_factor(model, forced, 4096)
    assert 1.0 < r < 1.02 and rank_load_factor(model, learned, 4096) == pytest.approx(LEARNED_RANK_IMBALANCE)
    assert _dispatch(model, forced).bytes == round(4096 * 2 * 4096 * 2 * r)


@pytest.mark.parametrize("flags", [
    "--moe-token-dispatcher-type alltoall",  # the dispatcher modelled
    "--moe-flex-dispatcher-backend hybridep",  # used only by the flex dispatcher
    "--reuse-grad-buf-for-mxfp8-param-ag",  # acts only on fp8 weights (fp8_param_gather)
    "--recompute-granularity selective --recompute-modules core_attn",  # = selective as modelled
    "--cross-entropy-fusion-impl te --enable-experimental",  # kernel choice, feature gate
])
def test_accepted_flags_leave_the_ops_unchanged(flags):
    base = MIXTRAL_FLAGS + (" --recompute-granularity selective" if "recompute-modules" in flags else "")
    model, plain, _ = _flags(base)
    model2, par, _ = _flags(f"{MIXTRAL_FLAGS} {flags}")
    assert model2 == model and build(model, par).stages == build(model, plain).stages


def test_grad_reduce_in_bf16_halves_the_gradient_reduction():
    """Megatron: --grad-reduce-in-bf16 turns accumulate_allreduce_grads_in_fp32 off, so the
    reduce-scatter moves 2-byte gradients instead of bf16 training's default fp32 (4)."""
    argv = "--model llama3-8b --num-layers 2 --world-size 8 --tp 2 --sp --dist-opt --global-batch 8"
    model, fp32, _ = _flags(argv)
    _, bf16, _ = _flags(f"{argv} --grad-reduce-in-bf16")
    assert fp32.grad_bytes == 4 and bf16.grad_bytes == 2 and bf16.grad_reduce_in_fp32 is False

    def rs(par):
        return [op.bytes for st in build(model, par).stages for op in st.iteration if op.name.startswith("grad_rs")]

    assert [2 * b for b in rs(bf16)] == rs(fp32)


def test_timing_neutral_flags_are_listed_in_the_ignored_note():
    _, _, notes = _flags(f"{MIXTRAL_FLAGS} --cross-entropy-fusion-impl te --enable-experimental")
    assert notes[0].startswith("note: ignored Megatron-LM flags")
    assert "--cross-entropy-fusion-impl" in notes[0] and "--enable-experimental" in notes[0]


# --- refused: one line naming the flag and the mechanism -------------------------------

RECIPE_ARGV = {
    "moe_enable_deepep": "--moe-enable-deepep", "moe_hybridep_num_sms": "--moe-hybridep-num-sms 16",
    "overlap_moe_expert_parallel_comm": "--overlap-moe-expert-parallel-comm",
    "delay_wgrad_compute": "--delay-wgrad-compute", "moe_shared_expert_overlap": "--moe-shared-expert-overlap",
    "cuda_graph_impl": "--cuda-graph-impl transformer_engine", "cuda_graph_scope": "--cuda-graph-scope attn moe_router",
    "main_params_dtype": "--use-distributed-optimizer --use-precision-aware-optimizer --main-params-dtype fp16",
    "overlap_param_gather_with_optimizer_step": "--overlap-param-gather-with-optimizer-step",
    "moe_router_num_groups": "--moe-router-num-groups 8", "moe_router_group_topk": "--moe-router-group-topk 4",
    "use_megatron_fsdp": "--use-megatron-fsdp",
}


def test_every_unmodelled_option_has_a_flag_and_is_a_recipe_field():
    assert {row[0] for row in UNMODELLED} <= set(RECIPE_ARGV) <= set(RECIPE_FIELDS)
    defaults = ParallelConfig()
    for name, _, noop, _ in UNMODELLED:
        assert getattr(defaults, name) == noop, name  # the default is the no-op


@pytest.mark.parametrize("name, flag, noop, mechanism", UNMODELLED)
def test_unmodelled_options_warn_alike_by_flags_and_yaml(tmp_path, capsys, name, flag, noop, mechanism):
    """An option whose mechanism is left out runs, and says so in one line that -q does not
    silence (issue 27 item 4); a YAML config names the same line in unmodelled()."""
    argv = shlex.split(f"{MIXTRAL_FLAGS} {RECIPE_ARGV[name]}")
    assert main([*argv, "-q", "-o", str(tmp_path / "w.txt")]) == 0
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"warning: gen-workload: not modelled: {flag}")
    assert f"({mechanism}); simulated without it" in err
    assert (tmp_path / "w.txt").is_file()
    value = {"moe_hybridep_num_sms": 16, "cuda_graph_impl": "transformer_engine", "cuda_graph_scope": ["attn"],
             "main_params_dtype": "fp16", "moe_router_num_groups": 8, "moe_router_group_topk": 4}.get(name, True)
    extra = {"use_precision_aware_optimizer": True, "distributed_optimizer": True} if name == "main_params_dtype" else {}
    _, par = _mixtral(**{name: value}, **extra)
    (line,) = unmodelled(par)
    assert line.startswith(f"not modelled: {flag}") and mechanism in line


@pytest.mark.parametrize("argv, shown", [
    ("--moe-token-dispatcher-type allgather", "--moe-token-dispatcher-type allgather"),
    ("--use-custom-fsdp", "--use-megatron-fsdp"),
])
def test_dispatchers_and_aliases_warn_by_megatrons_name(tmp_path, capsys, argv, shown):
    assert main([*shlex.split(f"{MIXTRAL_FLAGS} {argv}"), "-q", "-o", str(tmp_path / "w.txt")]) == 0
    err = capsys.readouterr().err
    assert f"warning: gen-workload: not modelled: {shown} (" in err


@pytest.mark.parametrize("argv, shown", [
    ("--recompute-granularity selective --recompute-modules moe shared_experts",
     "not modelled yet: --recompute-modules moe shared_experts ("),
    # Megatron's TransformerConfig: "Delayed scaling does not support moe_act and layernorm recompute for fp8"
    ("--recompute-granularity selective --recompute-modules layernorm --fp8-format hybrid",
     "--recompute-modules layernorm needs an fp8 recipe other than delayed"),
])
def test_nested_and_fp8_recompute_modules_are_refused_by_name(tmp_path, capsys, argv, shown):
    assert main([*shlex.split(f"{MIXTRAL_FLAGS} {argv}"), "-o", str(tmp_path / "w.txt")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and shown in err


def test_recompute_modules_act_only_under_selective_recompute():
    """As in Megatron, the modules are read only with selective recompute: with none they
    change nothing (so search can vary recompute around them); unknown names are refused."""
    model, plain = _mixtral()
    _, listed = _mixtral(recompute_modules=["moe_act"])
    assert build(model, listed).stages == build(model, plain).stages
    assert ParallelConfig(recompute_modules=["moe_act"]).recompute_modules == ("moe_act",)  # JSON read back
    with pytest.raises(ConfigError, match="unknown module 'attn'"):
        _mixtral(recompute="selective", recompute_modules=["attn"])


# --- modelled: selective recompute of the expert activation (moe_act) ------------------

def _layer0_backward(model, par):
    return layer_ops(build(model, par), 0, "bwd")


def test_moe_act_recompute_reruns_the_expert_activation_before_fc2s_backward():
    """Megatron's experts.py checkpoints the activation without its output: in the backward
    the activation's forward re-runs first thing when fc2's output gradient arrives."""
    model, par = _mixtral(recompute="selective", recompute_modules=["core_attn", "moe_act"])
    bwd = _layer0_backward(model, par)
    recomputed = [op for op in bwd if op.phase is Phase.RECOMPUTE]
    assert [op.name for op in recomputed] == ["expert_swiglu", "core_attn"]  # backward order: MLP first
    i = bwd.index(recomputed[0])
    assert bwd[i + 1].name == "expert_fc2" and bwd[i + 1].phase is Phase.BWD_INPUT
    fwd_act = [op for op in layer_ops(build(model, par), 0) if op.name == "expert_swiglu"][0]
    assert (recomputed[0].flops, recomputed[0].bytes, recomputed[0].shape) == (fwd_act.flops, fwd_act.bytes,
                                                                               fwd_act.shape)


def test_moe_act_recompute_drops_fc2s_saved_input():
    """FC2's saved input is the activation output: 8192 token copies x 14336 bf16 values =
    2 * 8192 * 14336 = 234,881,024 bytes per MoE layer, no longer kept (ranks evenly loaded:
    moe_load_imbalance 1)."""
    model, sel = _mixtral(recompute="selective", moe_load_imbalance=1.0)
    _, act = _mixtral(recompute="selective", recompute_modules=["core_attn", "moe_act"], moe_load_imbalance=1.0)
    drop = layer_activation_bytes(model, sel, 0).rest - layer_activation_bytes(model, act, 0).rest
    assert drop == 234_881_024


def test_moe_act_alone_keeps_core_attention_stored():
    """Without core_attn in the list, selective recompute re-runs only the activation: core
    attention's forward is not repeated and what it saves stays in memory."""
    from engine.memory import stage_chunk_activation

    model, none = _mixtral(moe_load_imbalance=1.0)
    _, act = _mixtral(recompute="selective", recompute_modules=["moe_act"], moe_load_imbalance=1.0)
    assert [op.name for op in _layer0_backward(model, act) if op.phase is Phase.RECOMPUTE] == ["expert_swiglu"]
    held = {p: stage_chunk_activation(build(model, p), 0, 0, attention="flash", dropout=False)[0]
            for p in (none, act)}
    assert held[none] - held[act] == model.num_layers * 234_881_024


def test_moe_act_recompute_under_delayed_fp8_is_refused_as_megatron_does():
    with pytest.raises(ConfigError, match="moe_act needs an fp8 recipe other than delayed"):
        _mixtral(recompute="selective", recompute_modules=["moe_act"], dtype="fp8")


def test_moe_act_recompute_under_fp8_requantizes_fc2s_input_for_its_wgrad():
    """Megatron (experts.py at d98e8a64) sets Transformer Engine's save_original_input on fc2
    when moe_act is recomputed under fp8: fc2 keeps the re-made bf16 activation output and
    quantizes it again, right before its weight gradient; the dropped tensor is the bf16 one."""
    model, par = _mixtral(recompute="selective", recompute_modules=["moe_act"], dtype="fp8",
                          fp8_recipe="tensorwise", moe_load_imbalance=1.0)
    bwd = [op for op in _layer0_backward(model, par) if op.name.startswith("expert_fc2")]
    names = [(op.name, op.phase) for op in bwd]
    cast = names.index(("expert_fc2.fp8_cast", Phase.BWD_WEIGHT))
    assert names[cast + 1] == ("expert_fc2", Phase.BWD_WEIGHT)
    fwd_cast = next(op for op in layer_ops(build(model, par), 0) if op.name == "expert_fc2.fp8_cast")
    assert (bwd[cast].flops, bwd[cast].bytes) == (fwd_cast.flops, fwd_cast.bytes)
    assert layer_activation_bytes(model, par, 0).recomputed == 234_881_024  # 8192 x 14336 x 2 B, bf16


def test_moe_with_moe_act_and_layernorm_rerun_in_megatrons_order():
    """--recompute-modules moe layernorm moe_act (NVIDIA's Nemotron-3 Nano recipes): the pre-MLP
    norm's checkpoint re-makes the MoE checkpoint's input, then the whole MoE forward re-runs,
    and the expert activation, dropped again by its own checkpoint, runs a third time before
    fc2's backward (moe_layer.py, experts.py, transformer_layer.py at d98e8a64)."""
    model, par = _mixtral(recompute="selective", recompute_modules=["core_attn", "moe", "layernorm", "moe_act"])
    bwd = _layer0_backward(model, par)
    recomputed = [op.name for op in bwd if op.phase is Phase.RECOMPUTE]
    assert recomputed[0] == "pre_mlp_norm" and recomputed[1] == "router"
    assert recomputed.count("expert_swiglu") == 2  # in the MoE re-run and before fc2's backward
    i = max(k for k, op in enumerate(bwd) if op.name == "expert_swiglu" and op.phase is Phase.RECOMPUTE)
    assert bwd[i + 1].name == "expert_fc2" and bwd[i + 1].phase is Phase.BWD_INPUT


# --- modelled: checkpointed dense MLP (mlp) and shared experts (shared_experts) -------

def test_mlp_recompute_reruns_the_whole_mlp_before_its_backward():
    """Megatron checkpoints self.mlp (fc1 carries the fused pre-MLP norm): when the backward
    reaches the MLP's output, its forward re-runs, SP gather and reduce-scatter included."""
    model, par = configs_from_dict({
        "model": {"preset": "llama3-8b", "num_layers": 2}, "parallel": {"world_size": 2, "tp": 2, "sp": True},
        "training": {"seq_length": 4096, "global_batch": 1, "recompute": "selective",
                     "recompute_modules": ["core_attn", "mlp"]}})
    bwd = _layer0_backward(model, par)
    names = [op.name for op in bwd if op.phase is Phase.RECOMPUTE]
    assert names == ["pre_mlp_norm", "fc1_ag", "fc1", "swiglu", "fc2", "fc2_rs", "core_attn"]
    assert bwd[0].name == "mlp_residual" and bwd[1].phase is Phase.RECOMPUTE  # right after the residual's


def test_mlp_recompute_drops_the_mlps_saved_tensors():
    """Llama-3 8B, tp 2 with SP, 4096 tokens, bf16: the MLP saves its norm output
    2*4096*4096/2, the FC1 output 2*4096*(2*14336)/2 and the FC2 input 2*4096*14336/2:
    16,777,216 + 117,440,512 + 58,720,256 = 192,937,984 bytes, no longer kept but re-made
    once during the backward."""
    data = {"model": {"preset": "llama3-8b", "num_layers": 2}, "parallel": {"world_size": 2, "tp": 2, "sp": True},
            "training": {"seq_length": 4096, "global_batch": 1, "recompute": "selective"}}
    model, sel = configs_from_dict(data)
    data["training"]["recompute_modules"] = ["core_attn", "mlp"]
    _, mlp = configs_from_dict(data)
    a, b = layer_activation_bytes(model, sel, 0), layer_activation_bytes(model, mlp, 0)
    assert a.rest - b.rest == b.recomputed == 192_937_984


def test_shared_experts_recompute_checkpoints_the_shared_mlp():
    """DeepSeek-V2-Lite (two shared experts, 2816 wide, SwiGLU), 4096 tokens, tp 1: the shared
    MLP saves 2*4096*2*2816 + 2*4096*2816 = 69,206,016 bytes, dropped and re-run."""
    data = {"model": "deepseek-v2-lite", "parallel": {"world_size": 8, "ep": 8},
            "training": {"seq_length": 4096, "global_batch": 8, "recompute": "selective"}}
    model, sel = configs_from_dict(data)
    data["training"]["recompute_modules"] = ["core_attn", "shared_experts"]
    _, shared = configs_from_dict(data)
    bwd = layer_ops(build(model, shared), 1, "bwd")
    assert [op.name for op in bwd if op.phase is Phase.RECOMPUTE] == [
        "shared_fc1", "shared_swiglu", "shared_fc2", "core_attn"]
    a, b = layer_activation_bytes(model, sel, 1), layer_activation_bytes(model, shared, 1)
    assert a.rest - b.rest == b.recomputed == 69_206_016


def test_mla_up_proj_recompute_remakes_q_k_v_before_core_attentions_backward():
    """DeepSeek-V2-Lite (MLA, no q compression: q_proj from the hidden state), tp 2 with SP:
    the up projections (their SP gathers and the fused kv norm included) and RoPE re-run right
    before core attention's backward; the rotary key's gather happens before the checkpoint
    and is not repeated. The dropped q, k, v: 16 heads of (128 + 64) for q and k and 128 for
    v, 4096 tokens, bf16, over tp 2: 2*4096*16*(192 + 192 + 128)/2 = 33,554,432 bytes."""
    data = {"model": "deepseek-v2-lite", "parallel": {"world_size": 8, "tp": 2, "sp": True, "ep": 4},
            "training": {"seq_length": 4096, "global_batch": 4, "recompute": "selective"}}
    model, sel = configs_from_dict(data)
    data["training"]["recompute_modules"] = ["core_attn", "mla_up_proj"]
    _, up = configs_from_dict(data)
    bwd = _layer0_backward(model, up)
    names = [op.name for op in bwd if op.phase is Phase.RECOMPUTE]
    assert names == ["kv_norm", "q_proj_ag", "q_proj", "kv_up_ag", "kv_up", "rope", "core_attn"]
    a, b = layer_activation_bytes(model, sel, 0), layer_activation_bytes(model, up, 0)
    assert a.rest - b.rest == b.recomputed == 33_554_432
    with pytest.raises(ConfigError, match="mla_up_proj needs multi-latent attention"):
        _mixtral(recompute="selective", recompute_modules=["mla_up_proj"])


# --- modelled: the whole MoE layer (moe) and the separate norms (layernorm) ------------

def test_moe_recompute_reruns_the_whole_moe_layer_all_to_alls_included():
    """MoELayer's checkpoint (not the pre-MLP norm, a module of its own): Mixtral's router,
    permute, dispatch, expert MLP, combine and unpermute re-run when the backward reaches the
    layer's output. Dropped: router logits 2*4096*8, permuted tokens 2*8192*4096, FC1 output
    2*8192*2*14336 and FC2 input 2*8192*14336 = 771,817,472 bytes (ranks evenly loaded:
    moe_load_imbalance 1; the expert output is not saved, see engine/memory.py)."""
    model, sel = _mixtral(recompute="selective", moe_load_imbalance=1.0)
    _, moe = _mixtral(recompute="selective", recompute_modules=["core_attn", "moe"], moe_load_imbalance=1.0)
    bwd = _layer0_backward(model, moe)
    assert [op.name for op in bwd if op.phase is Phase.RECOMPUTE] == [
        "router", "permute", "dispatch_a2a", "expert_fc1", "expert_swiglu", "expert_fc2", "combine_a2a",
        "unpermute", "core_attn"]
    assert bwd[0].name == "mlp_residual" and bwd[1].name == "router"
    a, b = layer_activation_bytes(model, sel, 0), layer_activation_bytes(model, moe, 0)
    assert a.rest - b.rest == b.recomputed == 771_817_472


def test_layernorm_recompute_reruns_the_norms_that_are_modules_of_their_own():
    """Mixtral: the MoE layer's pre-MLP norm (a TENorm the router reads) re-runs first in the
    MoE backward and its output, 2*4096*4096 = 33,554,432 bytes, is not kept. The input norm
    is fused into the QKV LayerNormLinear under Transformer Engine's spec: unchanged. A dense
    model changes nothing at all (both its norms are fused)."""
    model, sel = _mixtral(recompute="selective")
    _, ln = _mixtral(recompute="selective", recompute_modules=["core_attn", "layernorm"])
    bwd = _layer0_backward(model, ln)
    assert [op.name for op in bwd if op.phase is Phase.RECOMPUTE] == ["pre_mlp_norm", "core_attn"]
    assert bwd[1].name == "pre_mlp_norm"
    a, b = layer_activation_bytes(model, sel, 0), layer_activation_bytes(model, ln, 0)
    assert a.rest - b.rest == b.recomputed == 33_554_432
    dense = {"model": {"preset": "llama3-8b", "num_layers": 2}, "parallel": {"world_size": 2, "tp": 2, "sp": True},
             "training": {"seq_length": 4096, "global_batch": 1, "recompute": "selective"}}
    llama, plain = configs_from_dict(dense)
    dense["training"]["recompute_modules"] = ["core_attn", "layernorm"]
    _, fused = configs_from_dict(dense)
    assert build(llama, fused).stages == build(llama, plain).stages
    assert layer_activation_bytes(llama, fused, 0) == layer_activation_bytes(llama, plain, 0)


def test_layernorm_recompute_of_mlas_input_norm():
    """DeepSeek-V2-Lite, tp 2 with SP: MLA's input norm is its own module (no down-projection
    fusion, Megatron's default), re-run before the projection's backward; its output, the
    down projections' input, 2*4096*2048/2 = 8,388,608 bytes, is not kept."""
    data = {"model": "deepseek-v2-lite", "parallel": {"world_size": 8, "tp": 2, "sp": True, "ep": 4},
            "training": {"seq_length": 4096, "global_batch": 4, "recompute": "selective"}}
    model, sel = configs_from_dict(data)
    data["training"]["recompute_modules"] = ["core_attn", "layernorm"]
    _, ln = configs_from_dict(data)
    bwd = _layer0_backward(model, ln)  # layer 0 is dense: its MLP norm is fused, only MLA's counts
    assert [op.name for op in bwd if op.phase is Phase.RECOMPUTE] == ["input_norm", "core_attn"]
    i = [op.name for op in bwd].index("input_norm")
    assert bwd[i + 1].name.startswith("proj")
    a, b = layer_activation_bytes(model, sel, 0), layer_activation_bytes(model, ln, 0)
    assert a.rest - b.rest == b.recomputed == 8_388_608


def test_deprecated_moe_layer_recompute_is_selective_recompute_of_the_moe_layer():
    """Megatron's TransformerConfig turns --moe-layer-recompute into selective recompute with
    "moe" appended to the modules, and refuses it with full recompute."""
    _, old, _ = _flags(f"{MIXTRAL_FLAGS} --moe-layer-recompute")
    _, new, _ = _flags(f"{MIXTRAL_FLAGS} --recompute-granularity selective --recompute-modules core_attn moe")
    assert old == new
    with pytest.raises(ConfigError, match="cannot be combined with full recompute"):
        _flags(f"{MIXTRAL_FLAGS} --moe-layer-recompute --recompute-granularity full")


def test_recompute_modules_round_trip_through_the_workload_file(tmp_path):
    """The header writes the list; the reader takes a list of names for a tuple field (and
    nothing else), so run-analytical simulates what gen-workload built."""
    from formats.workload_files import read_workload

    out = tmp_path / "w.txt"
    assert main([*shlex.split(MIXTRAL_FLAGS), "--recompute-granularity", "selective",
                 "--recompute-modules", "core_attn", "moe_act", "-o", str(out)]) == 0
    text = out.read_text()
    assert '# parallel.recompute_modules: ["core_attn", "moe_act"]' in text
    w = read_workload(out)
    assert w.parallel.recompute_modules == ("core_attn", "moe_act")
    model, par = _mixtral(recompute="selective", recompute_modules=["core_attn", "moe_act"])
    assert w.parallel == par and w.stages == build(model, par).stages
    out.write_text(text.replace('["core_attn", "moe_act"]', '["core_attn", 3]'))
    with pytest.raises(Exception, match="must be a list of names"):
        read_workload(out)


@pytest.mark.parametrize("argv, impl", [("--enable-cuda-graph", "local"),
                                        ("--external-cuda-graph", "transformer_engine")])
def test_cuda_graph_aliases_are_modelled_without_a_warning(tmp_path, capsys, argv, impl):
    """Megatron's older spellings set cuda_graph_impl; graphs are modelled (engine.host_launch),
    so nothing warns."""
    out = tmp_path / "w.txt"
    assert main([*shlex.split(f"{MIXTRAL_FLAGS} {argv}"), "-q", "-o", str(out)]) == 0
    assert capsys.readouterr().err == ""
    assert f'# parallel.cuda_graph_impl: "{impl}"' in out.read_text()


def test_flex_dispatcher_sm_count_takes_every_megatron_spelling():
    """Megatron-LM d98e8a64: --moe-flex-dispatcher-num-sms, with --moe-hybridep-num-sms and
    --moe-deepep-num-sms as deprecated spellings routed to it."""
    base = ("--model qwen3-30b-a3b --world-size 8 --expert-model-parallel-size 8 "
            "--moe-token-dispatcher-type flex --moe-flex-dispatcher-backend deepep")
    for flag in ("--moe-flex-dispatcher-num-sms", "--moe-hybridep-num-sms", "--moe-deepep-num-sms"):
        _, par, _ = _flags(f"{base} {flag} 24")
        assert par.moe_hybridep_num_sms == 24


def test_router_padding_takes_both_megatron_spellings():
    """--moe-router-padding-for-quantization and its compatibility alias --moe-router-padding-for-fp8
    (Megatron-LM d98e8a64 transformer_config.py) set the same field."""
    base = "--model qwen3-30b-a3b --world-size 8 --expert-model-parallel-size 8 --fp8-format e4m3 --fp8-recipe tensorwise"
    for flag in ("--moe-router-padding-for-quantization", "--moe-router-padding-for-fp8"):
        _, par, _ = _flags(f"{base} {flag}")
        assert par.moe_router_padding_for_quantization is True


MEGATRON_MOE_FIELDS = (
    "apply_probs_on_input aux_loss_coeff combine_bwd_dtype deepep_num_sms dispatch_fwd_dtype enable_deepep "
    "enable_routing_replay expert_capacity_factor expert_rank_capacity_factor ffn_hidden_size "
    "flex_dispatcher_backend flex_dispatcher_num_sms grouped_gemm hybridep_num_blocks_permute "
    "hybridep_num_blocks_unpermute hybridep_num_sms hybridep_num_sms_preprocessing "
    "hybridep_pad_uneven_dispatch_inputs input_jitter_eps latent_size layer_freq layer_recompute "
    "mlp_glu_interleave_size ncclep_zero_copy pad_expert_input_to_capacity pad_experts_for_cuda_graph_inference "
    "paged_stash paged_stash_buffer_size_factor_cpu paged_stash_buffer_size_factor_cuda paged_stash_page_size "
    "per_layer_logging permute_fusion permute_fusion_into_hybridep router_bias_update_rate router_dtype "
    "router_enable_expert_bias router_force_biased router_force_load_balancing router_fusion router_group_topk "
    "router_load_balancing_type router_num_groups router_padding_for_fp8 router_padding_for_quantization "
    "router_pre_softmax router_quantile_balancing_ema router_score_function router_topk "
    "router_topk_limited_devices router_topk_scaling_factor shared_expert_gate shared_expert_glu_interleave_size "
    "shared_expert_intermediate_size shared_expert_overlap single_grouped_bias single_grouped_weight "
    "token_dispatcher_type token_drop_policy token_dropping use_grouped_tensor z_loss_coeff").split()
"""The ``moe_*`` fields of Megatron-LM d98e8a64's TransformerConfig (transformer_config.py), each
a command-line flag of the same name there (arguments.py builds them with ArgumentGroupFactory)."""


def test_every_megatron_moe_flag_is_read_ignored_or_refused_by_name():
    """A launch line from today's Megatron never stops at an unknown MoE flag: each is parsed
    (modelled), accepted as changing nothing, or refused as 'not modelled: FLAG' by name."""
    from workload_gen.megatron_flags import IGNORED_MEGATRON_FLAGS, NOT_MODELLED_MEGATRON_FLAGS

    parser = argparse.ArgumentParser()
    add_config_arguments(parser)
    known = {f for a in parser._actions for f in a.option_strings}
    flags = [f"--moe-{name.replace('_', '-')}" for name in MEGATRON_MOE_FIELDS]
    assert len(flags) == 61
    missing = [f for f in flags if f not in known and f not in IGNORED_MEGATRON_FLAGS
               and f not in NOT_MODELLED_MEGATRON_FLAGS]
    assert not missing


def test_a_refused_megatron_moe_flag_names_itself_in_one_line(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--model", "qwen3-30b-a3b", "--world-size", "8", "--ep", "8", "--moe-latent-size", "1024",
              "-o", "/dev/null"])
    err = capsys.readouterr().err.strip()
    assert exc.value.code == 2 and len(err.splitlines()) == 1 and "not modelled: --moe-latent-size 1024" in err
