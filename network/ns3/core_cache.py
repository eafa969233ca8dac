"""trainsim's ns-3 core (``tsim.cpp`` and its ``tsim_*.h`` parts) compiled once into a
shared library, kept in the user's cache directory and reused by every later run.

Why a library and not cppyy's JIT every time: a run that JIT-compiles the core pays
~11 s of CPU before the first packet (measured on the 2-core development machines: 8 s
for the ns-3 wheel's loader, which parses the headers of all ~40 ns-3 modules, 2-3 s for
tsim.cpp and the ns-3 headers it includes, 1.5 s of code generation at the first
``World()``, and more JIT inside the first ``RunUntil``). A library built by the system
C++ compiler is loaded with ``dlopen`` in milliseconds, and Python then needs only the
declarations of ``tsim_api.h`` (no ns-3 header), which cppyy parses in ~0.2 s.

An entry is a directory named by a key: the hash of the ns-3 wheel's version, library
directory and libraries (name, size, modification time), the cppyy version, the compiler's
identity, the compile flags and every byte of the core's sources. A changed source, a new wheel or compiler is a new key, so a stale
library is never loaded. Inside: ``libtsim-<key>.so`` and ``manifest.json`` (the key's inputs
and the library's SHA-256). An entry whose library does not match its manifest (a
truncated copy, a disk error) is moved aside and rebuilt.

Concurrent runs: builders take an exclusive ``flock`` on ``<key>.lock`` so that the second
waits for the first instead of compiling again; each builds in a private temporary
directory and publishes it with one ``rename`` (atomic on POSIX), so a reader never sees a
half-written entry even where locks do not work (some network file systems).

Units: seconds for times, bytes for sizes.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

LAYOUT_VERSION = 1
"""Bumped when an entry's layout or the way it is built changes (part of the key)."""

CXX_FLAGS = ("-std=c++20", "-O2", "-fPIC", "-shared")
"""C++20: ns-3.44 requires it (its CMakeLists.txt sets CMAKE_CXX_STANDARD 20). -O2: what
cppyy's JIT uses by default (cppyy_backend/loader.py: EXTRA_CLING_ARGS '-O2 -march=native').
No -march=native: the Docker image ships a library built on one machine and run on another,
where instructions of the build CPU could be missing (SIGILL)."""

def library_name(key: str) -> str:
    """The library's file name: unique per key, because Cling resolves a declared function
    by searching the loaded libraries, and two loaded files of one name (a stale build and
    this one, or a test's) could answer for each other."""
    return f"libtsim-{key[:24]}.so"


MANIFEST_NAME = "manifest.json"


class CoreCacheError(Exception):
    """The compiled core could not be built or stored; the caller compiles in memory."""


@dataclass(frozen=True, slots=True)
class Toolchain:
    """What the library is built from and against."""

    sources: tuple[Path, ...]
    """The core's C++ files (main first: the file given to the compiler)."""
    include_dirs: tuple[Path, ...]
    library_dir: Path
    """Where the ns-3 libraries live (linked by absolute path, found there at load time)."""
    libraries: tuple[str, ...]
    """Library file names in library_dir to link (their whole dependency closure)."""
    compiler: str
    versions: tuple[tuple[str, str], ...]
    """(name, version) pairs that change the result: the ns-3 wheel, cppyy, the compiler."""

    def key(self) -> str:
        """SHA-256 over everything that changes the built library."""
        h = hashlib.sha256()

        def put(text: str) -> None:
            h.update(text.encode())
            h.update(b"\0")

        put(f"layout {LAYOUT_VERSION}")
        for name, ver in self.versions:
            put(f"{name}={ver}")
        put(self.compiler)
        for flag in CXX_FLAGS:
            put(flag)
        put(str(self.library_dir))
        for lib in self.libraries:
            st = (self.library_dir / lib).stat()  # a wheel reinstalled in place under the same version
            put(f"{lib} {st.st_size} {st.st_mtime_ns}")
        for d in self.include_dirs:
            put(str(d))
        for src in sorted(self.sources, key=lambda p: p.name):
            put(src.name)
            h.update(src.read_bytes())
        return h.hexdigest()

    def command(self, out: Path) -> list[str]:
        """The compile-and-link command line producing ``out``."""
        cmd = [self.compiler, *CXX_FLAGS]
        for d in self.include_dirs:
            cmd += ["-I", str(d)]
        cmd += ["-o", str(out), str(self.sources[0])]
        # DT_RPATH (not RUNPATH): searched before LD_LIBRARY_PATH, so another ns-3 build on
        # LD_LIBRARY_PATH cannot be picked up in place of the one compiled against.
        cmd += [f"-Wl,--disable-new-dtags,-rpath,{self.library_dir}", "-Wl,--no-as-needed"]
        cmd += [str(self.library_dir / lib) for lib in self.libraries]
        return cmd


