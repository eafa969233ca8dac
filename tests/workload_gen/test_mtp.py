"""DeepSeek-V3's multi-token prediction (MTP) as the workload simulates it.

Megatron-Core's MultiTokenPredictionLayer (multi_token_prediction.py @d98e8a64) per depth:
a second lookup of the SHARED embedding (tokens shifted by the depth), enorm and hnorm,
the 2h concatenation through eh_proj (column-parallel 2h -> h), one transformer layer of
the main model's last kind, its own final norm, then a second pass of the SHARED output
head and cross-entropy (gpt_model.py process_mtp_loss). Each test derives what that adds
by hand from the shapes, on DeepSeek-V3 shrunk to 4 layers (1 dense + 3 MoE) for speed.
"""
from __future__ import annotations

from dataclasses import replace

import pytest

from engine.memory import estimate_memory, layer_activation_bytes
from workload_gen import build
from workload_gen.core.model_presets import get_preset
from workload_gen.core.optimizer_state import optimizer_state_bytes
from workload_gen.core.parallel_config import ParallelConfig
from workload_gen.core.params import mtp_params, mtp_tensors, padded_vocab
from workload_gen.core.records import CollectiveOp, CollKind, ComputeOp, Group, Op, Phase, Workload

V3_4 = replace(get_preset("deepseek-v3"), num_layers=4, num_dense_layers=1)
"""DeepSeek-V3's shapes with 4 layers: layer 0 dense, layers 1-3 MoE (the MTP layer's kind)."""
MTP = replace(V3_4, mtp_num_layers=1)
L = V3_4.num_layers


def _par(**kw: object) -> ParallelConfig:
    base: dict[str, object] = dict(seq_length=1024, micro_batch=1, global_batch=8, world_size=1)
    base.update(kw)
    return ParallelConfig(**base)  # type: ignore[arg-type]


def _fwd(w: Workload, stage: int, layer: int | None = None) -> list[Op]:
    return [op for ch in w.stages[stage].chunks for op in ch.forward if layer is None or op.layer == layer]


def _flops(ops: list[Op]) -> float:
    return sum(op.flops for op in ops if isinstance(op, ComputeOp))


def _strip(op: Op) -> tuple[object, ...]:
    """An op without its layer index: what makes two layers' ops 'the same op'."""
    if isinstance(op, ComputeOp):
        return (op.name, op.phase, op.kind, op.shape, op.dtype, op.flops, op.bytes)
    return (op.name, op.phase, op.kind, op.group, op.group_size, op.bytes, op.overlappable, op.peer)


@pytest.mark.parametrize("kw", [dict(), dict(tp=2, sp=True, ep=2, world_size=4)])
def test_mtp_forward_flops_are_one_moe_layer_plus_eh_proj_head_and_norms(kw: dict[str, object]) -> None:
    par = _par(**kw)
    w0, w1 = build(V3_4, par), build(MTP, par)
    tp = par.tp
    T, h = par.micro_batch * par.seq_length, V3_4.hidden_size
    T_sp = T // tp if par.sp else T
    V = padded_vocab(V3_4, par)
    depth = _fwd(w1, 0, L + 1)
    # The MTP layer is a main MoE layer (layer L-1), op for op, only the layer index differs.
    layer_ops = [op for op in depth if not op.name.startswith("mtp_")]
    assert [_strip(op) for op in layer_ops] == [_strip(op) for op in _fwd(w0, 0, L - 1)]
    moe_layer = _flops(_fwd(w0, 0, L - 1))
    eh_proj = 2 * T * (2 * h) * h / tp            # [T, 2h] @ [2h, h/tp]
    head = 2 * T * h * V / tp                      # [T, h] @ [h, V/tp], the shared output layer again
    norms = 3 * 4 * T_sp * h                       # enorm, hnorm, final norm: RMSNorm ~4 FLOPs/element
    loss = 5 * T * V / tp                          # the vocab-parallel cross-entropy again
    dropout = T_sp * h                             # the embedding's dropout (the lookup is a gather: 0)
    argmax = T * V / tp                            # the acceptance count's max over the logits
    by_name = {op.name: op.flops for op in depth if isinstance(op, ComputeOp)}
    assert by_name["mtp_eh_proj"] == eh_proj and by_name["mtp_output"] == head
    assert _flops(_fwd(w1, 0)) - _flops(_fwd(w0, 0)) == pytest.approx(moe_layer + eh_proj + head + norms + loss + dropout + argmax,
                                                                     rel=1e-12)
    # The main model's ops are untouched.
    assert [_strip(op) for op in _fwd(w1, 0) if op.layer <= L] == [_strip(op) for op in _fwd(w0, 0)]


