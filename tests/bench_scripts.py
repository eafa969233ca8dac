"""The scripts some tests drive (scripts/ is not a package): one loader, so a test starts a
command exactly as its script does instead of keeping a copy of that code."""
from __future__ import annotations

import importlib.util
import sys
from functools import cache
from pathlib import Path
from types import ModuleType

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


@cache
def script(name: str) -> ModuleType:
    """scripts/<name>.py as a module, loaded once. It is registered in ``sys.modules``
    (dataclasses defined in a script look their module up by name)."""
    spec = importlib.util.spec_from_file_location(f"trainsim_script_{name}", SCRIPTS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def bench_interrupt() -> ModuleType:
    """scripts/bench_interrupt.py: the big sweep the interrupt tests stop, the process-alive
    check, and the default-SIGINT set-up of interrupted children."""
    return script("bench_interrupt")
