"""Helpers for the reliability tests: small valid inputs to break, and a CLI runner."""
from __future__ import annotations

import contextlib
import io
import sys
from functools import cache
from pathlib import Path


@cache
def native_text() -> str:
    from formats.native import native_lines
    from workload_gen import build
    from workload_gen.config_loading import configs_from_dict

    m, p = configs_from_dict({"model": {"preset": "gpt3-125m", "num_layers": 4},
                              "parallel": {"world_size": 8, "tp": 2, "pp": 2},
                              "training": {"global_batch": 8, "seq_length": 512}})
    return "\n".join(native_lines(build(m, p))) + "\n"


@cache
def simai_text() -> str:
    from compute_profile import attach
    from formats.simai_convert import workload_to_simai
    from formats.simai_text import render_simai
    from workload_gen import build
    from workload_gen.config_loading import configs_from_dict

    m, p = configs_from_dict({"model": {"preset": "gpt3-125m", "num_layers": 2},
                              "parallel": {"world_size": 8, "tp": 2}, "training": {"global_batch": 8, "seq_length": 512}})
    return render_simai(workload_to_simai(attach(build(m, p), "h100")[0], 0))


def edit_native(prefix: str, new: str) -> str:
    """The native text with the first line starting with ``prefix`` replaced (or removed if new is None)."""
    out, done = [], False
    for line in native_text().split("\n"):
        if not done and line.startswith(prefix):
            done = True
            if new is None:
                continue
            line = new
        out.append(line)
    assert done, prefix
    return "\n".join(out)


def edit_record(name: str, column: int, value: str) -> tuple[str, int]:
    """The native text with one cell of the first record named ``name`` changed, and that line's number."""
    out, where = [], None
    for i, line in enumerate(native_text().split("\n"), 1):
        f = line.split("\t")
        if where is None and len(f) == 18 and f[4] == name:
            f[column] = value
            line = "\t".join(f)
            where = i
        out.append(line)
    assert where is not None, name
    return "\n".join(out), where


def run_main(main, argv: list[str]) -> tuple[int, str, str]:
    """Run a console-script entry point in-process: (exit code, stdout, stderr). Any
    exception other than SystemExit propagates (a traceback at the command line)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(argv)
        except SystemExit as exc:
            rc = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    return rc, out.getvalue(), err.getvalue()


def write(path: Path, content: str | bytes) -> Path:
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    return path


PY = sys.executable
