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

Run directories (:func:`write_directory`): the whole directory is replaced at once.
Everything is written into a sibling temporary directory, which is then swapped in
(``renameat2(RENAME_EXCHANGE)`` where the kernel has it, else rename old away, rename
new in); the old directory is then deleted. A failure while writing (disk full, file
size limit, an exception, Ctrl-C, SIGTERM) therefore leaves the previous directory
exactly as it was. See :func:`write_directory` for symlinks, stale and foreign files.

Temporary files and directories are removed on any exception (``KeyboardInterrupt``
included) and on SIGTERM/SIGHUP: while a write is in flight *in the main thread*, a
handler that removes in-flight temporaries and then defers to the previous
disposition is installed, and the previous handler is restored afterwards. Nothing
is installed at import. Only SIGKILL (or a power cut) can leave a ``.NAME.*.tmp``
file or ``.DIR.*.tmpdir``/``.DIR.*.old`` directory behind.
"""
from __future__ import annotations

import errno
import itertools
import os
import shutil
import signal
import stat
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Collection, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from workload_gen.core.errors import ConfigError

FIFO_READER_WAIT_S = 10.0
"""How long a write into a FIFO waits for a reader before it is refused."""

# --------------------------------------------------------------------------------------
# In-flight temporaries and the signal guard
# --------------------------------------------------------------------------------------

_lock = threading.RLock()
_cleanups: dict[int, Callable[[], None]] = {}
_ids = itertools.count()
_guard_depth = 0
_saved_handlers: dict[int, object] = {}
_GUARDED_SIGNALS = tuple(getattr(signal, n) for n in ("SIGTERM", "SIGHUP") if hasattr(signal, n))


def _register(fn: Callable[[], None]) -> int:
    with _lock:
        token = next(_ids)
        _cleanups[token] = fn
        return token


def _unregister(token: int) -> None:
    with _lock:
        _cleanups.pop(token, None)


def _run_cleanups() -> None:
    with _lock:
        fns = list(_cleanups.values())
        _cleanups.clear()
    for fn in reversed(fns):
        try:
            fn()
        except Exception:  # noqa: BLE001, S110 - best effort while the process is dying
            pass


def _on_signal(signum: int, frame: object) -> None:
    prev = _saved_handlers.get(signum, signal.SIG_DFL)
    if callable(prev):
        # The program handles this signal itself (e.g. raises): let it; if it raises,
        # the writers' own ``except BaseException`` removes their temporaries.
        prev(signum, frame)
        return
    # Default disposition: the process is about to die. Clean up, then die the default way.
    _run_cleanups()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)
    os._exit(128 + signum)  # not reached: the default action of SIGTERM/SIGHUP terminates


@contextmanager
def _signal_guard() -> Iterator[None]:
    """While in this block (main thread only, nestable), SIGTERM and SIGHUP remove the
    in-flight temporaries before the previous disposition takes effect."""
    global _guard_depth
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    if _guard_depth == 0:
        _saved_handlers.clear()
        for sig in _GUARDED_SIGNALS:
            prev = signal.getsignal(sig)
            if prev in (signal.SIG_IGN, None):  # ignored, or a handler Python cannot restore
                continue
            _saved_handlers[sig] = prev
            signal.signal(sig, _on_signal)
    _guard_depth += 1
    try:
        yield
    finally:
        _guard_depth -= 1
        if _guard_depth == 0:
            for sig, prev in _saved_handlers.items():
                signal.signal(sig, prev)  # type: ignore[arg-type]
            _saved_handlers.clear()


# --------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------

def _umask() -> int:
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


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "directory"), (stat.S_ISCHR, "character device"),
                       (stat.S_ISBLK, "block device"), (stat.S_ISFIFO, "FIFO"), (stat.S_ISSOCK, "socket"),
                       (stat.S_ISLNK, "symlink"), (stat.S_ISREG, "regular file")):
        if test(mode):
            return name
    return "special file"


def _stat(path: str | os.PathLike[str], follow: bool = True) -> os.stat_result | None:
    try:
        return os.stat(path) if follow else os.lstat(path)
    except FileNotFoundError:
        return None
    except NotADirectoryError:
        return None  # a parent is a file; reported by _ensure_parent
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return None  # a symlink loop; reported by the caller's resolution
        raise


def _ensure_parent(directory: Path, field: str, shown: object) -> None:
    """Make ``directory`` exist; a component that is a file, or a directory we cannot
    create, is a one-line ConfigError naming it."""
    if directory.is_dir():
        return
    for comp in (directory, *directory.parents):
        st = _stat(comp)
        if st is not None:
            if not stat.S_ISDIR(st.st_mode):
                raise ConfigError(field, str(shown), f"its parent {comp} is a {_kind(st.st_mode)}, not a directory")
            break
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(field, str(shown), f"cannot create its directory {directory}: {exc.strerror}") from None


def check_output_path(path: str | os.PathLike[str], field: str = "output") -> None:
    """Refuse, before any long work, an output file path that cannot be written: the path is
    a directory, or a component above it is not one (a missing parent is fine: it is created
    when the file is written). One-line ConfigError naming ``field``."""
    p = Path(path)
    st = _stat(p)
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise ConfigError(field, str(path), "is a directory; give a file path")
    for comp in p.parents:
        st = _stat(comp)
        if st is not None:
            if not stat.S_ISDIR(st.st_mode):
                raise ConfigError(field, str(path), f"its parent {comp} is a {_kind(st.st_mode)}, not a directory")
            break


def _resolve(path: Path, field: str) -> Path:
    """Where a write to ``path`` lands: ``path`` itself, or the end of its symlink chain."""
    if not os.path.islink(path):
        return path
    real = Path(os.path.realpath(path))
    if os.path.islink(real):
        raise ConfigError(field, str(path), "is a symlink loop")
    return real


def _copy_metadata(fd_or_path: int | str, st: os.stat_result | None, default_mode: int) -> None:
    """Give a fresh file/directory the permission bits (and, as root, the owner) of the one it replaces."""
    if st is not None and os.geteuid() == 0 and (st.st_uid, st.st_gid) != (os.geteuid(), os.getegid()):
        try:
            os.chown(fd_or_path, st.st_uid, st.st_gid)
        except OSError:
            pass
    os.chmod(fd_or_path, stat.S_IMODE(st.st_mode) if st is not None else default_mode)  # after chown (clears s-bits)


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


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
    if st is not None and not os.access(target, os.W_OK, effective_ids=os.access in os.supports_effective_ids):
        what = f"is a symlink to {target}, which" if via_link else "is a file that"
        raise ConfigError(field, str(shown), f"{what} is not writable; not replacing it")


def _mkstemp(target: Path, field: str, shown: object, via_link: bool) -> tuple[int, str]:
    try:
        return tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
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
        raise ConfigError(field, str(shown), f"is a {_kind(st.st_mode)} that cannot be opened for "
                          f"writing: {exc.strerror}") from None


def _open_through_proc(path: Path, field: str, shown: object) -> int:
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
    st = _stat(given)  # follows symlinks
    if st is not None and not stat.S_ISREG(st.st_mode):
        if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode) or stat.S_ISFIFO(st.st_mode):
            fd = _open_special(given, st, field, path)
            with os.fdopen(fd, mode, encoding=enc) as fh:
                yield fh
            return
        raise ConfigError(field, str(path), f"is a {_kind(st.st_mode)}, not a file; give a file path")
    via_link = os.path.islink(given)
    target = _resolve(given, field)
    if via_link and _through_proc(given):
        # /dev/stdout, /dev/fd/N on a regular file: an open descriptor, not a name to replace.
        with os.fdopen(_open_through_proc(given, field, path), mode, encoding=enc) as fh:
            yield fh
        return
    _ensure_parent(target.parent, field, path)
    st = _stat(target, follow=False)
    if st is not None and not stat.S_ISREG(st.st_mode):  # appeared meanwhile, or a loop
        raise ConfigError(field, str(path), f"is a {_kind(st.st_mode)}, not a file; give a file path")
    _check_writable(target, st, field, path, via_link)
    tmp: list[str] = []
    token = _register(lambda: [_unlink(t) for t in tmp])
    try:
        with _signal_guard():
            fd, name = _mkstemp(target, field, path, via_link)
            tmp.append(name)
            try:
                _copy_metadata(fd, st, 0o666 & ~_umask())
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
            _unlink(t)
        raise
    finally:
        _unregister(token)


def write_text_atomic(path: str | os.PathLike[str], text: str, field: str = "output") -> None:
    """Write a whole text file atomically (see :func:`atomic_write`)."""
    with atomic_write(path, "w", field=field) as fh:
        fh.write(text)


def _as_bytes(data: str | bytes) -> bytes:
    return data if isinstance(data, bytes) else data.encode("utf-8")


def _write_all(fd: int, data: bytes) -> None:
    """Write every byte of ``data`` to ``fd`` (the one place the directory writers write)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _fill(fd: int, data: bytes, st: os.stat_result | None, umask: int) -> None:
    """Give a fresh file the mode of the one it replaces, write ``data``, close it."""
    try:
        _copy_metadata(fd, st, 0o666 & ~umask)
        _write_all(fd, data)
    finally:
        os.close(fd)


