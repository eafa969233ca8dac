"""Safe output: a failed or interrupted write never leaves a half-written or destroyed file.

Single files (:func:`atomic_write`, :func:`write_text_atomic`, :func:`write_files_atomic`):

* a **regular file** (or a new path) is written to a temporary file in the same
  directory and renamed over the target (``os.replace``), so readers see the old
  content or the new, never a mix. The new file keeps the old one's permission bits
  (0600 stays 0600) and, when run as root, its owner; a new file gets 0666 & ~umask.
  An existing file we may not write (no write permission) is refused, not replaced.
* a **character or block device or a FIFO** (``/dev/null``, ``mkfifo``, ``/dev/stdout``
  on a pipe) is never replaced: it is opened for writing and written into directly,
  without truncation or rename. A FIFO must get a reader within
  :data:`FIFO_READER_WAIT_S` seconds, or the write is refused (no hang).
* a **symlink is followed**: the file it points to is written atomically (the link
  itself stays a link). A dangling link creates its target. A link to a directory,
  socket or to a place we cannot write is refused. Paths that resolve through
  ``/proc`` (``/dev/stdout``, ``/dev/fd/N`` on a regular file) are written into
  directly (appending), as a shell would, never renamed over.
* a missing parent directory is created; a parent path that runs into a file (or
  that cannot be created) is a one-line :class:`ConfigError` naming the path.

:func:`write_files_atomic` adds or replaces several files of an existing directory, all
or none of them. A whole run directory is replaced at once by
:func:`formats.atomic_directory.write_directory`, which fills its staging directory with
:func:`write_new_file`.

Temporary files are removed on any exception (``KeyboardInterrupt`` included) and on
SIGTERM/SIGHUP (:mod:`formats.write_guard`); only SIGKILL (or a power cut) can leave a
``.NAME.*.tmp`` file behind. The paths are checked and prepared by :mod:`formats.output_paths`.
"""
from __future__ import annotations

import errno
import os
import stat
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from formats.output_paths import (
    check_file_name,
    copy_metadata,
    current_umask,
    ensure_parent,
    file_kind,
    resolve_link,
    stat_or_none,
    unlink_quietly,
)
from formats.write_guard import register_cleanup, signal_guard, unregister_cleanup
from workload_gen.core.errors import ConfigError

FIFO_READER_WAIT_S = 10.0
"""How long a write into a FIFO waits for a reader before it is refused."""


def _through_proc(path: Path) -> bool:
    """Whether a symlink chain runs through /proc or /dev/fd (``/dev/stdout``, ``/dev/fd/1``):
    a name for an open descriptor, which a rename would not reach."""
    cur = os.path.abspath(path)
    for _ in range(40):
        if cur.startswith(("/proc/", "/dev/fd/")) or cur in ("/dev/stdout", "/dev/stderr"):
            return True
        if not os.path.islink(cur):
            return False
        cur = os.path.normpath(os.path.join(os.path.dirname(cur), os.readlink(cur)))
    return False


def _check_writable(target: Path, st: os.stat_result | None, field: str, shown: object, via_link: bool) -> None:
    """Refuse to replace an existing file we may not write (renaming over it would succeed)."""
    if st is not None and not os.access(target, os.W_OK, effective_ids=os.access in os.supports_effective_ids):
        what = f"is a symlink to {target}, which" if via_link else "is a file that"
        raise ConfigError(field, str(shown), f"{what} is not writable; not replacing it")


def _mkstemp(target: Path, field: str, shown: object, via_link: bool) -> tuple[int, str]:
    """A temporary file beside ``target`` (same directory, so the rename is atomic)."""
    try:
        return tempfile.mkstemp(prefix=f".{target.name[:64]}.", suffix=".tmp", dir=target.parent)
    except OSError as exc:
        what = f"is a symlink to {target}, which is not writable" if via_link else \
            f"cannot create a file in {target.parent}"
        raise ConfigError(field, str(shown), f"{what}: {exc.strerror}") from None


def _open_special(path: Path, st: os.stat_result, field: str, shown: object) -> int:
    """Open a device or FIFO for writing into it directly (no create, no truncate)."""
    flags = os.O_WRONLY | getattr(os, "O_CLOEXEC", 0)
    try:
        if stat.S_ISFIFO(st.st_mode):
            deadline = time.monotonic() + FIFO_READER_WAIT_S
            while True:
                try:
                    fd = os.open(path, flags | os.O_NONBLOCK)
                    break
                except OSError as exc:
                    if exc.errno != errno.ENXIO:  # ENXIO: no reader yet
                        raise
                    if time.monotonic() >= deadline:
                        raise ConfigError(field, str(shown), f"is a FIFO nobody reads from (waited "
                                          f"{FIFO_READER_WAIT_S:g} s); start its reader first") from None
                    time.sleep(0.02)
            os.set_blocking(fd, True)
            return fd
        return os.open(path, flags)
    except OSError as exc:
        raise ConfigError(field, str(shown), f"is a {file_kind(st.st_mode)} that cannot be opened for "
                          f"writing: {exc.strerror}") from None


