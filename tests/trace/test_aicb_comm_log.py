"""AICB's real A100 communication log: reader totals against an independent pandas count."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from collectives.closed_form import bus_factor
from formats.aicb_comm_log import per_iteration_totals, read_aicb_comm_log, summarize
from workload_gen.core.errors import FormatError
from workload_gen.core.records import CollKind

LOG = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "real" / "aicb_a100_comm_log.csv"


@pytest.fixture(scope="module")
def records():
    return read_aicb_comm_log(LOG)


def test_counts_and_totals_match_pandas(records):
    df = pd.read_csv(LOG)
    calls = df[df.comm_type != "CommType.epoch_end"]
    assert len(records) == len(calls)
    assert sum(r.bytes for r in records) == int(calls.msg_size.sum())
    assert sum(r.elapsed_s for r in records) == pytest.approx(calls._elapsed_time.sum() / 1e3)
    # Iterations: 11 epoch_end rows -> set-up (0) + iterations 1..11 with records (the last is empty).
    its = per_iteration_totals(records)
    assert set(its) == set(range(11))
    # Per iteration, the EP all-to-all time (pandas, by position between epoch_end rows).
    df["it"] = (df.comm_type == "CommType.epoch_end").cumsum()
    ep = df[(df.comm_group == "CommGroup.ep_group")].groupby("it")._elapsed_time.sum() / 1e3
    for it, secs in ep.items():
        assert its[it]["ep"] == pytest.approx(secs)


def test_busbw_uses_the_true_group_size(records):
    ar = next(r for r in records if r.kind is CollKind.ALL_REDUCE and r.group == "tp" and r.bytes == 16777216)
    assert ar.group_size == 2
    # algbw = bytes / time (GB = 1e9 B, as AICB's column); busbw = algbw * 2(n-1)/n = algbw for n = 2.
    assert ar.algbw_Bps == pytest.approx(ar.bytes / ar.elapsed_s)
    assert ar.busbw_Bps == pytest.approx(ar.algbw_Bps)
    # AICB's own busbw used the 8-rank factor 1.75.
    assert ar.aicb_busbw_Bps / ar.algbw_Bps == pytest.approx(1.75, rel=2e-3)
    assert bus_factor(CollKind.ALL_GATHER, 4) == 0.75 and bus_factor(CollKind.ALL_REDUCE, 8) == 1.75


def test_summary_medians(records):
    rows = {(s.kind.value, s.group, s.bytes): s for s in summarize(records)}
    rs = rows[("reducescatter", "dp", 35634282496)]
    df = pd.read_csv(LOG)
    sel = df[(df.comm_type == "CommType.reduce_scatter") & (df.comm_group == "CommGroup.dp_group")]
    assert rs.calls == len(sel) == 10
    assert rs.median_s == pytest.approx(sel._elapsed_time.median() / 1e3)
    # The published summary beside the log (aicb_a100_busbw_summary.csv) agrees on the median time.
    summ = pd.read_csv(LOG.with_name("aicb_a100_busbw_summary.csv"))
    row = summ[(summ.comm_type == "CommType.reduce_scatter") & (summ.comm_group == "CommGroup.dp_group")].iloc[0]
    assert rs.median_s == pytest.approx(row.elapsed_ms_median / 1e3)


def test_malformed_log(tmp_path):
    (tmp_path / "a.csv").write_text("comm_type,msg_size\nCommType.all_reduce,8\n")
    with pytest.raises(FormatError, match="missing column"):
        read_aicb_comm_log(tmp_path / "a.csv")
    head = "comm_type,comm_group,comm_group_size,msg_size,stage,dst,src,additional,_elapsed_time,algbw,busbw,count\n"
    (tmp_path / "b.csv").write_text(head + "CommType.teleport,CommGroup.tp_group,2,8,x,None,None,,0.1,0,0,1\n")
    with pytest.raises(FormatError, match=r"b.csv:2: comm_type"):
        read_aicb_comm_log(tmp_path / "b.csv")


def test_filters_match_pandas():
    """The reader's filters against an independent pandas selection of the same rows."""
    df = pd.read_csv(LOG)  # reads AICB's "None" group sizes as NaN
    calls = df[df.comm_type != "CommType.epoch_end"]
    sel = calls[calls.comm_type.isin(["CommType.all_reduce", "CommType.all_gather"])
                & ~calls.stage.str.startswith("init") & (calls.msg_size > 0) & calls.comm_group_size.notna()]
    got = read_aicb_comm_log(LOG, kinds=(CollKind.ALL_REDUCE, CollKind.ALL_GATHER), skip_init=True, skip_empty=True,
                             fill_group_sizes=False, require_group_size=True)
    assert [r.line for r in got] == [i + 2 for i in sel.index]  # line 1 is the header
    assert all(r.group_size is not None and not r.is_init for r in got)
    # The fill gives TP rows without a size the TP group's one size (2); the EP group states
    # no size anywhere, so its rows stay unknown and require_group_size drops them.
    filled = read_aicb_comm_log(LOG, require_group_size=True)
    assert len(filled) == len(calls) - (calls.comm_group == "CommGroup.ep_group").sum()
    assert {r.group_size for r in filled if r.group == "tp"} == {2}
    # Set-up calls are the ones before the first epoch_end.
    assert [r.line for r in read_aicb_comm_log(LOG) if r.is_init] == [
        r.line for r in read_aicb_comm_log(LOG) if r.iteration == 0]
