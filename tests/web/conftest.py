"""The what-if page's fixtures: a real ``serve-web`` process on a free port and one real
headless Chromium (Debian's ``chromium`` on PATH, driven by Playwright; no browser download).

Units: timeouts in seconds.
A missing browser fails the tests with what to install: they never skip.
"""
from __future__ import annotations

import shutil
import subprocess

import pytest
from web_helpers import CHROMIUM_ARGS, env, start_server


@pytest.fixture(scope="session")
def server():
    """``serve-web --port 0`` (a free port); yields its URL."""
    proc, url = start_server(env(), stderr=subprocess.PIPE)
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
