"""Collective sizes and placement against hand-computed numbers (NCCL full-buffer convention)."""
from __future__ import annotations

import math
from pathlib import Path

import pytest
from wg_helpers import colls, comps, layer_ops, make

from workload_gen.core.placement import group_size
from workload_gen.core.records import CollectiveOp, CollKind, Group, Phase

AR, AG, RS, A2A, P2P = CollKind.ALL_REDUCE, CollKind.ALL_GATHER, CollKind.REDUCE_SCATTER, CollKind.ALL_TO_ALL, CollKind.SEND_RECV


def _kinds(ops):
    return [(op.name, op.kind) for op in ops if isinstance(op, CollectiveOp)]


def test_tp_without_sp_all_reduces_after_attention_and_mlp_and_for_input_grads():
    # Llama-2 7B, tp=4, b=2, s=4096: every TP all-reduce carries b*s*h*2 bytes.
    b, s, h = 2, 4096, 4096
    w = make("llama2-7b", world_size=4, tp=4, micro_batch=b, global_batch=2, seq_length=s)
    fwd, bwd = layer_ops(w, 5), layer_ops(w, 5, "bwd")
    assert _kinds(fwd) == [("proj_ar", AR), ("fc2_ar", AR)]
    assert _kinds(bwd) == [("fc1_ar_bwd", AR), ("qkv_ar_bwd", AR)]
    assert {op.bytes for op in colls(fwd + bwd)} == {b * s * h * 2}
    # The backward all-reduce follows the dgrad and precedes the wgrad of the same layer.
    names = [(op.name, op.phase) for op in bwd]
    i = names.index(("qkv_ar_bwd", Phase.BWD_INPUT))
    assert names[i - 1] == ("qkv", Phase.BWD_INPUT) and names[i + 1] == ("qkv", Phase.BWD_WEIGHT)