def _write_new_file(path: str, data: bytes, st: os.stat_result | None, umask: int) -> None:
    _fill(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o600), data, st, umask)


def write_files_atomic(directory: str | os.PathLike[str], files: Mapping[str, str | bytes],
                       field: str = "out") -> None:
    """Add or replace several files in an existing directory, all or none of them: every
    file is written to a temporary first, and only when all are written are they renamed
    into place (each keeps its predecessor's mode). Text is UTF-8. The names must be
    plain file names; a name that exists as anything but a regular file is refused."""
    d = Path(directory)
    for name in files:
        _check_name(name)
    dst = _stat(d)
    if dst is not None and not stat.S_ISDIR(dst.st_mode):
        raise ConfigError(field, str(directory), f"is a {_kind(dst.st_mode)}, not a directory")
    _ensure_parent(d, field, directory)
    umask = _umask()
    olds = {}
    for name in files:
        st = _stat(d / name, follow=False)
        if st is not None and not stat.S_ISREG(st.st_mode):
            raise ConfigError(field, str(d / name), f"is a {_kind(st.st_mode)}; not replacing it")
        olds[name] = st
    tmps: dict[str, str] = {}
    token = _register(lambda: [_unlink(t) for t in tmps.values()])
    try:
        with _signal_guard():
            for name, data in files.items():
                fd, tmps[name] = _mkstemp(d / name, field, directory, False)
                _fill(fd, _as_bytes(data), olds[name], umask)
            for name in files:
                os.replace(tmps.pop(name), d / name)
    except BaseException:
        for t in tmps.values():
            _unlink(t)
        raise
    finally:
        _unregister(token)


