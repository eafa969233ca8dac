"""The what-if page in a real headless Chromium: what a user sees equals what the CLI says.

Units: the page's ``data-value`` attributes hold summary.json's numbers (seconds, tokens/s,
TFLOP/s, fractions, bytes), compared exactly with ``run-analytical --json``.
"""
from __future__ import annotations

import csv
import json
import subprocess
import sys
from urllib.parse import urlencode

import pytest

from web_helpers import ROOT, cli, cli_summary, env

PLAN = {"model": "llama3-8b", "num_layers": "4", "world_size": "8", "global_batch": "8", "seq_length": "2048",
        "tp": "2", "sp": "1"}
FLAGS = ["--model", "llama3-8b", "--num-layers", "4", "--world-size", "8", "--global-batch", "8",
         "--seq-length", "2048", "--tp", "2", "--sp"]
"""The plan above as the flags a user would type (written out here, not taken from the page)."""


@pytest.fixture(scope="module")
def page(browser, server):
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    pg = context.new_page()
    pg.errors = []  # every console error and uncaught exception of the whole module
    pg.on("console", lambda m: pg.errors.append(m.text) if m.type == "error" else None)
    pg.on("pageerror", lambda e: pg.errors.append(str(e)))
    pg.goto(f"{server}?{urlencode(PLAN)}")
    ready(pg)
    yield pg
    context.close()


def ready(pg, state: str = "ready") -> None:
    pg.wait_for_selector(f"body[data-state={state}]", timeout=30_000)


def numbers(pg) -> dict[str, float]:
    return {k: float(pg.get_attribute(f"#m-{k}", "data-value")) for k in ("step", "tps", "tflops", "mfu")}


def test_numbers_equal_run_analytical_json(page):
    want = cli_summary(*FLAGS)
    got = numbers(page)
    assert got == {"step": want["iteration_time_s"], "tps": want["tokens_per_s"],
                   "tflops": want["tflops_per_gpu"], "mfu": want["mfu"]}
    # the bar's parts are the critical stage's breakdown: they add up to the step time
    parts = [float(v) for v in page.eval_on_selector_all("#breakdown > div", "els => els.map(e => e.dataset.value)")]
    assert sum(parts) == pytest.approx(want["iteration_time_s"], rel=1e-9)
    assert page.get_attribute("#fits", "data-fits") == str(want["fits"]).lower()
    assert page.locator("#memory .memrow").count() == len(want["peak_memory_bytes"])
    assert "estimated 100.0%" in page.text_content("#coverage")
    # the export is the same plan as flags: run-analytical reads it back to the same number
    exported = page.input_value("#x-cli").split()[1:]
    assert cli_summary(*[a for a in exported if a != "--json"])["iteration_time_s"] == want["iteration_time_s"]
    # the timeline holds the first micro-batches of rank 0's compute and TP streams
    lanes = page.evaluate("current.answer.timeline.lanes")
    assert lanes[:2] == ["rank 0 compute", "rank 0 tp"]


def test_the_timeline_zooms_pans_and_resets(page):
    end = page.evaluate("current.answer.timeline.end_s")
    box = page.locator("#timeline").bounding_box()
    page.mouse.move(box["x"] + box["width"] * 0.6, box["y"] + box["height"] / 2)
    page.mouse.wheel(0, -300)  # zoom in around the pointer
    t0, t1 = page.evaluate("view")
    assert 0 < t1 - t0 < end and t0 > 0
    page.mouse.down()
    page.mouse.move(box["x"] + box["width"] * 0.4, box["y"] + box["height"] / 2)
    page.mouse.up()
    p0, p1 = page.evaluate("view")
    assert p1 - p0 == pytest.approx(t1 - t0) and p0 > t0  # dragged left: later times come into view
    page.dblclick("#timeline")
    assert page.evaluate("view") is None
    # hovering an op names it: the longest op of rank 0's compute lane, at its middle
    lane, s, e, cat, name, mb = page.evaluate(
        "current.answer.timeline.rows.filter(r => r[0] === 0).sort((a, b) => (b[2] - b[1]) - (a[2] - a[1]))[0]")
    x = 110 + (s + e) / 2 / end * (box["width"] - 110 - 4)  # app.js's LABEL_W, the plot's width
    page.mouse.move(box["x"] + x, box["y"] + 18 + 11)  # AXIS_H + half a lane
    names = page.evaluate("current.answer.timeline.names")
    assert page.text_content("#tl-tip").startswith(f"rank 0 compute: {names[name]} ({cat}), micro-batch {mb}, ")


