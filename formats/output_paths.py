"""Output paths: inspecting them, refusing the ones that cannot be written, and preparing them.

Shared by the writers (:mod:`formats.atomic`, :mod:`formats.atomic_directory`) and used
on its own by commands that check an output path before long work
(:func:`check_output_path`). Every refusal is a one-line :class:`ConfigError` naming the
option (``field``) and the path: a parent that runs into a file, a directory given for a
file, a symlink loop, a name that is not a plain file name.
"""
from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterable
from pathlib import Path

from workload_gen.core.errors import ConfigError


def current_umask() -> int:
    """The process umask, read without changing it where /proc allows (thread-safe)."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0)
    os.umask(mask)
    return mask


def file_kind(mode: int) -> str:
    """What a ``st_mode`` is, in words for an error message."""
    for test, name in ((stat.S_ISDIR, "directory"), (stat.S_ISCHR, "character device"),
                       (stat.S_ISBLK, "block device"), (stat.S_ISFIFO, "FIFO"), (stat.S_ISSOCK, "socket"),
                       (stat.S_ISLNK, "symlink"), (stat.S_ISREG, "regular file")):
        if test(mode):
            return name
    return "special file"


def stat_or_none(path: str | os.PathLike[str], follow: bool = True) -> os.stat_result | None:
    """``os.stat`` (``os.lstat`` unless ``follow``), or None where nothing is there to stat:
    missing, under a file, or a symlink loop (each reported by the caller that cares)."""
    try:
        return os.stat(path) if follow else os.lstat(path)
    except FileNotFoundError:
        return None
    except NotADirectoryError:
        return None  # a parent is a file; reported by ensure_parent
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return None  # a symlink loop; reported by the caller's resolution
        raise


def ensure_parent(directory: Path, field: str, shown: object) -> None:
    """Make ``directory`` exist; a component that is a file, or a directory we cannot
    create, is a one-line ConfigError naming it."""
    if directory.is_dir():
        return
    _check_nearest_is_directory((directory, *directory.parents), field, shown)
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(field, str(shown), f"cannot create its directory {directory}: {exc.strerror}") from None


def check_output_path(path: str | os.PathLike[str], field: str = "output") -> None:
    """Refuse, before any long work, an output file path that cannot be written: the path is
    a directory, or a component above it is not one (a missing parent is fine: it is created
    when the file is written). One-line ConfigError naming ``field``."""
    p = Path(path)
    st = stat_or_none(p)
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise ConfigError(field, str(path), "is a directory; give a file path")
    _check_nearest_is_directory(p.parents, field, path)


def check_not_an_input(output: str | os.PathLike[str] | None, field: str,
                       inputs: Iterable[tuple[str, str | os.PathLike[str] | None]]) -> None:
    """Refuse an output file that is one of the command's own inputs (the same file, through
    any path or symlink): writing it would destroy what the command reads. One-line
    ConfigError naming both options."""
    if output is None or str(output) == "-":
        return
    out = Path(output)
    for name, given in inputs:
        if given is None or str(given) == "-":
            continue
        src = Path(given)
        try:
            same = out.exists() and src.exists() and os.path.samefile(out, src)
        except OSError:
            same = False
        if same or os.path.realpath(out) == os.path.realpath(src):
            raise ConfigError(field, str(output), f"is the command's input {name} ({given}); writing it would "
                              "destroy it: give another output path")


def _check_nearest_is_directory(components: Iterable[Path], field: str, shown: object) -> None:
    """Of ``components`` (a path's parents, nearest first), the first that exists must be a
    directory; else a one-line ConfigError naming it. Missing ones are fine (created later)."""
    for comp in components:
        st = stat_or_none(comp)
        if st is not None:
            if not stat.S_ISDIR(st.st_mode):
                raise ConfigError(field, str(shown), f"its parent {comp} is a {file_kind(st.st_mode)}, not a directory")
            return


def resolve_link(path: Path, field: str) -> Path:
    """Where a write to ``path`` lands: ``path`` itself, or the end of its symlink chain."""
    if not os.path.islink(path):
        return path
    real = Path(os.path.realpath(path))
    if os.path.islink(real):
        raise ConfigError(field, str(path), "is a symlink loop")
    return real


def copy_metadata(fd_or_path: int | str, st: os.stat_result | None, default_mode: int) -> None:
    """Give a fresh file/directory the permission bits (and, as root, the owner) of the one it replaces."""
    if st is not None and os.geteuid() == 0 and (st.st_uid, st.st_gid) != (os.geteuid(), os.getegid()):
        try:
            os.chown(fd_or_path, st.st_uid, st.st_gid)
        except OSError:
            pass
    os.chmod(fd_or_path, stat.S_IMODE(st.st_mode) if st is not None else default_mode)  # after chown (clears s-bits)


def unlink_quietly(path: str) -> None:
    """Remove a file; already gone is fine."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def check_file_name(name: str) -> None:
    """Refuse (ValueError) a name that is not a plain file name: empty, ``.``/``..``, or with a separator or NUL."""
    if not name or name in (".", "..") or "/" in name or "\0" in name or (os.altsep and os.altsep in name):
        raise ValueError(f"not a plain file name: {name!r}")
