"""layers.csv and EndToEnd.csv obey the physics of the run they describe.

- Per row, the exposed communication is part of the communication: exposed_comm_s <= comm_s.
- Per stage, the rows' compute adds up to the stage's compute + optimizer time; over the
  run, the rows' waited_comm_s adds up to the exposed communication of every stage's
  breakdown (and, without a pipeline, so does exposed_comm_s).
- The rows computed from pass profiles x counts (engine.accounting.layer_sums) equal a plain
  walk over every interval, and writing the outputs never materialises the timeline.
- EndToEnd.csv of an event-mode run has per-layer rows whose compute sums to the header.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import replace

import pytest

from engine.accounting import endtoend_layer_rows, layer_rows
from engine.pipeline import run_analytical
from formats.endtoend_csv import render_endtoend_csv, totals_from_breakdown
from formats.run_outputs import layers_csv
from workload_gen.config_loading import configs_from_dict

CONFIGS = {
    "tp-only": {"model": "gpt3-125m", "parallel": {"tp": 2, "sp": True, "world_size": 4, "global_batch": 8,
                                                   "seq_length": 512, "distributed_optimizer": True,
                                                   "overlap_grad_reduce": True}},
    "1f1b": {"model": "gpt3-125m", "parallel": {"tp": 2, "pp": 2, "world_size": 8, "global_batch": 16,
                                                "seq_length": 512, "sp": True}},
    "interleaved-cp-overlaps": {"model": "llama3-8b", "num_layers": 8,
                                "parallel": {"tp": 2, "pp": 2, "vpp": 2, "cp": 2, "sp": True, "world_size": 16,
                                             "global_batch": 8, "seq_length": 8192, "distributed_optimizer": True,
                                             "overlap_grad_reduce": True, "overlap_param_gather": True,
                                             "tp_comm_overlap": True}},
    "moe": {"model": "mixtral-8x7b", "num_layers": 4,
            "parallel": {"tp": 2, "pp": 2, "ep": 4, "sp": True, "world_size": 16, "global_batch": 8,
                         "seq_length": 1024, "distributed_optimizer": True, "overlap_grad_reduce": True}},
}


def _run(name: str):
    cfg = dict(CONFIGS[name])
    layers = cfg.pop("num_layers", None)
    model, par = configs_from_dict(cfg)
    if layers is not None:
        model = replace(model, num_layers=layers)
    return run_analytical(model, par, "h100")


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def run(request):
    return _run(request.param)


def test_exposed_is_part_of_the_communication(run):
    rows = layer_rows(run)
    assert rows
    for r in rows:
        assert r.exposed_comm_s <= r.comm_s * (1 + 1e-12) + 1e-15, r
    # moving a wait onto the collectives on the wire moves it between rows, never adds to it
    assert sum(r.exposed_comm_s for r in rows) <= sum(r.waited_comm_s for r in rows) * (1 + 1e-12) + 1e-15


def test_rows_add_up_to_the_breakdowns(run):
    rows = layer_rows(run)
    compute = defaultdict(float)
    for r in rows:
        compute[r.stage] += r.compute_s
    for stage, bd in enumerate(run.stage_breakdowns):
        assert compute[stage] == pytest.approx(bd.compute_s + bd.optimizer_s, rel=1e-9)
    total_exposed = sum(sum(bd.exposed_comm_s.values()) for bd in run.stage_breakdowns)
    assert sum(r.waited_comm_s for r in rows) == pytest.approx(total_exposed, rel=1e-9, abs=1e-12)
    if run.workload.parallel.pp == 1:
        assert sum(r.exposed_comm_s for r in rows) == pytest.approx(total_exposed, rel=1e-9, abs=1e-12)


def test_profile_sums_equal_a_walk_over_every_interval(run):
    """The fast path (profiles x counts) against the definition (walk every interval; the
    optimizer step's fixed host work is host time, in no row's compute)."""
    walk: dict[tuple[int, int, str], list] = {}
    first_rank: dict[int, int] = {}
    for iv in run.intervals:
        if first_rank.setdefault(iv.stage, iv.rank) != iv.rank:
            continue
        s = walk.setdefault((iv.stage, iv.layer, iv.phase), [0.0, 0.0, 0.0, 0, set()])
        s[4].add((iv.microbatch, iv.chunk))
        if iv.stream == "compute":
            if iv.name != "step_overhead":
                s[0] += iv.end - iv.start
        else:
            s[1] += iv.end - iv.start
            s[2] += iv.exposed_s
            s[3] += iv.bytes
    rows = {(r.stage, r.layer, r.phase): r for r in layer_rows(run)}
    assert set(rows) == set(walk)
    for key, (comp, comm, waited, nbytes, inst) in walk.items():
        r = rows[key]
        assert r.microbatches == max(len(inst), 1)
        assert r.comm_bytes == nbytes
        assert r.compute_s == pytest.approx(comp, rel=1e-9, abs=1e-15)
        assert r.comm_s == pytest.approx(comm, rel=1e-9, abs=1e-15)
        assert r.waited_comm_s == pytest.approx(waited, rel=1e-9, abs=1e-15)


def test_outputs_do_not_materialise_the_timeline():
    from formats.chrome_trace import trace_json

    res = _run("1f1b")
    assert type(res.intervals).__name__ == "Timeline"
    layers_csv(layer_rows(res))
    trace_json(res, 8)
    trace_json(res, None)
    assert res.intervals._cache is None


def test_endtoend_rows_of_an_event_run_add_up_to_its_header(run):
    crit = run.extras["critical_stage"]
    rows = endtoend_layer_rows(layer_rows(run), crit)
    assert rows and any(str(r["name"]).startswith("layer_") for r in rows)
    b = run.breakdown
    totals = totals_from_breakdown(b.compute_s, b.exposed_comm_s, b.bubble_s, b.optimizer_s, run.iteration_time_s)
    comp = sum(r["fwd_compute_us"] + r["wg_compute_us"] + r["ig_compute_us"] for r in rows)
    assert comp == pytest.approx(totals["compute"], rel=1e-9)
    exposed = sum(r["fwd_exposed_us"] + r["wg_exposed_us"] + r["ig_exposed_us"] for r in rows)
    if run.workload.parallel.pp == 1:
        assert exposed == pytest.approx(totals["dp"] + totals["dp_ep"] + totals["tp"] + totals["ep"] + totals["pp"],
                                        rel=1e-9, abs=1e-6)
    for r in rows:
        for col in ("fwd", "wg", "ig"):
            assert r[f"{col}_exposed_us"] <= r[f"{col}_comm_us"] * (1 + 1e-12) + 1e-9
    text = render_endtoend_csv(totals, rows)
    body = [line for line in text.splitlines()[3:] if not line.startswith("#")]
    assert len(body) == len(rows)
    # one row per layer the critical stage holds, by Megatron's layout (chunk c of stage s
    # holds layers (c*pp + s)*L/(pp*vpp) ...), the embedding on the first stage, the head
    # (layer index L) on the last, and the once-per-iteration work
    L, par = run.workload.model.num_layers, run.workload.parallel
    per = L // (par.pp * par.vpp)
    held = {(c * par.pp + crit) * per + k for c in range(par.vpp) for k in range(per)}
    expected = {f"layer_{i}" for i in held} | {"iteration"}
    expected |= {"embedding"} if crit == 0 else set()
    expected |= {f"layer_{L}"} if crit == par.pp - 1 else set()
    assert {r["name"] for r in rows} == expected


def test_run_png_gives_each_meaning_its_own_colour():
    """run.png draws phases, breakdown parts and communication groups in one figure: no two
    meanings may share a colour (issue 29: backward and exposed pipeline time were both orange)."""
    from formats.plots import _COMM_COLORS, _PART_COLORS, _PHASE_COLORS

    phase = {v for k, v in _PHASE_COLORS.items() if k != "fwd"}  # forward shares compute's blue
    colours = [*phase, *_PART_COLORS.values(), *_COMM_COLORS.values()]
    assert _PHASE_COLORS["fwd"] == _PART_COLORS["compute"]
    assert _PHASE_COLORS["iter"] == _PART_COLORS["optimizer"]  # the once-per-iteration work is the optimizer's
    colours.remove(_PHASE_COLORS["iter"])
    assert len(colours) == len(set(colours)), sorted(colours)


def test_an_event_endtoend_csv_says_why_its_busbw_is_zero(tmp_path):
    """Issue 29: EndToEnd.csv's busbw columns were always 0.00 without a word; the file now
    carries the reason under its rows."""
    import csv

    from engine.commands.run import analytical_main
    from formats.endtoend_csv import EVENT_BUSBW_NOTE

    assert analytical_main(["--out", str(tmp_path / "r"), "--no-plot", "-q"]) == 0
    text = (tmp_path / "r" / "EndToEnd.csv").read_text()
    assert f"# {EVENT_BUSBW_NOTE}" in text.splitlines()
    rows = list(csv.reader(line for line in text.splitlines()[2:] if not line.startswith("#")))
    header, body = rows[0], rows[1:]
    busbw = [i for i, h in enumerate(header) if h == "busbw"]
    assert len(busbw) == 3 and body
    assert all(float(r[i]) == 0.0 for r in body for i in busbw)