def test_change_tp_changes_the_answer(page):
    before = numbers(page)
    page.select_option("#f-tp", "4")
    ready(page)
    after = numbers(page)
    assert after["step"] != before["step"]
    assert after["step"] == cli_summary(*[("4" if a == "2" and FLAGS[i - 1] == "--tp" else a)
                                          for i, a in enumerate(FLAGS)])["iteration_time_s"]
    assert "tp=4" in page.url  # the URL carries the plan
    offered = page.eval_on_selector_all("#f-tp option", "els => els.map(e => e.value)")
    assert offered == ["1", "2", "4", "8"]  # llama3-8b: 8 KV groups on 8 GPUs; 16 is not offered


def test_invalid_choice_shows_the_cli_message(page):
    page.fill("#f-global_batch", "7")  # 7 sequences over dp 2 (tp 4 on 8 GPUs): the library refuses it
    ready(page, "error")
    flags = [("7" if FLAGS[i - 1] == "--global-batch" else a) for i, a in enumerate(FLAGS)]
    flags[flags.index("--tp") + 1] = "4"
    done = cli("run-analytical", *flags, "--json", "-q")
    assert done.returncode == 2
    assert page.text_content("#error") == done.stderr.strip()
    page.fill("#f-global_batch", "8")
    ready(page)
    assert page.is_hidden("#error")


def test_a_plan_that_does_not_fit_says_so_in_the_clis_words(page):
    flags = ["--model", "llama3-8b", "--world-size", "8", "--global-batch", "8", "--seq-length", "4096"]
    page.goto(f"{page.url.split('?')[0]}?model=llama3-8b&world_size=8&global_batch=8&seq_length=4096&tp=1&sp=0")
    ready(page)
    done = cli("run-analytical", *flags, "--json", "-q")
    assert done.returncode == 0
    warning = [ln for ln in done.stderr.splitlines() if "does not fit" in ln]
    assert len(warning) == 1
    assert page.text_content("#notes .warn") == warning[0]
    assert page.get_attribute("#fits", "data-fits") == "false"
    short = -min(json.loads(done.stdout)["memory_margin_bytes"]) / 2**30
    assert page.text_content("#fits").startswith(f"DOES NOT FIT: short by {short:.2f} GiB")
    assert page.locator("#memory .fill.over").count() == 1
    page.goto(f"{page.url.split('?')[0]}?{urlencode(PLAN)}")
    ready(page)
    page.select_option("#f-tp", "4")
    ready(page)


def test_expert_tp_is_offered_for_moe_models_only(page):
    assert page.is_hidden("#etp-box")  # llama3-8b: no experts
    moe = {"model": "mixtral-8x7b", "num_layers": "2", "world_size": "16", "global_batch": "16", "seq_length": "1024",
           "tp": "2", "sp": "1", "ep": "8", "etp": "1"}
    page.goto(f"{page.url.split('?')[0]}?{urlencode(moe)}")
    ready(page)
    assert page.is_visible("#etp-box") and page.input_value("#f-etp") == "1"
    flags = ["--model", "mixtral-8x7b", "--num-layers", "2", "--world-size", "16", "--global-batch", "16",
             "--seq-length", "1024", "--tp", "2", "--sp", "--ep", "8"]
    assert numbers(page)["step"] == cli_summary(*flags, "--etp", "1")["iteration_time_s"]
    page.select_option("#f-etp", "")  # = TP
    ready(page)
    assert numbers(page)["step"] == cli_summary(*flags)["iteration_time_s"]
    # the dispatcher and the EP overlap: the flex backend is offered only with flex
    assert page.is_visible("#moe-box") and page.is_hidden("#flex-box")
    page.select_option("#f-moe_token_dispatcher", "flex")
    ready(page)
    assert page.is_visible("#flex-box")
    page.select_option("#f-moe_flex_dispatcher_backend", "hybridep")
    ready(page)
    page.check("#f-overlap_moe_expert_parallel_comm")
    ready(page)
    moe_flags = [*flags, "--moe-token-dispatcher-type", "flex", "--moe-flex-dispatcher-backend", "hybridep",
                 "--overlap-moe-expert-parallel-comm"]
    assert numbers(page)["step"] == cli_summary(*moe_flags)["iteration_time_s"]
    assert numbers(page)["step"] != cli_summary(*flags)["iteration_time_s"]
    page.goto(f"{page.url.split('?')[0]}?{urlencode(PLAN)}")
    ready(page)
    page.select_option("#f-tp", "4")
    ready(page)


