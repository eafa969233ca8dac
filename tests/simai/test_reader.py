"""The SimAI reader on every reference file, on AICB's quirks, and on SimAI's failure modes."""
from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest
from simai_testdata import AICB_FILES, DATA, REFERENCE_FILES

from formats.simai_reader import parse_simai, read_simai
from formats.simai_text import FWD_MIN_BYTES, SimaiGroup, comm_group, comm_kind, render_simai
from workload_gen.core.errors import FormatError
from workload_gen.core.records import CollKind

HEADER = ("HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: 2 ep: 1 pp: 1 vpp: 2 ga: 1 "
          "all_gpus: 4 checkpoints: 0 checkpoint_initiates: 0 pp_comm: 0")
REC = "attention_row\t-1\t100\tREDUCESCATTER\t4096\t90\tALLGATHER\t4096\t80\tNONE\t0\t100"


def _independent_totals(path: Path) -> tuple[int, Counter]:
    """Record count on line 2 and bytes per (column, comm token), with a plain regex split."""
    lines = path.read_text().split("\n")
    count = int(lines[1].strip())
    totals: Counter = Counter()
    for line in lines[2:]:
        f = re.split(r"[ \t]+", line.strip())
        if len(f) < 12:
            continue
        for col, (ti, si) in {"fwd": (3, 4), "ig": (6, 7), "wg": (9, 10)}.items():
            totals[(col, f[ti])] += int(f[si])
    return count, totals


def test_reference_files_found() -> None:
    assert len(REFERENCE_FILES) == 6, REFERENCE_FILES


@pytest.mark.parametrize("path", REFERENCE_FILES, ids=lambda p: p.name)
def test_every_reference_file_reads_with_counts_and_bytes(path: Path) -> None:
    w = read_simai(path)
    count, totals = _independent_totals(path)
    assert len(w.records) == count
    ours: Counter = Counter()
    for rec in w.records:
        for col in ("fwd", "ig", "wg"):
            c = rec.comm(col)
            ours[(col, c.token)] += c.bytes
    assert +ours == +totals  # drop zero entries on both sides


@pytest.mark.parametrize("path", AICB_FILES, ids=lambda p: p.name)
def test_aicb_headers_match_their_readme(path: Path) -> None:
    readme = (DATA / "aicb" / "README.md").read_text()
    section = readme.split(f"### `{path.name}`")[1]
    header = re.search(r"header: `([^`]*)`", section).group(1)  # type: ignore[union-attr]
    kv = dict(re.findall(r"(\w+): (\S+)", header))
    h = read_simai(path).header
    assert (h.tp, h.ep, h.pp, h.vpp, h.ga, h.all_gpus, h.pp_comm) == tuple(
        int(kv[k]) for k in ("model_parallel_NPU_group", "ep", "pp", "vpp", "ga", "all_gpus", "pp_comm"))


def test_official_example_header_pp_comm_without_colon() -> None:
    h = read_simai(DATA / "simai" / "workload_analytical.txt").header
    assert (h.tp, h.ep, h.pp, h.vpp, h.ga, h.all_gpus, h.pp_comm) == (2, 16, 12, 8, 24, 9216, 50331648)


def test_quirks_float_pp_comm_spaces_extra_tokens_blank_lines() -> None:
    text = (HEADER.replace("pp_comm: 0", "pp_comm: 6291456.0") + "\n 2 \n"
            + REC + "\textra\ttokens 7\n"
            + REC.replace("\t", "   ") + "\n\n\n")
    w = parse_simai(text)
    assert w.header.pp_comm == 6291456
    assert len(w.records) == 2 and w.records[0] == w.records[1]
    r = w.records[0]
    assert (r.fwd_compute_ns, r.fwd_comm.bytes, r.ig_compute_ns, r.wg_compute_ns, r.update_ns) == (100, 4096, 90, 80, 100)


def test_customized_policy_reads_thirteenth_field() -> None:
    text = HEADER.replace("HYBRID_TRANSFORMER_FWD_IN_BCKWD", "HYBRID_CUSTOMIZED") + "\n1\n" + REC + "\tDATA\n"
    w = parse_simai(text, require_parallel=False)
    assert w.records[0].policy == "DATA"
    assert w.header.tp is None  # SimAI reads the keys only under HYBRID_TRANSFORMER policies