# --------------------------------------------------------------------------------------
# Whole directories
# --------------------------------------------------------------------------------------

def _check_name(name: str) -> None:
    if not name or name in (".", "..") or "/" in name or "\0" in name or (os.altsep and os.altsep in name):
        raise ValueError(f"not a plain file name: {name!r}")


def _is_our_temp(name: str, owned: Collection[str]) -> bool:
    """A temporary left by these writers inside a run directory."""
    if name.startswith(".trainsim-") and name.endswith(".tmpdir"):
        return True
    return name.endswith(".tmp") and any(name.startswith(f".{o}.") for o in owned)


_RENAME_EXCHANGE = 2
_renameat2_fn: object = None


def _exchange(a: str, b: str) -> bool:
    """Atomically swap two paths (Linux renameat2 RENAME_EXCHANGE); False where unsupported."""
    global _renameat2_fn
    if not sys.platform.startswith("linux"):
        return False
    import ctypes  # here, not at module level: ctypes costs every command start, few write directories

    if _renameat2_fn is None:
        try:
            fn = ctypes.CDLL(None, use_errno=True).renameat2
            fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
            fn.restype = ctypes.c_int
            _renameat2_fn = fn
        except (OSError, AttributeError):
            _renameat2_fn = False
    if _renameat2_fn is False:
        return False
    at_fdcwd = -100
    if _renameat2_fn(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), _RENAME_EXCHANGE) == 0:  # type: ignore[operator]
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP):
        return False
    raise OSError(err, os.strerror(err), b)