def test_uneven_pipeline_stages_are_fields(page):
    """PP 2 offers the first/last stage split; the page's step equals the CLI's with the
    same split, and differs from the even split."""
    plan = {**PLAN, "num_layers": "6", "world_size": "16", "global_batch": "16", "tp": "2", "pp": "2"}
    page.goto(f"{page.url.split('?')[0]}?{urlencode(plan)}")
    ready(page)
    assert page.is_visible("#pp-box")
    even = numbers(page)["step"]
    page.fill("#f-first_stage_layers", "2")
    ready(page)
    flags = page.input_value("#x-megatron").split()
    assert "--decoder-first-pipeline-num-layers" in flags
    assert numbers(page)["step"] == cli_summary(*flags)["iteration_time_s"] != even
    page.goto(f"{page.url.split('?')[0]}?{urlencode(PLAN)}")
    ready(page)
    assert page.is_hidden("#pp-box")


def test_pin_and_compare_two_plans(page):
    page.select_option("#f-tp", "2")
    ready(page)
    tp2 = numbers(page)["step"]
    page.click("#pin")
    page.select_option("#f-tp", "8")
    ready(page)
    tp8 = numbers(page)["step"]
    page.click("#pin")
    page.select_option("#f-tp", "4")
    ready(page)
    tp4 = numbers(page)["step"]
    row = page.locator("#compare tbody tr").first
    cells = [float(c) for c in row.locator("td").evaluate_all("els => els.map(e => e.dataset.value)")]
    assert cells == [tp4, tp2, tp8]
    delta = row.locator("td[data-col='1'] .delta").text_content()
    assert delta == f"{(tp2 - tp4) / tp4 * 100:+.1f}%"
    assert "tp 2" in page.locator("#compare thead").text_content()


def test_shared_link_reproduces_the_page(page, browser):
    link, want = page.url, numbers(page)
    other = browser.new_page()
    other.goto(link)
    ready(other)
    assert numbers(other) == want
    assert other.input_value("#f-tp") == page.input_value("#f-tp")
    other.close()


def test_megatron_flags_fill_the_form(page):
    page.click("#paste-box summary")
    page.fill("#flags-text", "torchrun --nproc-per-node 8 pretrain_gpt.py \\\n --tensor-model-parallel-size 8 "
                             "--sequence-parallel --global-batch-size 16 --bf16 --fp8-format hybrid")
    page.click("#flags-fill")
    ready(page)
    assert page.input_value("#f-tp") == "8"
    assert page.input_value("#f-global_batch") == "16"
    assert page.input_value("#f-dtype") == "fp8"
    want = cli_summary(*[a for a in page.input_value("#x-megatron").split()])
    assert numbers(page)["step"] == want["iteration_time_s"]
    assert page.is_hidden("#flags-note")
    page.fill("#flags-text", "--tensor-model-parallel-size 2 --moe-router-topk 2 --num-experts 8")
    page.click("#flags-fill")
    ready(page)
    assert page.is_visible("#flags-note")
    assert "--num-experts" in page.inner_text("#flags-note") and "--moe-router-topk" in page.inner_text("#flags-note")


def test_search_and_load_its_best_layout(page):
    page.fill("#f-global_batch", "8")
    ready(page)
    page.click("#search-start")
    page.wait_for_selector("#search-pane[data-state=done]", timeout=60_000)
    rows = page.locator("#search-table tbody tr")
    assert rows.count() >= 2
    best = rows.first.locator("td").nth(1).text_content()  # e.g. "tp4 pp1 dp2 mb4 sp"
    times = page.evaluate("searchRows.map(r => r.iteration_time_s)")
    assert times == sorted(times)
    page.click("#search-table th[data-key=iteration_time_s]")  # sort by step time, descending on a 2nd click
    page.click("#search-table th[data-key=iteration_time_s]")
    shown = page.evaluate("[...document.querySelectorAll('#search-table tbody tr td:nth-child(3)')].length")
    assert shown == rows.count()
    page.click("#search-table th[data-key=rank]")
    rows.first.locator("button.use").click()
    ready(page)
    tp = best.split()[0].removeprefix("tp")
    assert page.input_value("#f-tp") == tp
    assert float(page.get_attribute("#m-step", "data-value")) == pytest.approx(times[0], rel=1e-12)


def test_a_search_is_cancelled_from_the_page(page):
    big = {"model": "llama3-70b", "world_size": "1024", "global_batch": "1024", "seq_length": "8192", "tp": "8"}
    page.goto(f"{page.url.split('?')[0]}?{urlencode(big)}")
    ready(page)
    page.click("#search-start")
    page.wait_for_selector("#search-pane[data-state=running]", timeout=30_000)
    assert page.is_disabled("#search-start") and page.is_enabled("#search-cancel")
    page.click("#search-cancel")
    page.wait_for_selector("#search-pane[data-state=cancelled]", timeout=60_000)
    assert page.text_content("#search-status") == "cancelled"
    assert page.is_enabled("#search-start")
    page.goto(f"{page.url.split('?')[0]}?{urlencode(PLAN)}")
    ready(page)