def _open_through_proc(path: Path, field: str, shown: object) -> int:
    """Open a name for an open descriptor (``/dev/stdout``) for appending, as a shell would."""
    try:
        return os.open(path, os.O_WRONLY | os.O_APPEND | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise ConfigError(field, str(shown), f"cannot be opened for writing: {exc.strerror}") from None


# --------------------------------------------------------------------------------------
# Single files
# --------------------------------------------------------------------------------------

@contextmanager
def atomic_write(path: str | os.PathLike[str], mode: str = "w", encoding: str | None = "utf-8",
                 field: str = "output") -> Iterator[IO]:
    """Yield a file handle whose content replaces ``path`` only if the block succeeds.

    ``path`` may be a regular file or a new name (written atomically, keeping the old
    file's mode), a device or FIFO (written into directly), or a symlink (followed: its
    target is written atomically and the link is kept). See the module docstring.
    ``field`` names the option in error messages.
    """
    if mode not in ("w", "wt", "wb"):
        raise ValueError(f"atomic_write: mode must be 'w' or 'wb', not {mode!r}")
    binary = "b" in mode
    enc = None if binary else encoding
    given = Path(path)
    st = stat_or_none(given)  # follows symlinks
    if st is not None and not stat.S_ISREG(st.st_mode):
        if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode) or stat.S_ISFIFO(st.st_mode):
            fd = _open_special(given, st, field, path)
            with os.fdopen(fd, mode, encoding=enc) as fh:
                yield fh
            return
        raise ConfigError(field, str(path), f"is a {file_kind(st.st_mode)}, not a file; give a file path")
    via_link = os.path.islink(given)
    target = resolve_link(given, field)
    if via_link and _through_proc(given):
        # /dev/stdout, /dev/fd/N on a regular file: an open descriptor, not a name to replace.
        with os.fdopen(_open_through_proc(given, field, path), mode, encoding=enc) as fh:
            yield fh
        return
    ensure_parent(target.parent, field, path)
    st = stat_or_none(target, follow=False)
    if st is not None and not stat.S_ISREG(st.st_mode):  # appeared meanwhile, or a loop
        raise ConfigError(field, str(path), f"is a {file_kind(st.st_mode)}, not a file; give a file path")
    _check_writable(target, st, field, path, via_link)
    tmp: list[str] = []
    token = register_cleanup(lambda: [unlink_quietly(t) for t in tmp])
    try:
        with signal_guard():
            fd, name = _mkstemp(target, field, path, via_link)
            tmp.append(name)
            try:
                copy_metadata(fd, st, 0o666 & ~current_umask())
                fh = os.fdopen(fd, mode, encoding=enc)
            except BaseException:
                os.close(fd)
                raise
            with fh:
                yield fh
            os.replace(name, target)
            tmp.clear()
    except BaseException:
        for t in tmp:
            unlink_quietly(t)
        raise
    finally:
        unregister_cleanup(token)


def write_text_atomic(path: str | os.PathLike[str], text: str, field: str = "output") -> None:
    """Write a whole text file atomically (see :func:`atomic_write`)."""
    with atomic_write(path, "w", field=field) as fh:
        fh.write(text)


# --------------------------------------------------------------------------------------
# Several files in a directory
# --------------------------------------------------------------------------------------

def as_bytes(data: str | bytes) -> bytes:
    """Text as UTF-8; bytes as they are."""
    return data if isinstance(data, bytes) else data.encode("utf-8")


def _write_all(fd: int, data: bytes) -> None:
    """Write every byte of ``data`` to ``fd`` (the one place the directory writers write, so
    that a test can make the disk fill up here)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _fill(fd: int, data: bytes, st: os.stat_result | None, umask: int) -> None:
    """Give a fresh file the mode of the one it replaces, write ``data``, close it."""
    try:
        copy_metadata(fd, st, 0o666 & ~umask)
        _write_all(fd, data)
    finally:
        os.close(fd)


def write_new_file(path: str, data: bytes, st: os.stat_result | None, umask: int) -> None:
    """Create ``path`` (it must not exist) with ``data`` and the mode of ``st``, the file it
    will replace (0666 & ~``umask`` for none): how a directory being staged is filled."""
    _fill(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o600), data, st, umask)


def write_files_atomic(directory: str | os.PathLike[str], files: Mapping[str, str | bytes],
                       field: str = "out") -> None:
    """Add or replace several files in an existing directory, all or none of them: every
    file is written to a temporary first, and only when all are written are they renamed
    into place (each keeps its predecessor's mode). Text is UTF-8. The names must be
    plain file names; a name that exists as anything but a regular file is refused."""
    d = Path(directory)
    for name in files:
        check_file_name(name)
    dst = stat_or_none(d)
    if dst is not None and not stat.S_ISDIR(dst.st_mode):
        raise ConfigError(field, str(directory), f"is a {file_kind(dst.st_mode)}, not a directory")
    ensure_parent(d, field, directory)
    umask = current_umask()
    olds = {}
    for name in files:
        st = stat_or_none(d / name, follow=False)
        if st is not None and not stat.S_ISREG(st.st_mode):
            raise ConfigError(field, str(d / name), f"is a {file_kind(st.st_mode)}; not replacing it")
        olds[name] = st
    tmps: dict[str, str] = {}
    token = register_cleanup(lambda: [unlink_quietly(t) for t in tmps.values()])
    try:
        with signal_guard():
            for name, data in files.items():
                fd, tmps[name] = _mkstemp(d / name, field, directory, False)
                _fill(fd, as_bytes(data), olds[name], umask)
            for name in files:
                os.replace(tmps.pop(name), d / name)
    except BaseException:
        for t in tmps.values():
            unlink_quietly(t)
        raise
    finally:
        unregister_cleanup(token)