def _can_swap(target: Path) -> bool:
    """Whether ``target`` (an existing directory) can be renamed away and back."""
    if os.path.ismount(target):
        return False
    try:
        cwd = os.path.realpath(os.getcwd())
    except OSError:
        cwd = ""
    t = os.path.realpath(target)
    if cwd == t or cwd.startswith(t.rstrip(os.sep) + os.sep):
        return False  # renaming the process's own working directory away would strand it
    if not os.access(target.parent, os.W_OK | os.X_OK):
        return False
    try:
        with os.scandir(target) as it:
            return not any(e.is_dir(follow_symlinks=False) and os.path.ismount(e.path) for e in it)
    except OSError:
        return False


def _settle(old: str, target: str, owned: Collection[str]) -> list[str]:
    """Move every foreign entry of ``old`` into ``target``, delete ours, remove ``old``.
    Returns the foreign entries that could not be moved (``old`` is then kept)."""
    kept: list[str] = []
    for _ in range(3):  # again if something was created in old meanwhile
        kept = []
        try:
            entries = list(os.scandir(old))
        except FileNotFoundError:
            return []
        for e in entries:
            if e.name in owned or _is_our_temp(e.name, owned):
                if e.is_dir(follow_symlinks=False):
                    shutil.rmtree(e.path, ignore_errors=True)
                else:
                    _unlink(e.path)
                continue
            dest = os.path.join(target, e.name)
            if os.path.lexists(dest):
                kept.append(e.name)
                continue
            try:
                os.rename(e.path, dest)
            except OSError:
                kept.append(e.name)
        if kept:
            return kept
        try:
            os.rmdir(old)
            return []
        except FileNotFoundError:
            return []
        except OSError as exc:
            if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                return []  # cannot remove it; it holds nothing of the user's
    return kept


class _Swap:
    """State of one directory replacement, and the cleanup that is right at any point of it
    (on an exception, a signal, or as the last step of a successful swap)."""

    def __init__(self, target: Path, owned: Collection[str]) -> None:
        self.target = str(target)
        self.owned = owned
        self.new: str | None = None  # the sibling temp directory being filled
        self.old: str | None = None  # where the previous directory went (or its placeholder)
        self.kept_in: str | None = None

    def cleanup(self) -> list[str]:
        """Roll back if the previous directory is away and nothing replaced it; otherwise
        settle whatever temp or previous directory is left into the target. Returns the
        foreign entries that could not be moved over (their directory is then kept, in
        ``kept_in``)."""
        if self.old and os.path.isdir(self.old) and not os.path.lexists(self.target):
            os.rename(self.old, self.target)  # roll back: the previous directory, whole
            self.old = None
        kept: list[str] = []
        for d in (self.new, self.old):
            if not d or not os.path.isdir(d) or os.path.islink(d):
                continue
            if os.path.isdir(self.target):
                # Deletes our files, moves any foreign entry over (only a previous directory
                # has them), removes ``d``. Never an rmtree of something not ours.
                k = _settle(d, self.target, self.owned)
                if k:
                    kept += k
                    self.kept_in = d
            elif d == self.new:  # nothing was swapped: the temp directory holds only our files
                shutil.rmtree(d, ignore_errors=True)
        self.new = self.old = None
        return kept


