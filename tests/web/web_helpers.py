"""Helpers of the what-if page's tests: this checkout's commands, run as a user runs them.

Units: timeouts in seconds.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from bench_scripts import script

ROOT = Path(__file__).resolve().parents[2]
# the scripts' copy (scripts/web_server.py), so the tests drive the browser and start the server as they do
CHROMIUM_ARGS = script("web_server").CHROMIUM_ARGS
start_server = script("web_server").start_server


def env() -> dict[str, str]:
    """This checkout first on the path, so the server and the CLI both run the code under test."""
    path = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return {**os.environ, "PYTHONPATH": path}


def cli(command: str, *args: str) -> subprocess.CompletedProcess:
    """A console script of this checkout (``python -m`` its module), as a user runs it."""
    module = {"run-analytical": "engine.commands.run", "serve-web": "engine.commands.serve_web"}[command]
    return subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True, env=env(),
                          cwd=ROOT, timeout=120)


def cli_summary(*flags: str) -> dict:
    """``run-analytical FLAGS --json``'s summary."""
    done = cli("run-analytical", *flags, "--json", "-q")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)
