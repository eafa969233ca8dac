"""Loading ns-3 and trainsim's C++ core, once per process.

The core is ``tsim.cpp``, which includes its parts (the ``tsim_*.h`` headers next to it:
models such as the switch, DCQCN, HPCC and go-back-N, the fabric builder, the transports;
tsim.cpp's opening comment lists them), each of which includes what it uses; compiling
it by path lets those ``#include "..."`` lines find them. There is no list of headers to
keep here and no cache of the compiled core: cppyy compiles it afresh in every process.

``from ns import ns`` costs 10-35 s of cppyy JIT work, and C++ classes can be defined only
once per interpreter, so the loaded module is cached here (the one piece of module state
in the package; ns-3 itself is a process-wide singleton anyway). Everything else in the
package receives the handle from :func:`load`.

The wheel's loader (``ns/__init__.py``) searches PATH, LD_LIBRARY_PATH and, recursively,
the current directory for ns-3 libraries, and refuses to load when it finds two builds of
a module (a second virtualenv under the current directory is enough) with a multi-line
traceback. :func:`load` therefore imports ns-3 from the wheel's own directory (no scan of
the user's tree, which also took minutes in a large checkout), and turns any refusal that
remains (a second install on PATH or LD_LIBRARY_PATH) into one ConfigError line.
"""
from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

_SOURCE = Path(__file__).with_name("tsim.cpp")


@functools.cache
def load() -> Any:
    """Import ns-3, compile ``tsim.cpp`` (and the parts it includes) into it and return
    ``cppyy.gbl`` (C++ global namespace)."""
    import os
    import sys

    # cppyy prints harmless JIT warnings about ns-3's static initialisers to fd 2; keep
    # them off the user's terminal while importing.
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        sys.stderr.flush()
        os.dup2(devnull, 2)
        import cppyy

        _import_ns3()

        # Included by path (not pasted as text) so that its "tsim_*.h" includes resolve
        # relative to this directory; a compile error raises with Cling's diagnostics.
        cppyy.include(str(_SOURCE))
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)
    return cppyy.gbl


def _import_ns3() -> None:
    """``from ns import ns`` run from the wheel's directory; a refusal is one ConfigError."""
    import importlib.util
    import os

    from workload_gen.core.errors import ConfigError

    spec = importlib.util.find_spec("ns")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError("ns3", "not installed", "install the ns-3 wheel: pip install -e '.[ns3]' (ns3==3.44.post0)")
    here = os.getcwd()
    os.chdir(next(iter(spec.submodule_search_locations)))
    try:
        from ns import ns  # noqa: F401  (loads every ns-3 library and header)
    except Exception as exc:  # the wheel raises bare Exception with a multi-line reason
        reason = "; ".join(line.strip() for line in str(exc).splitlines() if line.strip())
        raise ConfigError("ns3", reason or type(exc).__name__,
                          "the ns-3 wheel refused to load; keep one ns-3 installation on PATH and "
                          "LD_LIBRARY_PATH (e.g. a second virtualenv's ns3/lib64)") from None
    finally:
        os.chdir(here)