def test_mtp_tp_collectives_follow_megatrons_eh_proj_and_layer() -> None:
    # eh_proj under SP: all-gather of its 2h input (T*2h*B), then Megatron's
    # gather_from_tensor_model_parallel_region of the h/tp outputs (T*h*B); the backward
    # all-gathers the scattered gradient (T*h*B), re-gathers the input for wgrad and
    # reduce-scatters the input gradient (T*2h*B each). The MoE layer's all-to-alls come too.
    par = _par(tp=2, sp=True, ep=2, world_size=4)
    w = build(MTP, par)
    T, h, B = par.seq_length, MTP.hidden_size, 2
    colls = {(op.name, op.phase): op for ch in w.stages[0].chunks for op in (*ch.forward, *ch.backward)
             if op.layer == L + 1 and isinstance(op, CollectiveOp)}
    assert colls[("mtp_eh_proj_ag", Phase.FWD)].bytes == T * 2 * h * B
    assert colls[("mtp_eh_proj_out_ag", Phase.FWD)].kind is CollKind.ALL_GATHER
    assert colls[("mtp_eh_proj_out_ag", Phase.FWD)].bytes == T * h * B
    assert colls[("mtp_eh_proj_scatter_ag_bwd", Phase.BWD_INPUT)].bytes == T * h * B
    assert colls[("mtp_eh_proj_rs_bwd", Phase.BWD_INPUT)].bytes == T * 2 * h * B
    assert colls[("mtp_embedding_rs", Phase.FWD)].kind is CollKind.REDUCE_SCATTER  # the second lookup's SP scatter
    assert {("dispatch_a2a", Phase.FWD), ("combine_a2a", Phase.FWD)} <= set(colls)
    # the acceptance count's vocab-parallel argmax: each rank's T maxima (bf16) and indices
    # (int64) all-gathered over TP
    assert colls[("mtp_argmax_max_ag", Phase.FWD)].bytes == 2 * T * B
    assert colls[("mtp_argmax_index_ag", Phase.FWD)].bytes == 2 * T * 8
    assert all(op.group is Group.EP for (n, _), op in colls.items() if n.endswith("_a2a"))


