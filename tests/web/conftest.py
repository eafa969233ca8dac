"""The what-if page's fixtures: a real ``serve-web`` process on a free port and one real
headless Chromium (Debian's ``chromium`` on PATH, driven by Playwright; no browser download).

Units: timeouts in seconds (Playwright's own in milliseconds where it asks).
A missing browser fails the tests with what to install: they never skip.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]


def env() -> dict[str, str]:
    """This checkout first on the path, so the server and the CLI both run the code under test."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)}


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


@pytest.fixture(scope="session")
def server():
    """``serve-web --port 0`` (a free port); yields its URL."""
    proc = subprocess.Popen([sys.executable, "-m", "engine.commands.serve_web", "--port", "0", "-q"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env(), cwd=ROOT)
    line = proc.stdout.readline()
    if "http://" not in line:
        proc.kill()
        raise AssertionError(f"serve-web did not print its URL: {line!r} {proc.stderr.read()}")
    url = line.split("open ", 1)[1].split()[0]
    yield url
    proc.terminate()
    proc.wait(timeout=10)


@pytest.fixture(scope="session")
def browser():
    from playwright.sync_api import sync_playwright

    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    assert exe, ("no chromium on PATH: install it (Debian: apt-get install -y chromium; the README's test "
                 "command does this) - the page tests drive a real browser and never skip")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=exe, args=CHROMIUM_ARGS)
        yield b
        b.close()
