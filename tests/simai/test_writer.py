"""SimAI export of our workloads, and import of SimAI files as workloads."""
from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from simai_testdata import DATA, REFERENCE_FILES, toy_workload

from engine.simai_accounting import SimaiCluster, simai_accounting
from formats.simai_convert import simai_to_workload, workload_to_simai
from formats.simai_reader import read_simai
from formats.simai_text import SimaiGroup
from formats.simai_writer import write_simai
from workload_gen.core.errors import ConfigError
from workload_gen.core.records import CollectiveOp, ComputeOp, Group, Phase

SIMAI_GROUP = {Group.TP: SimaiGroup.TP, Group.EP: SimaiGroup.EP, Group.DP: SimaiGroup.DP, Group.EDP: SimaiGroup.DP_EP}


def _stage_ops(w, stage):
    st = w.stages[stage]
    mb = [op for ch in st.chunks for op in (*ch.forward, *ch.backward)]
    return mb, list(st.iteration)


def test_header_has_every_key_simai_reads(tmp_path: Path) -> None:
    w = toy_workload()
    out = tmp_path / "w.txt"
    write_simai(w, out)
    first = out.read_text().splitlines()[0].split()
    assert first[0] == "HYBRID_TRANSFORMER_FWD_IN_BCKWD"
    keys = dict(zip(first[1::2], first[2::2]))
    assert keys == {"model_parallel_NPU_group:": "2", "ep:": "1", "pp:": "2", "vpp:": "1", "ga:": "4",
                    "all_gpus:": "8", "checkpoints:": "0", "checkpoint_initiates:": "0", "pp_comm:": "4096"}
    assert "\t" in out.read_text().splitlines()[2]  # AICB's tab-separated records


@pytest.mark.parametrize("stage", [0, 1])
def test_bytes_and_compute_are_conserved_and_unrolled_over_ga(tmp_path: Path, stage: int) -> None:
    w = toy_workload()
    ga = w.parallel.num_microbatches
    out = tmp_path / "w.txt"
    write_simai(w, out, stage=stage)
    sw = read_simai(out)
    mb, it = _stage_ops(w, stage)
    # Expected, from our records: each micro-batch collective ga times, each iteration one once; PP not a record.
    want: Counter = Counter()
    for ops, times in ((mb, ga), (it, 1)):
        for op in ops:
            if isinstance(op, CollectiveOp) and op.group != Group.PP:
                want[(SIMAI_GROUP[op.group], op.kind)] += op.bytes * times
    got: Counter = Counter()
    for rec in sw.records:
        for col in ("fwd", "ig", "wg"):
            c = rec.comm(col)
            if c.kind is not None:
                got[(rec.group(col), c.kind)] += c.bytes
    assert got == want
    compute_ns = sum(rec.fwd_compute_ns + rec.ig_compute_ns + rec.wg_compute_ns for rec in sw.records)
    want_ns = ga * sum(round(op.time_s * 1e9) for op in mb if isinstance(op, ComputeOp)) + \
        sum(round(op.time_s * 1e9) for op in it if isinstance(op, ComputeOp))
    assert compute_ns == want_ns
    n_iter = sum(1 for rec in sw.records if rec.name.startswith("iter_"))
    assert (len(sw.records) - n_iter) % ga == 0
    block = (len(sw.records) - n_iter) // ga
    blocks = [sw.records[n_iter + i * block: n_iter + (i + 1) * block] for i in range(ga)]
    assert all(b == blocks[0] for b in blocks)