def test_stage_parameters_grow_by_the_mtp_module_and_nothing_shared() -> None:
    # pp = 1: the embedding and the output head are the main model's tensors; the stage
    # grows by exactly mtp_params (one rank holds everything at tp = ep = 1).
    w0, w1 = build(V3_4, _par()), build(MTP, _par())
    assert w1.stages[0].params - w0.stages[0].params == mtp_params(MTP)
    assert w1.params_total == w0.params_total  # the paper's count stays the main model's
    # tp 2, ep 2: each tensor by its own split (eh_proj column-parallel, experts over ep*etp).
    par = _par(tp=2, sp=True, ep=2, world_size=4)
    split = {"tp": 2, "expert": 4, "replicated": 1}  # experts over ep * etp (etp = tp by default)
    local = sum(t.numel // split[t.shard] for t in mtp_tensors(MTP))
    assert build(MTP, par).stages[0].params - build(V3_4, par).stages[0].params == local
    h = MTP.hidden_size
    assert mtp_params(MTP) == 2 * h + 2 * h * h + sum(t.numel for t in mtp_tensors(MTP)[3:-1]) + h


def test_mtp_on_a_later_stage_keeps_an_embedding_copy_in_sync() -> None:
    # pp 2: Megatron-Core builds an embedding on the MTP rank too (gpt_model.py: pre_process or
    # mtp_process) and all-reduces its gradient with the first stage's.
    par = _par(pp=2, world_size=2)
    w0, w1 = build(V3_4, par), build(MTP, par)
    emb = padded_vocab(MTP, par) * MTP.hidden_size
    assert w1.stages[0].params == w0.stages[0].params
    assert w1.stages[1].params - w0.stages[1].params == mtp_params(MTP) + emb
    for stage in (0, 1):
        ar = [op for op in w1.stages[stage].iteration if op.name == "embedding_grad_ar"]
        assert len(ar) == 1 and ar[0].group is Group.EMB and ar[0].bytes == emb * par.grad_bytes
    assert not any(op.name == "embedding_grad_ar" for st in w0.stages for op in st.iteration)


@pytest.mark.parametrize("tied", [False, True])
def test_embedding_sync_stays_between_the_first_and_last_stage(tied: bool) -> None:
    # Megatron's embedding group is the first and the last stage (default_embedding_ranks):
    # with the MTP layers on a middle stage ('Ett|ttm|L', pp 3) the all-reduce pairs stage 0
    # with stage 2 (the last stage's output-layer weight, layer L), one op each, and none on
    # the MTP stage; before, stage 1 posted one too and, tied, the simulation deadlocked.
    from engine.pipeline import run_analytical

    model = replace(MTP, tied_embeddings=tied)
    par = _par(pp=3, world_size=3, pipeline_layout="Ett|ttm|L")
    w = build(model, par)
    layers = [[op.layer for op in st.iteration if op.name == "embedding_grad_ar"] for st in w.stages]
    assert layers == [[-1], [], [L]]
    assert run_analytical(model, par, "h100", timeline=False).iteration_time_s > 0


def test_gen_workload_summary_names_the_mtp_module_apart() -> None:
    # The main model's count stays the paper's (671B for V3); the MTP module is added apart.
    from engine.commands.gen_workload import summary

    line = summary(build(MTP, _par())).splitlines()[0]
    assert f"+ 1 MTP module(s) {mtp_params(MTP) / 1e9:.3f}B" in line
    assert "MTP" not in summary(build(V3_4, _par()))


def test_mtp_zero_changes_nothing() -> None:
    # The default builds no op past the head and the model's dict (the workload file's
    # header) does not mention MTP, so files without it are as before.
    w = build(V3_4, _par())
    assert max(op.layer for op in _fwd(w, 0)) == L
    assert "mtp_num_layers" not in V3_4.to_dict() and MTP.to_dict()["mtp_num_layers"] == 1


def test_mtp_slows_the_iteration_by_about_a_layer_and_a_head_pass() -> None:
    # pp 1, m micro-batches on one stage: the iteration grows by at least m * (one MoE layer
    # + one head pass), each the time of the MAIN model's own ops (forward and backward, as
    # attached for an H100), over the iteration. A bound, not a snapshot: the MTP's norms,
    # eh_proj and second embedding pass and its share of the optimizer step come on top,
    # so the growth stays under 1.3 times (that + the step's time scaled by the parameters).
    from engine.pipeline import attach_compute, run_analytical

    par = _par()
    t0 = run_analytical(V3_4, par, "h100", timeline=False).iteration_time_s
    t1 = run_analytical(MTP, par, "h100", timeline=False).iteration_time_s
    w0, _ = attach_compute(build(V3_4, par), "h100", None)
    st = w0.stages[0]
    ops = [op for ch in st.chunks for op in (*ch.forward, *ch.backward) if isinstance(op, ComputeOp)]
    layer = sum(op.time_s for op in ops if op.layer == L - 1)
    head_pass = sum(op.time_s for op in ops if op.layer == L)  # final norm + output layer + loss
    step = sum(op.time_s for op in st.iteration if isinstance(op, ComputeOp))
    m = par.num_microbatches
    low = m * (layer + head_pass) / t0
    high = 1.3 * (m * (layer + head_pass) + step * mtp_params(MTP) / st.params) / t0
    assert low < t1 / t0 - 1 < high


def test_memory_grows_by_the_mtp_state_and_one_layers_activations() -> None:
    par = _par(distributed_optimizer=True)
    m0 = estimate_memory(build(V3_4, par))[0]
    m1 = estimate_memory(build(MTP, par))[0]
    n = mtp_params(MTP)  # pp = tp = ep = dp = 1: the rank holds all of it
    assert m1.weights - m0.weights == par.param_bytes * n
    assert m1.gradients - m0.gradients == par.grad_bytes * n
    assert m1.optimizer_states - m0.optimizer_states == pytest.approx(optimizer_state_bytes(par.optimizer, par.dtype) * n,
                                                                       abs=1)
    # 1F1B on one stage holds one micro-batch: the MTP layer (as the main layer L-1 saves)
    # plus the enorm input, eh_proj's 2h input, its final-norm input and the head's input.
    row = par.seq_length * MTP.hidden_size * 2
    layer = layer_activation_bytes(MTP, par, L - 1).total
    assert m1.activations - m0.activations == pytest.approx(layer + row + 2 * row + row + row, abs=1)


def test_layout_with_mtp_before_the_loss_stage_sends_every_depths_hidden_states() -> None:
    # 'Et*2|t*2m|L' on pp 3: the MTP layer on stage 1, the head passes on stage 2; stage 1's
    # forward send carries the main and the MTP hidden states (torch.cat, 2x the bytes).
    par = _par(pp=3, world_size=3, pipeline_layout="Ett|ttm|L")
    w0 = build(V3_4, replace(par, pipeline_layout="Ett|tt|L"))
    w1 = build(MTP, par)
    def sends(w: Workload, stage: int) -> list[int]:
        return [op.bytes for ch in w.stages[stage].chunks for op in (*ch.forward, *ch.backward)
                if op.name.startswith("pp_send")]
    assert sends(w1, 0) == sends(w0, 0)
    s0, s1 = sends(w0, 1), sends(w1, 1)
    assert s1 == [2 * s0[0], s0[1]]  # forward doubled; the backward to stage 0 as before
    s0, s1 = sends(w0, 2), sends(w1, 2)
    assert s1 == [2 * s0[0]]  # the loss stage's gradient back carries both
    assert any(op.name == "mtp_eh_proj" for op in _fwd(w1, 1))
    assert any(op.name == "mtp_output" for op in _fwd(w1, 2)) and not any(op.name == "mtp_output" for op in _fwd(w1, 1))


def test_context_parallel_rolls_swap_boundary_tokens() -> None:
    # roll_tensor under CP: per depth input_ids and position_ids (before the embedding) and
    # labels and loss_mask (before the loss), each a send/recv of the two halves' boundary
    # elements, 2*b of them: int64, and fp32 for the mask. Without CP none.
    w = build(MTP, _par(cp=2, world_size=2, micro_batch=2, global_batch=8))
    rolls = [(op.name, op.bytes) for op in _fwd(w, 0, L + 1) if "roll" in op.name]
    assert rolls == [("mtp_roll_input_ids_cp", 2 * 2 * 8), ("mtp_roll_position_ids_cp", 2 * 2 * 8),
                     ("mtp_roll_labels_cp", 2 * 2 * 8), ("mtp_roll_loss_mask_cp", 2 * 2 * 4)]
    names = [op.name for op in _fwd(w, 0, L + 1)]
    assert names.index("mtp_roll_position_ids_cp") < names.index("mtp_embedding") \
        and names.index("mtp_output") < names.index("mtp_roll_labels_cp") < names.index("mtp_loss")
    assert not any("roll" in op.name for op in _fwd(build(MTP, _par()), 0))


def test_refused_where_megatrons_mtp_mechanism_is_not_modelled() -> None:
    from workload_gen.core.errors import ConfigError

    # in check_against_model, so search skips such layouts as it skips any invalid one
    with pytest.raises(ConfigError, match="must be 1 for MTP recompute"):  # Megatron asserts it
        build(MTP, _par(recompute="full", recompute_num_layers=2))
    with pytest.raises(ConfigError, match="deferred output-layer wgrads"):
        build(MTP, _par(pp=2, world_size=2, global_batch=8, defer_embedding_wgrad_compute=True))
    build(V3_4, _par(recompute="full", recompute_num_layers=2))  # without MTP both stay as they were


def test_full_recompute_checkpoints_each_depth_as_megatron_does() -> None:
    # uniform: _checkpointed_forward wraps _proj_and_transformer_layer (enorm, hnorm,
    # eh_proj and its gathers, the layer, the final norm); the embedding lookup runs before
    # it and is not re-run. The re-run comes after the head pass's backward, before the
    # depth's own backward.
    w = build(MTP, _par(recompute="full"))
    bwd = [op for ch in w.stages[0].chunks for op in ch.backward if op.layer == L + 1]
    fwd = [op.name for op in _fwd(w, 0, L + 1)]
    rerun = [op.name for op in bwd if op.phase is Phase.RECOMPUTE]
    checkpointed = [n for n in fwd if not n.startswith(("mtp_embedding", "mtp_output", "mtp_loss", "mtp_logits_argmax"))]
    assert rerun == checkpointed and rerun[0] == "mtp_enorm" and rerun[-1] == "mtp_final_norm"
    first = next(i for i, op in enumerate(bwd) if op.phase is Phase.RECOMPUTE)
    assert {op.name for op in bwd[:first]} <= {"mtp_loss", "mtp_output"}
    # block: Megatron skips the MTP recompute (a warning); the depth's backward is as without
    blk = build(MTP, _par(recompute="full", recompute_method="block"))
    assert not any(op.phase is Phase.RECOMPUTE and op.layer > L for ch in blk.stages[0].chunks for op in ch.backward)


def test_full_recompute_memory_keeps_the_checkpoint_inputs() -> None:
    # One micro-batch in flight (pp 1). Uniform: the depth keeps its checkpoint's inputs (the
    # shifted tokens' embedding, and the hidden states, counted as the layer's input) and the
    # head's input; its re-run (the layer plus eh_proj's 2h input and the final norm's input)
    # is the largest working set, one MoE layer's total plus those two.
    par = _par(recompute="full")
    m0, m1 = estimate_memory(build(V3_4, par))[0], estimate_memory(build(MTP, par))[0]
    row = par.seq_length * MTP.hidden_size * 2
    layer = layer_activation_bytes(MTP, par, L - 1)
    assert m1.activations - m0.activations == pytest.approx(layer.input + row + row + (2 * row + row), abs=1)