def test_sweep_csv_is_plotted_against_a_metric(page, tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text("base:\n  model: {preset: llama3-8b, num_layers: 2}\n  system: h100\n"
                    "  parallel: {world_size: 8}\n  training: {global_batch: 8, seq_length: 1024}\n"
                    "grid:\n  - product:\n      parallel.tp: [1, 2, 4, 8, 16]\n      parallel.pp: [1, 2]\n"
                    "output: sweep.csv\n")
    sweep = "import sys; from engine.commands.sweep import sweep_main; sys.exit(sweep_main(sys.argv[1:]))"
    done = subprocess.run([sys.executable, "-c", sweep, str(spec), "--workers", "1", "-q", "--no-plots"], cwd=ROOT,
                          env=env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    with open(tmp_path / "sweep.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    page.set_input_files("#sweep-file", str(tmp_path / "sweep.csv"))
    page.select_option("#sweep-x", "parallel.tp")
    page.select_option("#sweep-y", "parallel.pp")
    page.select_option("#sweep-metric", "tokens_per_s")
    for r in rows:  # one point per cell here: each cell is its point's number, or says why it is invalid
        cell = page.locator(f"#sweep-table td[data-x='{r['parallel.tp']}'][data-y='{r['parallel.pp']}']")
        if r["status"] == "ok":
            assert float(cell.get_attribute("data-value")) == float(r["tokens_per_s"])
        else:
            assert cell.get_attribute("class") == "invalid" and cell.get_attribute("title") == r["reason"]
    assert page.text_content("#sweep-info").endswith("tokens_per_s: higher is better")
    best = max((r for r in rows if r["status"] == "ok"), key=lambda r: float(r["tokens_per_s"]))
    cell = page.locator(f"#sweep-table td[data-x='{best['parallel.tp']}'][data-y='{best['parallel.pp']}']")
    assert "hsl(120," in cell.get_attribute("style")  # the best point is the greenest
    page.select_option("#sweep-metric", "iteration_time_s")
    assert page.text_content("#sweep-info").endswith("iteration_time_s: lower is better")
    assert "hsl(120," in cell.get_attribute("style")  # fastest = most tokens/s: still the greenest
    invalid = [r for r in rows if r["status"] != "ok"]
    assert invalid  # tp 16 on 8 GPUs
    assert page.locator("#sweep-table td.invalid").count() == len(invalid)


def test_uploaded_hf_config_and_pasted_system_yaml(page, tmp_path):
    hf = tmp_path / "config.json"
    hf.write_text('{"model_type": "llama", "hidden_size": 1024, "intermediate_size": 2816, "num_hidden_layers": 2, '
                  '"num_attention_heads": 16, "num_key_value_heads": 4, "vocab_size": 32000}')
    system = tmp_path / "my_cluster.yaml"
    system.write_text("base: h100\nnics_per_node: 4\nnic_bw: 5.0e10\n")
    page.select_option("#f-model", "__hf__")
    page.set_input_files("#hf-file", str(hf))
    page.fill("#f-num_layers", "")
    page.select_option("#f-system", "__yaml__")
    page.fill("#f-sys", system.read_text())
    ready(page)
    flags = ["--hf-config", str(hf), "--system", str(system), "--world-size", page.input_value("#f-world_size"),
             "--global-batch", page.input_value("#f-global_batch"), "--micro-batch", page.input_value("#f-micro_batch"),
             "--seq-length", page.input_value("#f-seq_length"), "--tp", page.input_value("#f-tp"),
             "--pp", page.input_value("#f-pp"), "--dtype", page.input_value("#f-dtype")]
    flags += [f for f, on in (("--sp", "#f-sp"), ("--dist-opt", "#f-dist_opt"), ("--overlap-grad-reduce",
              "#f-overlap_grad_reduce"), ("--overlap-param-gather", "#f-overlap_param_gather"),
              ("--tp-comm-overlap", "#f-tp_comm_overlap")) if page.is_checked(on)]
    assert numbers(page)["step"] == cli_summary(*flags)["iteration_time_s"]
    page.select_option("#f-model", "llama3-8b")
    page.select_option("#f-system", "h100")
    ready(page)


def test_no_console_errors(page):
    assert page.errors == []