def test_simai_meets_our_forward_and_backward_in_our_order() -> None:
    w = toy_workload()
    sw = workload_to_simai(w, 0)
    n_iter = sum(1 for rec in sw.records if rec.name.startswith("iter_"))
    block = sw.records[n_iter:n_iter + (len(sw.records) - n_iter) // w.parallel.num_microbatches]
    ch = w.stages[0].chunks[0]
    ours_fwd = [op.bytes for op in ch.forward if isinstance(op, CollectiveOp) and op.group != Group.PP]
    ours_bwd = [op.bytes for op in ch.backward if isinstance(op, CollectiveOp) and op.group != Group.PP]
    simai_fwd = [r.fwd_comm.bytes for r in block if r.fwd_comm.kind is not None]
    simai_bwd = [c.bytes for r in reversed(block) for c in (r.ig_comm, r.wg_comm) if c.kind is not None]
    assert simai_fwd == ours_fwd and simai_bwd == ours_bwd
    # iteration ops: SimAI's backward sweep reaches the top records last, in reverse file order
    top = sw.records[:n_iter]
    simai_it = [c.bytes for r in reversed(top) for c in (r.ig_comm, r.wg_comm) if c.kind is not None]
    assert simai_it == [op.bytes for op in w.stages[0].iteration if isinstance(op, CollectiveOp)]
    names = [r.name for r in block]
    assert names.count("embedding_layer") == 1
    emb = block[names.index("embedding_layer")]
    assert emb.fwd_compute_ns == 3000 + 1000  # the embedding and the first norm, before the first all-gather
    # groups: SP all-gather in the forward column without suffix (TP), EP as _EP, DP/EDP in the wg column
    tokens = {r.fwd_comm.token for r in block} | {r.ig_comm.token for r in block}
    assert {"ALLGATHER", "REDUCESCATTER", "ALLTOALL_EP"} <= tokens
    assert {r.wg_comm.token for r in top} >= {"REDUCESCATTER", "REDUCESCATTER_DP_EP", "ALLGATHER"}


def test_missing_compute_times_name_gpu_and_write_nothing(tmp_path: Path) -> None:
    out = tmp_path / "w.txt"
    with pytest.raises(ConfigError, match="--gpu") as info:
        write_simai(toy_workload(times=False), out)
    assert info.value.field == "gpu" and not out.exists() and list(tmp_path.iterdir()) == []


def test_cp_and_bad_stage_are_refused() -> None:
    with pytest.raises(ConfigError, match="context-parallel"):
        workload_to_simai(toy_workload(cp=2), 0)
    with pytest.raises(ConfigError, match=r"valid stages: 0\.\.1") as info:
        workload_to_simai(toy_workload(), 2)
    assert info.value.field == "stage"


def test_export_then_import_keeps_per_microbatch_work(tmp_path: Path) -> None:
    w = toy_workload()
    out = tmp_path / "w.txt"
    write_simai(w, out, stage=0)
    back = simai_to_workload(read_simai(out))
    assert back.parallel.num_microbatches == w.parallel.num_microbatches
    assert back.parallel.tp == w.parallel.tp and back.parallel.dp == w.parallel.dp
    mb, it = _stage_ops(w, 0)
    mb2, it2 = _stage_ops(back, 0)

    def comm(ops):
        return sorted((op.group, op.kind, op.bytes) for op in ops if isinstance(op, CollectiveOp) and op.group != Group.PP)

    def compute(ops):
        return sum(op.time_s for op in ops if isinstance(op, ComputeOp))

    assert comm(mb2) == comm(mb) and comm(it2) == comm(it)
    assert compute(mb2) == pytest.approx(compute(mb), rel=1e-9)
    assert compute(it2) == pytest.approx(compute(it), rel=1e-9)
    assert {op.phase for op in it2} == {Phase.ITERATION}


@pytest.mark.parametrize("path", REFERENCE_FILES, ids=lambda p: p.name)
def test_reference_files_import_with_totals_kept(path: Path) -> None:
    sw = read_simai(path)
    w = simai_to_workload(sw)
    ga = sw.header.ga
    mb, it = _stage_ops(w, 0)
    compute_ns = sum(op.time_s for op in mb if isinstance(op, ComputeOp)) * ga + \
        sum(op.time_s for op in it if isinstance(op, ComputeOp))
    assert compute_ns * 1e9 == pytest.approx(sum(r.fwd_compute_ns + r.ig_compute_ns + r.wg_compute_ns for r in sw.records), rel=1e-9)
    # every nonzero collective with a known group survives, with SimAI's effective size
    want = sum(sw.effective_bytes(r, c) for r in sw.records for c in ("fwd", "ig", "wg")
               if r.comm(c).kind is not None and r.group(c) != SimaiGroup.NONE)
    got = ga * sum(op.bytes for op in mb if isinstance(op, CollectiveOp)) + sum(op.bytes for op in it if isinstance(op, CollectiveOp))
    assert got == want


def test_official_example_imports_with_simai_group_sizes() -> None:
    w = simai_to_workload(read_simai(DATA / "simai" / "workload_analytical.txt"), gpus=9216)
    sizes = {op.group: op.group_size for _s, _c, op in w.ops() if isinstance(op, CollectiveOp)}
    assert sizes == {Group.TP: 2, Group.EP: 16, Group.DP: 384, Group.EDP: 24}
    assert w.parallel.world_size == 9216 // 12 and w.meta["simai_pp"] == "12"
    with pytest.raises(ConfigError, match="tp\\*pp"):
        simai_to_workload(read_simai(DATA / "simai" / "workload_analytical.txt"), gpus=9215)


def test_exported_file_runs_through_simai_accounting(tmp_path: Path) -> None:
    w = toy_workload()
    out = tmp_path / "w.txt"
    write_simai(w, out, stage=1)
    r = simai_accounting(read_simai(out), SimaiCluster(gpus=8, nvlink_busbw=360, nic_busbw=48.5))
    mb, it = _stage_ops(w, 1)
    ga = w.parallel.num_microbatches
    want_us = (ga * sum(op.time_s for op in mb if isinstance(op, ComputeOp))
               + sum(op.time_s for op in it if isinstance(op, ComputeOp))) * 1e6
    assert r.compute_us == pytest.approx(want_us, rel=1e-6)
    assert r.tp_us > 0 and r.dp_us > 0 and r.dp_ep_us > 0


def test_builder_workload_exports_per_layer_records() -> None:
    """A real build(): each layer's forward and backward work lands on that layer's records."""
    from dataclasses import replace

    from compute_profile import attach
    from workload_gen.builder import build
    from workload_gen.core.model_presets import get_preset
    from workload_gen.core.parallel_config import ParallelConfig

    model = replace(get_preset("gpt3-175b"), num_layers=4)
    par = ParallelConfig(world_size=32, tp=4, sp=True, pp=2, micro_batch=1, global_batch=8, seq_length=2048,
                         distributed_optimizer=True)
    w, _coverage = attach(build(model, par), "h100")
    sw = workload_to_simai(w, 1)
    h = sw.header
    assert (h.tp, h.pp, h.ga, h.all_gpus) == (4, 2, par.num_microbatches, 32)
    # PP message under SP: b * s/tp * h * 2 bytes
    assert h.pp_comm == 1 * 2048 // 4 * model.hidden_size * 2
    n_iter = sum(1 for r in sw.records if r.name.startswith("iter_"))
    block = sw.records[n_iter:n_iter + (len(sw.records) - n_iter) // par.num_microbatches]
    layers_seen = [int(r.name[5:].split("_")[0]) for r in block if r.name.startswith("layer")]
    assert layers_seen == sorted(layers_seen) and set(layers_seen) == {2, 3}  # stage 1 holds layers 2 and 3
    mb, it = _stage_ops(w, 1)
    ga = par.num_microbatches
    total = ga * sum(op.bytes for op in mb if isinstance(op, CollectiveOp) and op.group != Group.PP) + \
        sum(op.bytes for op in it if isinstance(op, CollectiveOp))
    assert sum(r.comm(c).bytes for r in sw.records for c in ("fwd", "ig", "wg")) == total


def test_backward_comm_shares_a_record_with_a_forward_comm_of_its_group() -> None:
    # SimAI files a record's input-grad comm under the category of its *forward* group, so a
    # backward EP all-to-all must not sit on a record whose forward comm is TP.
    sw = workload_to_simai(toy_workload(), 0)
    for r in sw.records:
        if r.group("ig") == SimaiGroup.EP:
            assert r.group("fwd") == SimaiGroup.EP, r
    ep_records = [r for r in sw.records if r.group("fwd") == SimaiGroup.EP]
    assert ep_records and all(r.group("ig") == SimaiGroup.EP for r in ep_records)


def test_forward_dp_all_gather_goes_to_the_weight_grad_column() -> None:
    # overlap_param_gather puts a DP all-gather in the forward; SimAI's forward column cannot name DP.
    from dataclasses import replace

    from simai_testdata import _k

    from workload_gen.core.records import CollKind

    w = toy_workload()
    st = w.stages[0]
    ch = st.chunks[0]
    ag = _k("param_ag_fwd", 0, Phase.FWD, CollKind.ALL_GATHER, Group.DP, 2, 123_456_789, True)
    ch2 = replace(ch, forward=(ag, *ch.forward))
    w2 = replace(w, stages=(replace(st, chunks=(ch2,)), *w.stages[1:]))
    sw = workload_to_simai(w2, 0)
    hits = [r for r in sw.records if r.wg_comm.bytes == 123_456_789]
    assert len(hits) == w.parallel.num_microbatches
    assert all(r.wg_comm.token == "ALLGATHER" and r.group("wg") == SimaiGroup.DP for r in hits)
    assert all(r.fwd_comm.kind is None for r in hits)


def test_gen_workload_simai_without_gpu_uses_the_default_gpu(tmp_path):
    """The issue's command, `--format simai` with no --gpu, must work: times come from the
    estimator for the default GPU, and the file reads back with every record timed."""
    from formats.simai_reader import read_simai
    from engine.commands.gen_workload import SIMAI_DEFAULT_GPU, main

    out = tmp_path / "w.txt"
    argv = ["--model", "gpt3-125m", "--tp", "2", "--pp", "2", "--world-size", "8", "--global-batch", "8",
            "--micro-batch", "1", "--seq-length", "1024", "--sp", "--format", "simai", "-q", "-o", str(out)]
    assert main(argv) == 0
    sim = read_simai(out)
    assert SIMAI_DEFAULT_GPU == "h100"
    assert sim.header.tp == 2 and sim.header.pp == 2 and sim.header.ga == 8 // (1 * 2)
    assert sum(r.fwd_compute_ns for r in sim.records) > 0