def write_directory(out: str | os.PathLike[str], files: Mapping[str, str | bytes],
                    owned: Collection[str], field: str = "out") -> None:
    """Replace the run directory ``out`` as a whole with ``files`` (name -> text or bytes).

    * The files are written into a sibling temporary directory ``.NAME.XXXX.tmpdir``,
      which is then swapped in for ``out`` and the previous directory deleted; if
      anything fails before the swap, ``out`` is left exactly as it was and the
      temporary directory is removed. The new directory keeps the old one's mode (and
      owner, as root) and each file the mode of the file it replaces.
    * ``owned`` lists every name this program ever writes into such a directory. Those
      names not in ``files`` disappear with the old directory (stale outputs of another
      backend or option). Any other entry (a user's notes, a subdirectory) is not
      ours: it is moved over into the new directory, untouched.
    * An entry with an owned name that is not a regular file (a symlink, FIFO, device,
      directory) is refused up front with a ConfigError: it is not ours to replace.
    * ``out`` a symlink to a directory: the link is kept and the directory it points
      to is replaced the same way (a new directory at the target's path). A dangling
      link creates its target. ``out`` existing as anything but a directory is a
      ConfigError. A missing parent is created.
    * Where the directory cannot be renamed (a mount point, the current working
      directory or one of its ancestors, an unwritable parent, a mount inside it), the
      files are staged in ``out/.trainsim-XXXX.tmpdir`` instead and, once all are
      written, renamed into place one by one; stale owned files are then removed. A
      failure while writing still leaves the previous contents whole.
    """
    given = Path(out)
    for name in files:
        _check_name(name)
        if name not in owned:
            raise ValueError(f"write_directory: {name!r} is not in the owned names")
    st = _stat(given)
    if st is not None and not stat.S_ISDIR(st.st_mode):
        raise ConfigError(field, str(out), f"exists and is not a directory (a {_kind(st.st_mode)})")
    target = Path(os.path.abspath(_resolve(given, field)))
    _ensure_parent(target.parent, field, out)
    st = _stat(target, follow=False)
    if st is not None and not stat.S_ISDIR(st.st_mode):
        raise ConfigError(field, str(out), f"exists and is not a directory (a {_kind(st.st_mode)})")
    olds: dict[str, os.stat_result | None] = {}
    for name in owned:
        est = _stat(target / name, follow=False) if st is not None else None
        if est is not None and not stat.S_ISREG(est.st_mode):
            raise ConfigError(field, str(given / name), f"is a {_kind(est.st_mode)}, not a file written by this "
                              "program; not replacing it (remove it or choose another directory)")
        olds[name] = est
    umask = _umask()
    data = {name: _as_bytes(v) for name, v in files.items()}
    if st is not None and not _can_swap(target):
        _replace_in_place(target, data, olds, owned, umask, field, out)
        return
    swap = _Swap(target, owned)
    token = _register(swap.cleanup)
    try:
        with _signal_guard():
            try:
                swap.new = tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmpdir", dir=target.parent)
            except OSError as exc:
                raise ConfigError(field, str(out), f"cannot create a directory in {target.parent}: "
                                  f"{exc.strerror}") from None
            _copy_metadata(swap.new, st, 0o777 & ~umask)
            for name, blob in data.items():
                _write_new_file(os.path.join(swap.new, name), blob, olds.get(name), umask)
            if st is None:
                os.rename(swap.new, target)
                swap.new = None
            elif _exchange(swap.new, str(target)):
                swap.old, swap.new = swap.new, None
            else:
                swap.old = tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".old", dir=target.parent)
                os.rename(target, swap.old)  # over the empty placeholder
                os.rename(swap.new, target)
                swap.new = None
            kept = swap.cleanup()
    except BaseException:
        swap.cleanup()
        raise
    finally:
        _unregister(token)
    if kept:
        raise ConfigError(field, str(out), f"new outputs written, but {', '.join(sorted(kept))} could not be "
                          f"moved over from the previous directory; they are kept in {swap.kept_in}")


def _replace_in_place(target: Path, data: Mapping[str, bytes], olds: Mapping[str, os.stat_result | None],
                      owned: Collection[str], umask: int, field: str, out: object) -> None:
    stage: list[str] = []
    token = _register(lambda: [shutil.rmtree(s, ignore_errors=True) for s in stage])
    try:
        with _signal_guard():
            try:
                stage.append(tempfile.mkdtemp(prefix=".trainsim-", suffix=".tmpdir", dir=target))
            except OSError as exc:
                raise ConfigError(field, str(out), f"cannot write into it: {exc.strerror}") from None
            for name, blob in data.items():
                _write_new_file(os.path.join(stage[0], name), blob, olds.get(name), umask)
            for name in data:
                os.replace(os.path.join(stage[0], name), target / name)
            for name in owned:
                if name not in data:
                    _unlink(str(target / name))
            os.rmdir(stage.pop())
    except BaseException:
        for s in stage:
            shutil.rmtree(s, ignore_errors=True)
        raise
    finally:
        _unregister(token)
