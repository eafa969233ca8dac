"""scripts/web_screenshots.py runs and writes one PNG per pane (into a temporary folder: the
tests never rewrite the tracked images in docs/).

Units: pixels (PNG width and height).
"""
from __future__ import annotations

import struct
import subprocess
import sys

from web_helpers import ROOT, env


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])  # the IHDR chunk's width and height


def test_screenshot_script_writes_each_pane(tmp_path):
    done = subprocess.run([sys.executable, "scripts/web_screenshots.py", "--out", str(tmp_path), "--model", "llama3-8b",
                           "--layers", "2", "--gpus", "8", "--batch", "8", "--seq", "1024", "--tp", "2", "--pp", "1"],
                          cwd=ROOT, env=env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    sizes = {p.stem: png_size(p.read_bytes()) for p in tmp_path.glob("*.png")}
    assert sorted(p.name for p in tmp_path.iterdir() if p.suffix != ".png") == []  # its sweep files are gone
    assert set(sizes) == {"web_page", "web_plan", "web_answer", "web_compare", "web_search", "web_sweep"}
    page_w, page_h = sizes["web_page"]
    assert page_w == 1440
    for name, (w, h) in sizes.items():  # each pane is a part of the page, not an empty picture
        assert 100 < w <= page_w and 100 < h <= page_h, (name, w, h)
