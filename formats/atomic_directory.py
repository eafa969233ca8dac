"""A run directory replaced as a whole: a failed or interrupted write leaves the previous one.

:func:`write_directory` replaces the whole directory at once. Everything is written into a
sibling temporary directory, which is then swapped in (``renameat2(RENAME_EXCHANGE)`` where
the kernel has it, else rename old away, rename new in); the old directory is then deleted.
A failure while writing (disk full, file size limit, an exception, Ctrl-C, SIGTERM)
therefore leaves the previous directory exactly as it was. See :func:`write_directory` for
symlinks, stale and foreign files.

WHY a module apart from :mod:`formats.atomic`: swapping a directory has its own machinery
(the exchange, the fallback when the directory cannot be renamed, settling foreign entries
of the previous directory) that single-file writes never need. Files are written with
:func:`formats.atomic.write_new_file`; temporaries are removed by :mod:`formats.write_guard`
on any exception and on SIGTERM/SIGHUP, so only SIGKILL can leave a ``.DIR.*.tmpdir`` or
``.DIR.*.old`` directory behind.
"""
from __future__ import annotations

import errno
import functools
import os
import shutil
import stat
import sys
import tempfile
from collections.abc import Callable, Collection, Mapping
from pathlib import Path

from formats.atomic import as_bytes, write_new_file
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


def _is_our_temp(name: str, owned: Collection[str]) -> bool:
    """A temporary left by these writers inside a run directory."""
    if name.startswith(".trainsim-") and name.endswith(".tmpdir"):
        return True
    return name.endswith(".tmp") and any(name.startswith(f".{o}.") for o in owned)


_RENAME_EXCHANGE = 2  # Linux include/uapi/linux/fs.h: #define RENAME_EXCHANGE (1 << 1)


@functools.cache
def _renameat2() -> Callable[..., int] | None:
    """libc's renameat2, loaded on first use; None where libc has none."""
    import ctypes  # here, not at module level: ctypes costs every command start, few write directories

    try:
        fn = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn


def _exchange(a: str, b: str) -> bool:
    """Atomically swap two paths (Linux renameat2 RENAME_EXCHANGE); False where unsupported."""
    if not sys.platform.startswith("linux"):
        return False
    fn = _renameat2()
    if fn is None:
        return False
    at_fdcwd = -100  # Linux include/uapi/linux/fcntl.h: #define AT_FDCWD -100 (paths relative to the cwd)
    if fn(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    import ctypes

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
                    unlink_quietly(e.path)
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
        check_file_name(name)
        if name not in owned:
            raise ValueError(f"write_directory: {name!r} is not in the owned names")
    st = stat_or_none(given)
    if st is not None and not stat.S_ISDIR(st.st_mode):
        raise ConfigError(field, str(out), f"exists and is not a directory (a {file_kind(st.st_mode)})")
    target = Path(os.path.abspath(resolve_link(given, field)))
    ensure_parent(target.parent, field, out)
    st = stat_or_none(target, follow=False)
    if st is not None and not stat.S_ISDIR(st.st_mode):
        raise ConfigError(field, str(out), f"exists and is not a directory (a {file_kind(st.st_mode)})")
    olds: dict[str, os.stat_result | None] = {}
    for name in owned:
        est = stat_or_none(target / name, follow=False) if st is not None else None
        if est is not None and not stat.S_ISREG(est.st_mode):
            raise ConfigError(field, str(given / name), f"is a {file_kind(est.st_mode)}, not a file written by this "
                              "program; not replacing it (remove it or choose another directory)")
        olds[name] = est
    umask = current_umask()
    data = {name: as_bytes(v) for name, v in files.items()}
    if st is not None and not _can_swap(target):
        _replace_in_place(target, data, olds, owned, umask, field, out)
        return
    swap = _Swap(target, owned)
    token = register_cleanup(swap.cleanup)
    try:
        with signal_guard():
            try:
                swap.new = tempfile.mkdtemp(prefix=f".{target.name[:64]}.", suffix=".tmpdir", dir=target.parent)
            except OSError as exc:
                raise ConfigError(field, str(out), f"cannot create a directory in {target.parent}: "
                                  f"{exc.strerror}") from None
            copy_metadata(swap.new, st, 0o777 & ~umask)
            for name, blob in data.items():
                write_new_file(os.path.join(swap.new, name), blob, olds.get(name), umask)
            if st is None:
                os.rename(swap.new, target)
                swap.new = None
            elif _exchange(swap.new, str(target)):
                swap.old, swap.new = swap.new, None
            else:
                swap.old = tempfile.mkdtemp(prefix=f".{target.name[:64]}.", suffix=".old", dir=target.parent)
                os.rename(target, swap.old)  # over the empty placeholder
                os.rename(swap.new, target)
                swap.new = None
            kept = swap.cleanup()
    except BaseException:
        swap.cleanup()
        raise
    finally:
        unregister_cleanup(token)
    if kept:
        raise ConfigError(field, str(out), f"new outputs written, but {', '.join(sorted(kept))} could not be "
                          f"moved over from the previous directory; they are kept in {swap.kept_in}")


def _replace_in_place(target: Path, data: Mapping[str, bytes], olds: Mapping[str, os.stat_result | None],
                      owned: Collection[str], umask: int, field: str, out: object) -> None:
    stage: list[str] = []
    token = register_cleanup(lambda: [shutil.rmtree(s, ignore_errors=True) for s in stage])
    try:
        with signal_guard():
            try:
                stage.append(tempfile.mkdtemp(prefix=".trainsim-", suffix=".tmpdir", dir=target))
            except OSError as exc:
                raise ConfigError(field, str(out), f"cannot write into it: {exc.strerror}") from None
            for name, blob in data.items():
                write_new_file(os.path.join(stage[0], name), blob, olds.get(name), umask)
            for name in data:
                os.replace(os.path.join(stage[0], name), target / name)
            for name in owned:
                if name not in data:
                    unlink_quietly(str(target / name))
            os.rmdir(stage.pop())
    except BaseException:
        for s in stage:
            shutil.rmtree(s, ignore_errors=True)
        raise
    finally:
        unregister_cleanup(token)
