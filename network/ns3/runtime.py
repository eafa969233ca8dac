"""Loading ns-3 and trainsim's C++ core, once per process.

The core is ``tsim.cpp``, which includes its parts (``tsim_common.h``, ``tsim_routing.h``,
``tsim_fabric.h``, ``tsim_rdma.h``, ``tsim_tcp.h``, ``tsim_nvlink.h``, all next to it)
in dependency order; compiling it by path lets those ``#include "..."`` lines find them.

``from ns import ns`` costs 10-35 s of cppyy JIT work, and C++ classes can be defined only
once per interpreter, so the loaded module is cached here (the one piece of module state
in the package; ns-3 itself is a process-wide singleton anyway). Everything else in the
package receives the handle from :func:`load`.
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
        from ns import ns  # noqa: F401  (loads every ns-3 library and header)

        # Included by path (not pasted as text) so that its "tsim_*.h" includes resolve
        # relative to this directory; a compile error raises with Cling's diagnostics.
        cppyy.include(str(_SOURCE))
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)
    return cppyy.gbl
