"""expand-collective: CSV content, summary, workload mode and bad input."""
from __future__ import annotations

import csv

import pytest

from engine.commands.expand_collective import main, parse_size
from formats.native import write_native
from workload_gen.builder import build
from workload_gen.core.model_presets import get_preset
from workload_gen.core.parallel_config import ParallelConfig
from workload_gen.core.records import CollectiveOp


def _read(path):
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def test_single_collective_csv_rows_match_the_ring(tmp_path, capsys):
    out = tmp_path / "flows.csv"
    assert main(["--op", "allreduce", "--size", "64MiB", "--ranks", "16", "--gpus-per-node", "8",
                 "--algorithm", "ring", "--channels", "8", "-o", str(out)]) == 0
    rows = _read(out)
    n, S = 16, 64 << 20
    assert len(rows) == 2 * (n - 1) * n * 8  # one 512 KiB chunk per flow
    assert sum(int(r["size_bytes"]) for r in rows) == 2 * (n - 1) * S
    # each of the 2 nodes sends one flow per channel per step across the boundary
    assert sum(r["link"] == "inter" for r in rows) == 2 * (n - 1) * 8 * 2
    ids = {r["flow_id"] for r in rows}
    assert all(p in ids for r in rows for p in r["parents"].split())
    assert max(float(r["finish_s"]) for r in rows) > 0
    summary = capsys.readouterr().out
    assert f"{len(rows)} flows" in summary and "contention-free time" in summary


def test_header_states_units():
    from engine.commands.expand_collective import HEADER
    assert "size_bytes" in HEADER and "start_s" in HEADER and "finish_s" in HEADER


@pytest.mark.parametrize("text,value", [("1GiB", 1 << 30), ("512MB", 512_000_000), ("123", 123), ("123B", 123),
                                        ("64KiB", 65536), ("4M", 4 << 20), ("1.5KiB", 1536)])
def test_parse_size(text, value):
    assert parse_size(text) == value


@pytest.mark.parametrize("argv,word", [
    (["--op", "allreduce", "--size", "12 parsecs", "--ranks", "8"], "size"),
    (["--op", "allreduce", "--size", "1.3B", "--ranks", "8"], "size"),
    (["--op", "allreduce", "--size", "1GiB", "--ranks", "x"], "ranks"),
    (["--op", "allreduce", "--size", "1GiB", "--ranks", "8", "--algorithm", "rign"], "algorithm"),
    (["--op", "allgather", "--size", "1GiB", "--ranks", "8", "--algorithm", "nvls"], "algorithm"),
    (["--op", "allreduce", "--size", "1GiB", "--ranks", "8", "--channels", "99"], "channels"),
    (["--op", "allreduce", "--size", "1GiB", "--ranks", "8", "--system", "h999"], "system"),
    (["--op", "allreduce", "--ranks", "8"], "size"),
])
def test_bad_input_is_one_line_exit_2_and_no_file(tmp_path, capsys, argv, word):
    out = tmp_path / "flows.csv"
    assert main([*argv, "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and word in err[0]
    assert not out.exists() and not list(tmp_path.iterdir())


def test_workload_mode_expands_every_collective(tmp_path, capsys):
    par = ParallelConfig(world_size=16, tp=2, pp=2, global_batch=8, seq_length=256)
    w = build(get_preset("gpt3-125m"), par)
    wpath, out = tmp_path / "w.txt", tmp_path / "flows.csv"
    write_native(w, wpath)
    assert main(["-w", str(wpath), "--gpus-per-node", "8", "-o", str(out)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    colls = [op for _, _, op in w.ops() if isinstance(op, CollectiveOp)]
    assert lines[0].startswith("id,stage,name") and len(lines) == 1 + len(colls)
    rows = _read(out)
    per = {}
    for r in rows:
        per[int(r["collective_id"])] = per.get(int(r["collective_id"]), 0) + 1
    table = {int(x.split(",")[0]): x.split(",") for x in lines[1:]}
    assert all(int(table[c][11]) == k for c, k in per.items())  # flows column = CSV rows
    # the PP send of stage 0 goes from rank 0 to rank 8 (next stage, next node): inter-node
    sends = [int(x[0]) for x in table.values() if x[5] == "sendrecv" and x[1] == "0"]
    assert sends and all(r["link"] == "inter" for r in rows if int(r["collective_id"]) == sends[0])
