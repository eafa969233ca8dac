"""The bench scripts some tests drive (scripts/ is not a package): one loader, so a test
starts a command exactly as its benchmark does instead of keeping a copy of that code."""
from __future__ import annotations

import importlib.util
from functools import cache
from pathlib import Path
from types import ModuleType

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


@cache
def bench_interrupt() -> ModuleType:
    """scripts/bench_interrupt.py: the big sweep the interrupt tests stop, the process-alive
    check, and the default-SIGINT set-up of interrupted children."""
    spec = importlib.util.spec_from_file_location("trainsim_bench_interrupt", SCRIPTS / "bench_interrupt.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
