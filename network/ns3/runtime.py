"""Loading trainsim's C++ core and the ns-3 libraries it runs on, once per process.

The core is ``tsim.cpp``, which includes its parts (the ``tsim_*.h`` headers next to it:
models such as the switch, DCQCN, HPCC and go-back-N, the fabric builder, the transports;
tsim.cpp's opening comment lists them). Python sees only ``tsim_api.h``: the ``tsim::Sim``
handle, whose declarations name no ns-3 type.

Two ways to get it, the first preferred:

- **Compiled once, cached** (network/ns3/core_cache.py): the system C++ compiler builds
  the core into a shared library in the user's cache directory, keyed by the ns-3 wheel,
  cppyy, the compiler and the sources' hash; every later run ``dlopen``\\ s it and cppyy
  parses only tsim_api.h. Start-up falls from ~11 s of CPU to ~0.3 s. The compile is
  announced in one line (it takes ~10-20 s, once per installed version).
- **In memory** (the fallback when there is no compiler, the cache directory is read-only
  or the build fails; one note line says which): cppyy's JIT compiles tsim.cpp and the
  ns-3 headers it includes in this process, every run (~4 s parsing plus JIT at first use).

Either way ns-3's libraries are loaded from the wheel's own directory by absolute path,
dependencies first, never through the wheel's loader (``from ns import ns``): that loader
parses every ns-3 module's headers (8 s), searches PATH, LD_LIBRARY_PATH and the current
directory tree for libraries, and refused to run when a second ns-3 build was on any of
them. Loaded by path (and linked with an RPATH, which precedes LD_LIBRARY_PATH), another
ns-3 on LD_LIBRARY_PATH is simply not used.

C++ classes can be defined only once per interpreter, so the loaded namespace is kept here
(the one piece of module state in the package; ns-3 itself is a process-wide singleton
anyway). Everything else in the package receives the handle from :func:`load`.

Units: seconds.
"""
from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

from network.ns3 import core_cache

_HERE = Path(__file__).parent
_SOURCE = _HERE / "tsim.cpp"
_API = "tsim_api.h"
_NS3_MODULES = ("core", "network", "internet", "point-to-point", "traffic-control")
"""The ns-3 modules tsim_common.h includes (``ns3/<module>-module.h``); their libraries and
everything those need are linked and loaded."""

_loaded: dict[str, Any] = {}
_lock = threading.Lock()


def load(progress: TextIO | None = None, prog: str = "ns-3") -> Any:
    """``cppyy.gbl`` (the C++ global namespace) with ``tsim::Sim`` usable: from the cached
    library (built first if needed) or compiled in memory. ``progress``: where the one-line
    announcements go (the compile, or the fallback's reason); None prints nothing."""
    with _lock:
        if "gbl" not in _loaded:
            _loaded["gbl"] = _load(progress, prog)
        return _loaded["gbl"]


def how_loaded() -> str:
    """'cached', 'built' or 'in-memory' once :func:`load` has run ('' before)."""
    return _loaded.get("how", "")


def _load(progress: TextIO | None, prog: str) -> Any:
    with _quiet_fd2():
        import cppyy
    install = ns3_install()
    tools = toolchain(install)
    bars: list[Any] = []
    try:
        try:
            core = core_cache.cached_library(tools, core_cache.cache_root(),
                                             on_build=lambda entry: bars.append(_announce(progress, prog, entry)))
        finally:
            for bar in bars:
                bar.close()
        with _quiet_fd2():
            cppyy.add_include_path(str(_HERE))
            cppyy.include(_API)
            cppyy.load_library(str(core.library))
        _loaded["how"] = "built" if core.built else "cached"
        return cppyy.gbl
    except (core_cache.CoreCacheError, RuntimeError) as exc:  # RuntimeError: cppyy could not load it
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        if progress is not None:
            print(f"[{prog}] note: {reason}; compiling the ns-3 core in memory instead (every run)",
                  file=progress, flush=True)
    with _quiet_fd2():
        cppyy.add_include_path(str(install.include_dir))
        for lib in tools.libraries:
            cppyy.load_library(str(install.library_dir / lib))
        # by path, so that its "tsim_*.h" includes resolve relative to this directory; a
        # compile error raises with Cling's diagnostics
        cppyy.include(str(_SOURCE))
    _loaded["how"] = "in-memory"
    return cppyy.gbl


