"""What the what-if page's scripts and tests share: starting ``serve-web`` from this checkout
and the headless Chromium's flags (scripts/bench_web.py, scripts/web_screenshots.py, tests/web).

Units: none (a URL, command-line flags).

One copy, so that the benchmark, the screenshots and the tests drive the same server and the
same browser the same way.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
"""Debian's chromium in a container: no sandbox (no user namespaces), no GPU, nothing fetched."""


def start_server(env: dict[str, str] | None = None, **popen: object) -> tuple[subprocess.Popen, str]:
    """``serve-web --port 0 -q`` of this checkout (a free port) and the URL it prints once it
    listens; ``env`` defaults to this process's with the checkout first on PYTHONPATH."""
    env = env if env is not None else {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "engine.commands.serve_web", "--port", "0", "-q"], cwd=ROOT,
                            env=env, stdout=subprocess.PIPE, text=True, **popen)
    line = proc.stdout.readline()
    if "http://" not in line:
        proc.kill()
        said = proc.stderr.read() if proc.stderr else ""
        raise RuntimeError(f"serve-web did not print its URL: {line!r} {said}")
    return proc, line.split("open ", 1)[1].split()[0]