def test_tp_with_sp_gathers_before_column_and_scatters_after_row_parallel():
    b, s, h = 1, 2048, 12288
    w = make("gpt3-175b", world_size=64, tp=8, pp=8, sp=True, micro_batch=b, global_batch=8, seq_length=s)
    fwd, bwd = layer_ops(w, 20), layer_ops(w, 20, "bwd")
    assert _kinds(fwd) == [("qkv_ag", AG), ("proj_rs", RS), ("fc1_ag", AG), ("fc2_rs", RS)]
    # Backward: dY gather at the row-parallel layers, re-gather of the input for the column
    # layers' wgrad, reduce-scatter of the column layers' input gradient.
    assert _kinds(bwd) == [("fc2_ag_bwd", AG), ("fc1_ag_bwd", AG), ("fc1_rs_bwd", RS),
                           ("proj_ag_bwd", AG), ("qkv_ag_bwd", AG), ("qkv_rs_bwd", RS)]
    assert {op.bytes for op in colls(fwd + bwd)} == {b * s * h * 2}  # the full gathered buffer
    assert all(op.group == Group.TP and op.group_size == 8 for op in colls(fwd + bwd))
    # Without --tp-comm-overlap only what Megatron-Core issues asynchronously may overlap:
    # the column layers' input re-gather (under dgrad) and dgrad reduce-scatter (under wgrad).
    overlappable = {op.name for op in colls(fwd + bwd) if op.overlappable}
    assert overlappable == {"fc1_ag_bwd", "fc1_rs_bwd", "qkv_ag_bwd", "qkv_rs_bwd"}
    names = [(op.name, op.phase) for op in bwd]
    assert names[names.index(("qkv_ag_bwd", Phase.BWD_INPUT)) + 1] == ("qkv", Phase.BWD_INPUT)
    assert names[names.index(("qkv_rs_bwd", Phase.BWD_INPUT)) + 1] == ("qkv", Phase.BWD_WEIGHT)
    # SP shards norms and residuals over the sequence.
    norm = [op for op in fwd if op.name == "input_norm"][0]
    assert norm.shape == (b * s // 8, h)


def test_tp_comm_overlap_marks_tp_collectives_overlappable():
    w = make("gpt3-13b", world_size=8, tp=8, sp=True, global_batch=8, tp_comm_overlap=True)
    assert all(op.overlappable for op in colls(layer_ops(w, 0) + layer_ops(w, 0, "bwd"), Group.TP))


def test_cp_ring_exchanges_local_kv_cp_minus_1_times():
    # Llama-3 70B, tp=8, cp=4, s=8192: local K and V = b * s/cp * (kv_heads/tp) * 2 * d * 2 bytes.
    b, s, cp, tp = 1, 8192, 4, 8
    w = make("llama3-70b", world_size=32, tp=tp, cp=cp, sp=True, micro_batch=b, global_batch=1, seq_length=s)
    kv = b * (s // cp) * (8 // tp) * 2 * 128 * 2
    fwd, bwd = layer_ops(w, 0), layer_ops(w, 0, "bwd")
    f = colls(fwd, Group.CP)
    assert [op.kind for op in f] == [P2P] * (cp - 1) and {op.bytes for op in f} == {kv}
    assert all(op.peer == 1 and op.group_size == cp and op.overlappable for op in f)
    bk = colls(bwd, Group.CP)
    assert len([op for op in bk if op.name.startswith("cp_kv.")]) == cp - 1
    assert len([op for op in bk if op.name.startswith("cp_dkv.")]) == cp
    # The TP collectives carry the local sequence only.
    assert {op.bytes for op in colls(fwd, Group.TP)} == {b * (s // cp) * 8192 * 2}


def test_cp_all_gather_mode():
    b, s, cp = 1, 8192, 2
    w = make("llama3-8b", world_size=16, tp=2, cp=cp, sp=True, global_batch=8, seq_length=s, cp_comm="all_gather")
    kv_local = b * (s // cp) * (8 // 2) * 2 * 128 * 2
    fwd, bwd = colls(layer_ops(w, 1), Group.CP), colls(layer_ops(w, 1, "bwd"), Group.CP)
    assert [(op.kind, op.bytes) for op in fwd] == [(AG, cp * kv_local)]
    assert [(op.kind, op.bytes) for op in bwd] == [(RS, cp * kv_local)]


def test_ep_dispatch_and_combine_all_to_all():
    # Mixtral 8x7B, tp=1, ep=8, b=1, s=4096, top-2: each all-to-all moves T*k*h*2 bytes.
    T, k, h = 4096, 2, 4096
    w = make("mixtral-8x7b", world_size=8, ep=8, global_batch=8, seq_length=T, moe_load_imbalance=1.0)  # even ranks
    fwd, bwd = layer_ops(w, 0), layer_ops(w, 0, "bwd")
    assert [(op.name, op.kind, op.bytes) for op in colls(fwd)] == [
        ("dispatch_a2a", A2A, T * k * h * 2), ("combine_a2a", A2A, T * k * h * 2)]
    assert [op.name for op in colls(bwd)] == ["combine_a2a", "dispatch_a2a"]
    assert all(op.group == Group.EP and op.group_size == 8 for op in colls(fwd + bwd))
    # One expert per rank receives all the k*T*ep/E = 2T routed rows (balanced routing).
    fc1 = [op for op in fwd if op.name == "expert_fc1"][0]
    assert fc1.shape == (1, 2 * T, 2 * 14336, h)


def test_expert_tp_gathers_and_scatters_the_routed_tokens():
    # tp=etp=2 with SP: T_sp = T/2 tokens per rank; ETP all-gather/reduce-scatter etp*T_sp*k*h*2.
    T, k, h, E, ep, etp = 4096, 2, 4096, 8, 4, 2
    w = make("mixtral-8x7b", world_size=8, tp=2, sp=True, ep=ep, global_batch=4, seq_length=T, moe_load_imbalance=1.0)
    fwd = layer_ops(w, 0)
    t_sp = T // 2
    by = {op.name: op for op in colls(fwd)}
    assert by["dispatch_a2a"].bytes == t_sp * k * h * 2 and by["dispatch_a2a"].group_size == ep
    assert by["dispatch_ag"].bytes == etp * t_sp * k * h * 2 and by["dispatch_ag"].group == Group.ETP
    assert by["combine_rs"].bytes == etp * t_sp * k * h * 2 and by["combine_rs"].kind == RS
    fc1 = [op for op in fwd if op.name == "expert_fc1"][0]
    assert fc1.shape == (E // ep, etp * ep * t_sp * k // E, 2 * 14336 // etp, h)


def test_pp_sends_between_neighbours_with_sp_sized_messages():
    b, s, h, tp = 2, 2048, 12288, 8
    w = make("gpt3-175b", world_size=64, tp=tp, pp=8, sp=True, micro_batch=b, global_batch=16, seq_length=s)
    for st in w.stages:
        ch = st.chunks[0]
        f = colls(ch.forward, Group.PP)
        bk = colls(ch.backward, Group.PP)
        assert len(f) == (0 if st.stage == 7 else 1) and len(bk) == (0 if st.stage == 0 else 1)
        for op in f + bk:
            assert op.bytes == b * s * h * 2 // tp and op.kind == P2P
        assert all(op.peer == 1 for op in f) and all(op.peer == -1 for op in bk)
        if f:
            assert ch.forward[-1] is f[0]
        if bk:
            assert ch.backward[-1] is bk[0]


def test_pp_without_sp_sends_the_full_activation():
    w = make("llama2-13b", world_size=8, tp=2, pp=4, global_batch=8, seq_length=4096)
    op = colls(w.stages[1].chunks[0].forward, Group.PP)[0]
    assert op.bytes == 4096 * 5120 * 2


def test_interleaved_chunks_send_around_the_ring():
    w = make("llama2-7b", world_size=4, pp=4, vpp=2, global_batch=8)
    last = w.stages[3]
    assert colls(last.chunks[0].forward, Group.PP)[0].peer == 1  # to stage 0, chunk 1
    assert not colls(last.chunks[1].forward, Group.PP)
    assert colls(w.stages[0].chunks[1].backward, Group.PP)[0].peer == -1
    assert not colls(w.stages[0].chunks[0].backward, Group.PP)


def _iter(w, stage, kind=None, group=None):
    return [op for op in w.stages[stage].iteration if isinstance(op, CollectiveOp)
            and (kind is None or op.kind == kind) and (group is None or op.group == group)]


def test_dp_all_reduce_without_distributed_optimizer_is_one_fp32_bucket():
    # No overlap: Megatron uses one bucket per buffer; bf16 training reduces fp32 grads.
    w = make("llama2-7b", world_size=32, tp=4, pp=2, global_batch=32)
    for st in w.stages:
        ar = _iter(w, st.stage, AR, Group.DP)
        assert len(ar) == 1 and ar[0].bytes == st.params * 4 and ar[0].group_size == 4
        assert not _iter(w, st.stage, RS) and not _iter(w, st.stage, AG)


def test_fp16_reduces_fp16_grads_unless_asked():
    w = make("llama2-7b", world_size=8, tp=4, global_batch=8, dtype="fp16")
    assert _iter(w, 0, AR, Group.DP)[0].bytes == w.stages[0].params * 2
    w32 = make("llama2-7b", world_size=8, tp=4, global_batch=8, dtype="fp16", grad_reduce_in_fp32=True)
    assert _iter(w32, 0, AR, Group.DP)[0].bytes == w32.stages[0].params * 4


def test_dp_buckets_with_overlap_and_distributed_optimizer():
    w = make("llama2-7b", world_size=64, tp=2, pp=2, global_batch=64, distributed_optimizer=True,
             overlap_grad_reduce=True, overlap_param_gather=True)
    dp = 16
    cap = max(40_000_000, 1_000_000 * dp)
    pad = math.lcm(dp, 128)
    for st in w.stages:
        rs, ag = _iter(w, st.stage, RS, Group.DP), _iter(w, st.stage, AG, Group.DP)
        elems = [op.bytes // 4 for op in rs]
        assert all(e % pad == 0 for e in elems)
        assert all(e >= cap for e in elems[:-1])  # every bucket but the last is full
        assert sum(elems) - st.params < pad * len(elems)  # padding only
        assert sorted(op.bytes // 2 for op in ag) == sorted(elems)  # same buckets, bf16 params
        assert all(op.overlappable for op in rs + ag)
        # Buckets become ready from the top layer down; each names its lowest layer.
        layers = [op.layer for op in rs]
        assert layers == sorted(layers, reverse=True)
        # Param all-gathers run after the optimizer step, lowest layers first.
        it = list(w.stages[st.stage].iteration)
        opt = [i for i, op in enumerate(it) if op.name == "optimizer"][0]
        assert all(it.index(op) > opt for op in ag) and all(it.index(op) < opt for op in rs)
        assert [op.layer for op in ag] == sorted(op.layer for op in ag)
        optimizer = it[opt]
        assert optimizer.shape == (sum(elems) // dp,)


def test_expert_grads_sync_over_expert_dp():
    # Mixtral, world 32, ep=4, tp=1: dense grads over dp=32, expert grads over edp = 32/4 = 8.
    w = make("mixtral-8x7b", world_size=32, ep=4, global_batch=32, seq_length=2048)
    st = w.stages[0]
    dense, expert = _iter(w, 0, AR, Group.DP), _iter(w, 0, AR, Group.EDP)
    assert sum(op.bytes for op in dense) == st.dense_params * 4 and dense[0].group_size == 32
    assert sum(op.bytes for op in expert) == (st.params - st.dense_params) * 4 and expert[0].group_size == 8


def test_tied_embedding_grads_all_reduced_between_first_and_last_stage():
    w = make("gpt3-1.3b", world_size=8, tp=2, pp=4, global_batch=8)
    vpad, h = 50432, 2048  # 50257 padded to a multiple of 128*tp=256
    for st in w.stages:
        emb = _iter(w, st.stage, AR, Group.EMB)
        if st.stage in (0, 3):
            assert [(op.bytes, op.group_size) for op in emb] == [(vpad // 2 * h * 4, 2)]
        else:
            assert not emb
    assert not [op for st in make("gpt3-1.3b", world_size=8, tp=2, global_batch=8).stages
                for op in st.iteration if getattr(op, "group", None) == Group.EMB]
    assert not [op for st in make("llama2-7b", world_size=8, pp=4, global_batch=8).stages
                for op in st.iteration if getattr(op, "group", None) == Group.EMB]


def test_sp_replicated_weight_grads_all_reduced_over_tp():
    # GPT-3 2.7B tp=4 pp=2 with SP: per layer 2 LayerNorms (4h) + the proj and fc2 biases (2h).
    h = 2560
    w = make("gpt3-2.7b", world_size=8, tp=4, pp=2, sp=True, global_batch=8)
    assert _iter(w, 0, AR, Group.TP)[0].bytes == 16 * 6 * h * 4
    assert _iter(w, 1, AR, Group.TP)[0].bytes == (16 * 6 * h + 2 * h) * 4  # + final LayerNorm
    assert not _iter(make("gpt3-2.7b", world_size=8, tp=4, pp=2, global_batch=8), 0, AR, Group.TP)


def test_embedding_reduce_depends_on_sp_and_positions():
    llama = make("llama2-7b", world_size=4, tp=4, sp=True, global_batch=4, seq_length=4096)
    gpt = make("gpt3-6.7b", world_size=4, tp=4, sp=True, global_batch=4)
    T, h = 4096, 4096
    assert [(o.name, o.kind, o.bytes) for o in colls(layer_ops(llama, -1))] == [("embedding_rs", RS, T * h * 2)]
    assert [(o.name, o.kind) for o in colls(layer_ops(gpt, -1))] == [("embedding_ar", AR)]
    assert [o.kind for o in colls(layer_ops(llama, -1, "bwd"))] == [AG]


def test_vocab_parallel_loss_all_reduces_three_fp32_vectors():
    w = make("llama2-7b", world_size=4, tp=4, global_batch=4, seq_length=4096)
    head = colls(layer_ops(w, 32))
    assert [op.name for op in head if op.name.startswith("loss")] == ["loss_max_ar", "loss_target_ar", "loss_sum_ar"]
    assert {op.bytes for op in head if op.name.startswith("loss")} == {4096 * 4}
    out = [op for op in comps(layer_ops(w, 32)) if op.name == "output"][0]
    assert out.shape == (4096, 32256 // 4, 4096)  # 32000 padded to a multiple of 128*tp = 512


@pytest.mark.parametrize("settings", [
    dict(model="mixtral-8x7b", world_size=64, tp=2, sp=True, ep=4, pp=2, cp=2, global_batch=16),
    dict(model="deepseek-v2-lite", world_size=32, tp=2, sp=True, ep=8, pp=1, global_batch=16),
    dict(model="llama3-70b", world_size=128, tp=8, sp=True, pp=4, vpp=2, cp=2, global_batch=32),
])
def test_every_collective_uses_its_groups_size(settings):
    w = make(settings.pop("model"), **settings)
    for _, _, op in w.ops():
        if isinstance(op, CollectiveOp):
            assert op.group_size == group_size(w.parallel, op.group), op


def test_cp_a2a_switches_sequence_and_head_sharding():
    # Llama-3 8B, tp=2, cp=2, a2a: local Q (16 heads) + K,V (4 heads) of s/cp tokens go out,
    # attention runs on 8 q heads / 2 kv heads over the whole sequence, the output comes back.
    b, s, cp, d = 1, 8192, 2, 128
    w = make("llama3-8b", world_size=8, tp=2, cp=cp, sp=True, global_batch=2, seq_length=s, cp_comm="a2a",
             recompute="selective")
    fwd, bwd = layer_ops(w, 0), layer_ops(w, 0, "bwd")
    qkv = b * (s // cp) * (16 + 2 * 4) * d * 2
    out = b * (s // cp) * 16 * d * 2
    assert [(op.name, op.kind, op.bytes) for op in colls(fwd, Group.CP)] == [
        ("cp_qkv_a2a", A2A, qkv), ("cp_out_a2a", A2A, out)]
    assert [op.name for op in colls(bwd, Group.CP) if op.phase == Phase.BWD_INPUT] == ["cp_out_a2a", "cp_qkv_a2a"]
    attn = comps(fwd)[[op.name for op in comps(fwd)].index("core_attn")]
    assert attn.shape == (b, 16 // cp, s, s, d, 1)
    rec = [op.name for op in bwd if op.phase == Phase.RECOMPUTE]
    assert rec == ["cp_qkv_a2a", "core_attn", "cp_out_a2a"]


def test_cp_a2a_needs_heads_divisible_by_cp():
    from workload_gen.core.errors import ConfigError
    with pytest.raises(ConfigError, match="cp_comm=a2a splits the heads"):
        make("llama3-8b", world_size=16, tp=8, cp=2, sp=True, global_batch=1, seq_length=8192, cp_comm="a2a")


SHARED = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "aicb"


def _aicb_fwd_sizes(name: str) -> dict[tuple[str, str], set[int]]:
    """(record name, forward comm type) -> forward comm sizes, from an AICB-generated file."""
    out: dict[tuple[str, str], set[int]] = {}
    for line in (SHARED / name).read_text().splitlines()[2:]:
        f = line.split("\t")
        if len(f) >= 12 and f[3] != "NONE":
            out.setdefault((f[0], f[3]), set()).add(int(float(f[4])))
    return out


def test_tp_sizes_agree_with_aicb_gpt13b():
    # AICB (an independent generator) for GPT-13B, tp 8 with SP, s 2048: its TP all-gathers and
    # reduce-scatters carry b*s*h*2 bytes, as ours do.
    aicb = _aicb_fwd_sizes("gpt13b_w128_tp8_pp1_gbs256_seq2048_sp_aiobEx.txt")
    w = make("gpt3-13b", world_size=128, tp=8, sp=True, global_batch=256, seq_length=2048)
    by = {op.name: op.bytes for op in colls(layer_ops(w, 3))}
    assert aicb[("attention_column", "ALLGATHER")] == {by["qkv_ag"]}
    assert aicb[("attention_row", "REDUCESCATTER")] == {by["proj_rs"]}
    assert aicb[("mlp_column", "ALLGATHER")] == {by["fc1_ag"]}
    assert aicb[("mlp_row", "REDUCESCATTER")] == {by["fc2_rs"]}


def test_ep_sizes_agree_with_aicb_mixtral():
    # AICB Mixtral 8x7B, tp 2 with SP, ep 8, s 4096: all-to-all T_sp*k*h*2, expert-TP
    # all-gather/reduce-scatter etp times that.
    aicb = _aicb_fwd_sizes("mixtral8x7b_w128_tp2_pp1_ep8_gbs256_sp.txt")
    w = make("mixtral-8x7b", world_size=128, tp=2, sp=True, ep=8, global_batch=256, seq_length=4096,
             moe_load_imbalance=1.0)  # AICB routes evenly
    by = {op.name: op.bytes for op in colls(layer_ops(w, 3))}
    assert aicb[("mlp_moelayer", "ALLTOALL_EP")] == {by["dispatch_a2a"], by["combine_a2a"]}
    assert by["dispatch_ag"] in aicb[("mlp_moelayer", "ALLGATHER")]
    assert aicb[("mlp_moelayer", "REDUCESCATTER")] == {by["combine_rs"]}


def test_pp_overlap_follows_megatrons_p2p_switch():
    def pp_ops(**kw):
        w = make("llama2-7b", world_size=4, pp=4, global_batch=8, **kw)
        return [op for _, _, op in w.ops() if isinstance(op, CollectiveOp) and op.group == Group.PP]
    assert all(op.overlappable for op in pp_ops(vpp=2))
    assert not any(op.overlappable for op in pp_ops(vpp=2, overlap_p2p_comm=False))
    assert not any(op.overlappable for op in pp_ops())  # plain 1F1B: Megatron does not overlap p2p