def compiler_identity(compiler: str) -> str:
    """``compiler --version``'s first line and the resolved path (a different compiler is a
    different key); a CoreCacheError when it does not run."""
    path = shutil.which(compiler)
    if path is None:
        raise CoreCacheError(f"no C++ compiler {compiler!r} on PATH (set CXX, or install g++)")
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30, check=True).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        raise CoreCacheError(f"C++ compiler {path} does not run: {exc}") from None
    return f"{os.path.realpath(path)} {out.splitlines()[0] if out else ''}"


def dependency_closure(library_dir: Path, roots: tuple[str, ...], prefix: str) -> tuple[str, ...]:
    """``roots`` and every library of ``library_dir`` whose name starts with ``prefix`` that
    they need, dependencies first (the order in which loading them by path works).

    The DT_NEEDED names are read from the file's bytes (NUL-terminated strings naming a
    file that exists in the directory), as the ns-3 wheel's own loader does; a string that
    is not a dependency but names a library there would only add a needless link."""
    needs: dict[str, list[str]] = {}
    # the closing NUL is a lookahead: neighbouring strings share it
    pattern = re.compile(rb"\x00(" + re.escape(prefix.encode()) + rb"[\w.+-]*?\.so)(?=\x00)")
    todo = list(roots)
    while todo:
        name = todo.pop()
        if name in needs:
            continue
        data = (library_dir / name).read_bytes()
        deps = sorted({m.decode() for m in pattern.findall(data)} - {name})
        deps = [d for d in deps if (library_dir / d).is_file()]
        needs[name] = deps
        todo.extend(deps)
    order: list[str] = []
    seen: set[str] = set()

    def visit(n: str, stack: tuple[str, ...]) -> None:
        if n in seen or n in stack:
            return
        for d in needs[n]:
            visit(d, (*stack, n))
        seen.add(n)
        order.append(n)

    for r in roots:
        visit(r, ())
    return tuple(order)


def cache_root() -> Path:
    """``$XDG_CACHE_HOME/trainsim/ns3-core`` (XDG base directory spec), else
    ``~/.cache/trainsim/ns3-core``."""
    base = os.environ.get("XDG_CACHE_HOME") or ""
    root = Path(base) if os.path.isabs(base) else Path.home() / ".cache"
    return root / "trainsim" / "ns3-core"


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def valid_entry(entry: Path, key: str) -> Path | None:
    """The entry's library if its manifest names this key and the library's bytes hash to
    what the manifest recorded; None otherwise (missing, partial or corrupted)."""
    try:
        manifest = json.loads((entry / MANIFEST_NAME).read_text())
        lib = entry / library_name(key)
        if manifest.get("key") != key or manifest.get("sha256") != file_sha256(lib):
            return None
        return lib
    except (OSError, ValueError, AttributeError):
        return None


