"""scripts/bench_input_readers.py runs (at a small size here; its full-size figures, 10^6
records, are in docs/reliability.md), and what it reads is what was written: the native file's
records are the workload's ops, every CSV row is imported."""
from __future__ import annotations

from bench_scripts import script


def test_the_reader_benchmark_runs_small(capsys):
    assert script("bench_input_readers").main(["--records", "3000", "--repeat", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    got = {ln[:24].strip(): ln.split() for ln in lines[1:]}
    assert set(got) == {"native workload", "SimAI workload", "profile CSV (read)", "profile CSV (import)"}
    assert got["profile CSV (import)"][-3] == "3,000"
    assert int(got["native workload"][-3].replace(",", "")) >= 3000 * 0.5
    for fields in got.values():
        assert float(fields[-1].replace(",", "")) > 0