def test_checkpoint_lists() -> None:
    text = HEADER.replace("checkpoints: 0", "checkpoints: 2 0 3") + "\n1\n" + REC + "\n"
    assert parse_simai(text).header.checkpoints == (0, 3)


def test_model_round_trip_for_every_reference_file() -> None:
    for path in REFERENCE_FILES:
        w = read_simai(path)
        assert parse_simai(render_simai(w)) == w


def test_comm_type_decoding_follows_simai() -> None:
    assert comm_group("ALLGATHER", "fwd") == SimaiGroup.TP
    assert comm_group("ALLGATHER", "ig") == SimaiGroup.TP
    assert comm_group("ALLGATHER", "wg") == SimaiGroup.DP
    assert comm_group("ALLTOALL_EP", "fwd") == SimaiGroup.EP
    assert comm_group("REDUCESCATTER_DP_EP", "wg") == SimaiGroup.DP_EP
    assert comm_group("ALLREDUCE_XYZ", "fwd") == SimaiGroup.NONE
    assert comm_group("NONE", "fwd") is None and comm_kind("BROADCAST") is None
    # SimAI tests the ALLREDUCE prefix before ALLREDUCEALLTOALL, so the latter is an all-reduce.
    assert comm_kind("ALLREDUCEALLTOALL") == CollKind.ALL_REDUCE


def test_forward_comm_minimum_4096_only_under_fwd_in_bckwd() -> None:
    w = read_simai(DATA / "simai" / "workload_analytical.txt")
    opt = next(r for r in w.records if r.name == "optimizer1")
    assert opt.fwd_comm.bytes == 4  # kept verbatim
    assert w.effective_bytes(opt, "fwd") == FWD_MIN_BYTES
    ce = next(r for r in w.records if r.name == "cross_entropy1")
    assert w.effective_bytes(ce, "fwd") == 16384
    zero = next(r for r in w.records if r.name == "attention_column")
    assert w.effective_bytes(zero, "ig") == 0  # size 0 stays 0, and only the forward column is raised
    plain = parse_simai(HEADER.replace("_FWD_IN_BCKWD", "") + "\n1\n" + REC.replace("4096\t90", "4\t90") + "\n")
    assert plain.effective_bytes(plain.records[0], "fwd") == 4


@pytest.mark.parametrize("text, match", [
    ("", "empty file"),
    ("MICRO\n1\n" + REC + "\n", "SIGFPE"),
    ("HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: 2 pp: 1\n1\n" + REC + "\n", "ga:"),
    ("HYBRID_TRANSFORMER_FWD_IN_BCKWD ep: 1 ga: 2\n1\n" + REC + "\n", "model_parallel_NPU_group:, pp:"),
    ("HYBRID_TRANSFROMER tp: 1\n1\n" + REC + "\n", "unknown policy 'HYBRID_TRANSFROMER'"),
    (HEADER + "\n3\n" + REC + "\n", "announces 3 records but the file has 1"),
    (HEADER + "\n1\n" + REC + "\n" + REC + "\n", "more records than the 1"),
    (HEADER + "\n1\n" + REC.replace("\t100\tREDUCE", "\t1.5e3\tREDUCE") + "\n", "forward compute time is '1.5e3'"),
    (HEADER + "\n1\n" + "attention_row -1 100 NONE 0\n", "record has 5 fields"),
    (HEADER + "\nabc\n", "record count is 'abc'"),
    (HEADER.replace("ga: 1", "ga: x") + "\n1\n" + REC + "\n", "'ga:' has value 'x'"),
])
def test_broken_files_give_one_clear_line(text: str, match: str, tmp_path: Path) -> None:
    p = tmp_path / "w.txt"
    p.write_text(text)
    with pytest.raises(FormatError, match=re.escape(match)) as info:
        read_simai(p)
    msg = str(info.value)
    assert "\n" not in msg and msg.startswith(str(p) + ":")


def test_micro_file_is_readable_when_not_run() -> None:
    w = parse_simai("MICRO\n1\n" + REC + "\n", require_parallel=False)
    assert w.header.policy == "MICRO" and len(w.records) == 1
