"""Screenshots of the what-if page's panes, for docs/ and the README (PNG files).

Units: pixels (the viewport).

Starts ``serve-web --port 0`` from this checkout, opens a plan in the real headless Chromium
(Debian's chromium on PATH), pins it, pins it again in FP8, changes TP, runs a layout search,
loads its best layout, and writes one PNG per pane plus the whole page:

  web_page.png  web_plan.png  web_answer.png  web_compare.png  web_search.png  web_sweep.png

(the sweep pane shows a TP x PP sweep of the same job, run with `sweep` first)

Usage: python scripts/web_screenshots.py [--out docs] [--model llama3-70b --gpus 64 --batch 64 --seq 8192]
(the tests run it with a small model into a temporary folder; they never rewrite docs/).
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from urllib.parse import urlencode

from web_server import CHROMIUM_ARGS, start_server

ROOT = Path(__file__).resolve().parents[1]
PANES = {"plan": "#plan-pane", "answer": "#answer-pane", "compare": "#compare-pane", "search": "#search-pane",
         "sweep": "#sweep-pane"}
SWEEP = "import sys; from engine.commands.sweep import sweep_main; sys.exit(sweep_main(sys.argv[1:]))"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=ROOT / "docs")
    ap.add_argument("--model", default="llama3-70b")
    ap.add_argument("--layers", default="", help="override the model's layer count (blank: the preset's)")
    ap.add_argument("--gpus", default="64")
    ap.add_argument("--batch", default="64")
    ap.add_argument("--seq", default="8192")
    ap.add_argument("--tp", default="8")
    ap.add_argument("--pp", default="2")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    layers = f", num_layers: {args.layers}" if args.layers else ""
    sweep_dir = Path(tempfile.mkdtemp(prefix="web_screenshots_"))
    spec = sweep_dir / "spec.yaml"
    spec.write_text(f"base:\n  model: {{preset: {args.model}{layers}}}\n  system: h100\n"
                    f"  parallel: {{world_size: {args.gpus}}}\n"
                    f"  training: {{global_batch: {args.batch}, seq_length: {args.seq}, sp: true, "
                    "distributed_optimizer: true}\n"
                    "grid:\n  - product:\n      parallel.tp: [1, 2, 4, 8]\n      parallel.pp: [1, 2, 4, 8]\n"
                    "output: sweep_tp_pp.csv\n")
    subprocess.run([sys.executable, "-c", SWEEP, str(spec), "--workers", "1", "-q", "--no-plots"], cwd=ROOT,
                   env=env, check=True)
    proc, url = start_server(env)
    try:
        plan = {"model": args.model, "num_layers": args.layers, "world_size": args.gpus, "global_batch": args.batch,
                "seq_length": args.seq, "tp": args.tp, "pp": args.pp, "sp": "1", "dist_opt": "1"}
        from playwright.sync_api import sync_playwright

        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=shutil.which("chromium"), args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1440, "height": 1000}, device_scale_factor=1)
            page.goto(f"{url}?{urlencode({k: v for k, v in plan.items() if v})}")
            ready = "body[data-state=ready]"
            page.wait_for_selector(ready, timeout=60_000)
            page.click("#pin")
            page.select_option("#f-dtype", "fp8")
            page.wait_for_selector(ready, timeout=60_000)
            page.click("#pin")
            tps = page.eval_on_selector_all("#f-tp option", "els => els.map(e => e.value)")
            other = next((t for t in reversed(tps) if t != args.tp), args.tp)
            page.select_option("#f-tp", other)
            page.wait_for_selector(ready, timeout=60_000)
            page.click("#search-start")
            page.wait_for_selector("#search-pane[data-state=done]", timeout=600_000)
            page.locator("#search-table button.use").first.click()  # the best layout becomes the plan
            page.wait_for_selector(ready, timeout=60_000)
            page.set_input_files("#sweep-file", str(sweep_dir / "sweep_tp_pp.csv"))
            page.select_option("#sweep-x", "parallel.tp")
            page.select_option("#sweep-y", "parallel.pp")
            page.click("#export-box summary")
            page.click("#paste-box summary")
            page.fill("#flags-text", "--tensor-model-parallel-size 8 --pipeline-model-parallel-size 2 "
                                     "--sequence-parallel --use-distributed-optimizer --bf16")
            page.evaluate("document.activeElement.blur()")
            for name, selector in PANES.items():
                page.locator(selector).screenshot(path=str(args.out / f"web_{name}.png"))
            page.click("#export-box summary")  # the README's picture: the page as it opens, without the export
            page.screenshot(path=str(args.out / "web_page.png"), full_page=True)
            browser.close()
    finally:
        proc.terminate()
        proc.wait(10)
        shutil.rmtree(sweep_dir, ignore_errors=True)
    for name in ("page", *PANES):
        print(args.out / f"web_{name}.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