def _announce(progress: TextIO | None, prog: str, entry: Path) -> Any:
    """The one line saying that the core compiles now, and on a terminal a ticking elapsed
    time under it (the project's Progress; nothing in a pipe or log)."""
    from workload_gen.core.progress import Progress

    if progress is not None:
        print(f"[{prog}] compiling trainsim's ns-3 core once for this installation into {entry} "
              "(10-30 s; later runs load it in under a second)", file=progress, flush=True)
    return Progress(None, f"[{prog}] compiling", unit="s", quiet=progress is None, stream=progress)


class Ns3Install:
    """Where the ns-3 wheel keeps its headers and libraries, and its version."""

    def __init__(self, prefix: Path, version: str) -> None:
        self.prefix = prefix
        self.version = version
        lib = prefix / "lib64"
        self.library_dir = lib if lib.is_dir() else prefix / "lib"
        self.include_dir = prefix / "include"


def ns3_install() -> Ns3Install:
    """The installed ns-3 wheel (``ns3==3.44.post0``); one ConfigError line if it is
    missing or incomplete."""
    import importlib.metadata

    from workload_gen.core.errors import ConfigError

    hint = "install the ns-3 wheel: pip install -e '.[ns3]' (ns3==3.44.post0)"
    try:
        dist = importlib.metadata.distribution("ns3")
    except importlib.metadata.PackageNotFoundError:
        raise ConfigError("ns3", "not installed", hint) from None
    # the wheel's own files (its package directory ns3/ holds include/ and lib64/), not
    # whatever an "ns3" or "ns" import would find first on sys.path
    prefix = Path(dist.locate_file("ns3")).resolve()
    version = dist.version or "unknown"
    inst = Ns3Install(prefix, version)
    core = inst.library_dir / f"libns{_series(version)}-core.so"
    if not core.is_file() or not (inst.include_dir / "ns3" / "core-module.h").is_file():
        raise ConfigError("ns3", f"{version} at {prefix}", f"the wheel has no {core.name} or ns3/core-module.h; "
                          "reinstall it: pip install --force-reinstall ns3==3.44.post0")
    return inst


def _series(version: str) -> str:
    """'3.44' from '3.44.post0': the version in the library names (libns3.44-core.so)."""
    parts = version.split(".")
    return ".".join(parts[:2])


def toolchain(install: Ns3Install) -> core_cache.Toolchain:
    """What the cached core is built from: the sources, the wheel's headers and libraries,
    the compiler ($CXX, else ``c++``) and the versions that go into the cache key."""
    import importlib.metadata

    series = _series(install.version)
    roots = tuple(f"libns{series}-{m}.so" for m in _NS3_MODULES)
    libs = core_cache.dependency_closure(install.library_dir, roots, f"libns{series}-")
    versions = [("ns3", install.version)]
    for dist in ("cppyy", "cppyy-cling"):
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            versions.append((dist, importlib.metadata.version(dist)))
    compiler = os.environ.get("CXX") or "c++"
    try:
        versions.append(("compiler", core_cache.compiler_identity(compiler)))
    except core_cache.CoreCacheError:
        versions.append(("compiler", "missing"))  # cached_library's compile then says so
    sources = (_SOURCE, *sorted(p for p in _HERE.glob("tsim*.h")))
    return core_cache.Toolchain(sources=sources, include_dirs=(install.include_dir,),
                                library_dir=install.library_dir, libraries=libs, compiler=compiler,
                                versions=tuple(versions))


@contextlib.contextmanager
def _quiet_fd2() -> Iterator[None]:
    """cppyy prints harmless JIT warnings about ns-3's static initialisers to fd 2: keep them
    off the user's terminal while loading."""
    saved = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        sys.stderr.flush()
        os.dup2(devnull, 2)
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)