@contextlib.contextmanager
def _build_lock(root: Path, key: str) -> Iterator[None]:
    """An exclusive flock while building (released by the kernel if the process dies);
    no lock where the file system refuses one (the atomic rename still protects)."""
    import fcntl

    try:
        fd = os.open(root / f"{key[:24]}.lock", os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        raise CoreCacheError(f"cache directory {root} is not writable ({exc.strerror or exc})") from None
    try:
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def _discard(path: Path) -> None:
    """Move ``path`` aside (one rename, so nobody sees it half deleted), then delete it."""
    aside = path.with_name(f"{path.name}.bad-{os.getpid()}-{time.monotonic_ns()}")
    try:
        os.rename(path, aside)
    except FileNotFoundError:
        return
    shutil.rmtree(aside, ignore_errors=True)


@dataclass(frozen=True, slots=True)
class CachedCore:
    """A usable library and how it was obtained."""

    library: Path
    built: bool
    """True when this call compiled it (False: found in the cache)."""
    build_s: float = 0.0


def cached_library(tools: Toolchain, root: Path, *,
                   on_build: Callable[[Path], None] | None = None) -> CachedCore:
    """The compiled core for ``tools`` from ``root``, building and publishing it first if the
    cache has no valid entry. ``on_build(entry_dir)`` is called just before compiling (to
    announce it). Raises CoreCacheError when the cache cannot be written or the compiler
    fails: the caller then compiles in memory."""
    key = tools.key()
    entry = root / key[:24]
    lib = valid_entry(entry, key)
    if lib is not None:
        return CachedCore(lib, built=False)
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CoreCacheError(f"cache directory {root} cannot be created ({exc.strerror or exc})") from None
    with _build_lock(root, key):
        lib = valid_entry(entry, key)  # another process may have built it while we waited
        if lib is not None:
            return CachedCore(lib, built=False)
        if on_build is not None:
            on_build(entry)
        t0 = time.perf_counter()
        try:
            tmp = Path(tempfile.mkdtemp(prefix=f"{entry.name}.tmp-", dir=root))
        except OSError as exc:
            raise CoreCacheError(f"cache directory {root} is not writable ({exc.strerror or exc})") from None
        try:
            lib_tmp = tmp / library_name(key)
            _compile(tools, lib_tmp)
            manifest = {"key": key, "sha256": file_sha256(lib_tmp),
                        "versions": dict(tools.versions), "command": tools.command(Path(lib_tmp.name)),
                        "build_s": round(time.perf_counter() - t0, 2)}
            (tmp / MANIFEST_NAME).write_text(json.dumps(manifest, indent=1) + "\n")
            os.chmod(tmp, 0o755)  # mkdtemp made it private; other users may share the cache (Docker)
            _publish(tmp, entry, key)
        except OSError as exc:  # a full disk, a directory that stopped being writable
            raise CoreCacheError(f"writing the compiled core into {root} failed ({exc.strerror or exc})") from None
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        lib = valid_entry(entry, key)
        if lib is None:
            raise CoreCacheError(f"the compiled core in {entry} does not verify after publishing")
        return CachedCore(lib, built=True, build_s=time.perf_counter() - t0)


def _publish(tmp: Path, entry: Path, key: str) -> None:
    """Renames the finished ``tmp`` to ``entry``. A valid entry already there (another
    builder won) is kept; an invalid one (corrupted, partial) is moved aside first. Only
    an invalid entry is ever removed, so a library another process loaded stays put."""
    try:
        os.rename(tmp, entry)
        return
    except OSError:
        pass
    if valid_entry(entry, key) is not None:
        return
    _discard(entry)
    with contextlib.suppress(OSError):  # lost a race without a lock: the caller checks what is there
        os.rename(tmp, entry)


def _compile(tools: Toolchain, out: Path) -> None:
    if shutil.which(tools.compiler) is None:
        raise CoreCacheError(f"no C++ compiler {tools.compiler!r} on PATH (set CXX, or install g++)")
    try:
        r = subprocess.run(tools.command(out), capture_output=True, text=True, timeout=1800)
    except (OSError, subprocess.SubprocessError) as exc:
        raise CoreCacheError(f"{tools.compiler} failed to run: {exc}") from None
    if r.returncode != 0 or not out.is_file():
        first = next((ln for ln in r.stderr.splitlines() if "error" in ln), r.stderr.strip()[:200])
        raise CoreCacheError(f"{tools.compiler} failed (exit {r.returncode}): {first}")
