"""The compiled-core cache (network/ns3/core_cache.py) with a real compiler.

These build a one-function C++ library instead of trainsim's core (a 0.3 s compile instead
of 10-15 s): the cache does not look inside what it builds. tests/ns3/test_core_startup.py
runs the real core through it.
"""
from __future__ import annotations

import ctypes
import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from network.ns3 import core_cache
from network.ns3.core_cache import CoreCacheError, Toolchain, cached_library

SOURCE = 'extern "C" int answer() {{ return {value}; }}\n'


def tools(src: Path, compiler: str = "c++") -> Toolchain:
    return Toolchain(sources=(src,), include_dirs=(), library_dir=src.parent, libraries=(), compiler=compiler,
                     versions=(("test", "1"),))


def answer(lib: Path) -> int:
    """Calls the library's function: the entry holds a working library, not just a file."""
    return ctypes.CDLL(str(lib)).answer()


@pytest.fixture
def src(tmp_path):
    p = tmp_path / "src" / "answer.cpp"
    p.parent.mkdir()
    p.write_text(SOURCE.format(value=42))
    return p


def test_built_once_then_found(src, tmp_path):
    root = tmp_path / "cache"
    announced = []
    first = cached_library(tools(src), root, on_build=announced.append)
    assert first.built and answer(first.library) == 42 and len(announced) == 1
    mtime = first.library.stat().st_mtime_ns
    second = cached_library(tools(src), root, on_build=announced.append)
    assert not second.built and second.library == first.library and len(announced) == 1
    assert second.library.stat().st_mtime_ns == mtime
    manifest = json.loads((first.library.parent / core_cache.MANIFEST_NAME).read_text())
    assert manifest["key"] == tools(src).key() and manifest["sha256"] == core_cache.file_sha256(first.library)


def test_a_changed_source_is_a_new_entry(src, tmp_path):
    root = tmp_path / "cache"
    old = cached_library(tools(src), root)
    src.write_text(SOURCE.format(value=7))
    new = cached_library(tools(src), root)
    assert new.built and new.library != old.library
    assert answer(new.library) == 7


def test_a_corrupted_library_is_rebuilt(src, tmp_path):
    root = tmp_path / "cache"
    lib = cached_library(tools(src), root).library
    data = lib.read_bytes()
    lib.write_bytes(data[: len(data) // 2])  # a truncated copy: dlopen would fail or worse
    assert core_cache.valid_entry(lib.parent, tools(src).key()) is None
    again = cached_library(tools(src), root)
    assert again.built and again.library == lib
    assert answer(again.library) == 42
    (again.library.parent / core_cache.MANIFEST_NAME).write_text("{not json")
    assert cached_library(tools(src), root).built


def test_concurrent_processes_build_once_and_agree(src, tmp_path):
    """Four processes asking at once for an entry nobody has built: one compiles (the
    others wait on the lock), all get the same verified library, no temporary is left."""
    root = tmp_path / "cache"
    code = ("import sys; from pathlib import Path; from network.ns3.core_cache import Toolchain, cached_library; "
            f"t = Toolchain((Path({str(src)!r}),), (), Path({str(src.parent)!r}), (), 'c++', (('test', '1'),)); "
            f"c = cached_library(t, Path({str(root)!r})); print(c.built, c.library)")
    root_dir = Path(__file__).resolve().parents[2]
    procs = [subprocess.Popen([sys.executable, "-c", code], cwd=root_dir, stdout=subprocess.PIPE, text=True)
             for _ in range(4)]
    outs = [p.communicate(timeout=120)[0].split() for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert sorted(o[0] for o in outs) == ["False", "False", "False", "True"]
    assert len({o[1] for o in outs}) == 1 and answer(Path(outs[0][1])) == 42
    assert sorted(p.name for p in root.iterdir() if p.is_dir()) == [Path(outs[0][1]).parent.name]


def test_builders_without_a_lock_publish_atomically(src, tmp_path, monkeypatch):
    """Where flock does nothing (some network file systems) two builders compile at once;
    each publishes a complete entry with one rename, the loser keeps the winner's."""
    import contextlib

    monkeypatch.setattr(core_cache, "_build_lock", lambda root, key: contextlib.nullcontext())
    root = tmp_path / "cache"
    got: list = []
    threads = [threading.Thread(target=lambda: got.append(cached_library(tools(src), root))) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert len(got) == 3 and len({c.library for c in got}) == 1
    assert answer(got[0].library) == 42 and core_cache.valid_entry(got[0].library.parent, tools(src).key())
    assert [p.name for p in root.iterdir() if p.is_dir()] == [got[0].library.parent.name]


def test_unusable_cache_or_compiler_is_one_reason(src, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(CoreCacheError, match="cannot be created"):
        cached_library(tools(src), blocker / "cache")
    with pytest.raises(CoreCacheError, match="no C\\+\\+ compiler 'no-such-c\\+\\+'"):
        cached_library(tools(src, compiler="no-such-c++"), tmp_path / "c1")
    src.write_text("int broken( {\n")
    with pytest.raises(CoreCacheError, match=r"failed \(exit 1\).*error") as exc:
        cached_library(tools(src), tmp_path / "c2")
    assert "\n" not in str(exc.value)
    assert not [p for p in (tmp_path / "c2").iterdir() if p.is_dir()]  # no half-built entry


def test_a_cache_that_fills_up_is_one_reason_and_leaves_nothing(src, tmp_path):
    """Files limited to 4 KiB (RLIMIT_FSIZE, as a nearly full disk would stop them): the
    build fails with one CoreCacheError line (the caller then compiles in memory) and leaves
    no temporary directory."""
    root = tmp_path / "cache"
    code = ("import resource, signal; from pathlib import Path; "
            "signal.signal(signal.SIGXFSZ, signal.SIG_IGN); resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096)); "
            "from network.ns3.core_cache import CoreCacheError, Toolchain, cached_library; "
            f"t = Toolchain((Path({str(src)!r}),), (), Path({str(src.parent)!r}), (), 'c++', (('test', '1'),))\n"
            f"try:\n    cached_library(t, Path({str(root)!r}))\nexcept CoreCacheError as e:\n    print('refused:', e)")
    r = subprocess.run([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[2], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.startswith("refused:") and r.stdout.count("\n") == 1, r.stdout + r.stderr
    assert not [p for p in root.iterdir() if p.is_dir()]

def test_ns3_libraries_are_linked_with_their_dependencies_first():
    """The closure of the modules tsim.cpp includes, in an order dlopen-by-path accepts:
    from the wheel's ELF headers (readelf -d): internet needs bridge, traffic-control,
    network, stats and core; network needs stats and core; core needs no ns-3 library."""
    from network.ns3 import runtime

    libs = runtime.toolchain(runtime.ns3_install()).libraries
    pos = {name.split("-", 1)[1].removesuffix(".so"): i for i, name in enumerate(libs)}
    assert set(pos) == {"core", "stats", "network", "bridge", "traffic-control", "internet", "point-to-point"}
    assert pos["core"] == 0
    assert all(pos[d] < pos["internet"] for d in ("bridge", "traffic-control", "network", "stats"))
    assert pos["stats"] < pos["network"] < pos["point-to-point"]
