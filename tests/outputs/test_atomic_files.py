"""formats.atomic on single files: regular files are replaced atomically (keeping their
mode), devices and FIFOs are written into, symlinks are followed, bad parents are one
line, and no temporary survives an exception, Ctrl-C or SIGTERM."""
from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from formats import atomic
from formats.atomic import atomic_write, write_files_atomic, write_text_atomic
from workload_gen.core.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]


def _umask() -> int:
    m = os.umask(0)
    os.umask(m)
    return m


def _leftovers(d: Path) -> list[str]:
    return sorted(p.name for p in d.iterdir() if p.name.endswith((".tmp", ".tmpdir", ".old")))


def _one_line(exc: BaseException) -> str:
    msg = str(exc)
    assert "\n" not in msg
    return msg


def test_new_file_gets_the_usual_mode_and_no_temp_is_left(tmp_path):
    write_text_atomic(tmp_path / "a.txt", "hello\n")
    assert (tmp_path / "a.txt").read_text() == "hello\n"
    assert stat.S_IMODE((tmp_path / "a.txt").stat().st_mode) == 0o666 & ~_umask()
    assert _leftovers(tmp_path) == []


def test_existing_file_keeps_its_mode(tmp_path):
    p = tmp_path / "secret.txt"
    p.write_text("old")
    os.chmod(p, 0o600)
    ino = p.stat().st_ino
    write_text_atomic(p, "new")
    assert p.read_text() == "new"
    assert stat.S_IMODE(p.stat().st_mode) == 0o600
    assert p.stat().st_ino != ino  # replaced by rename, not rewritten in place
    with atomic_write(p, "wb") as fh:
        fh.write(b"\x00bin")
    assert p.read_bytes() == b"\x00bin" and stat.S_IMODE(p.stat().st_mode) == 0o600


def _null_twin(tmp_path: Path) -> Path:
    """A /dev/null twin (as root), else the real /dev/null (harmless to write into, and a
    non-root process could not replace it anyway)."""
    if os.geteuid() == 0:
        p = tmp_path / "null"
        os.mknod(p, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        return p
    return Path("/dev/null")


@pytest.mark.parametrize("mode", ["w", "wb"])
def test_character_device_is_written_into_not_replaced(tmp_path, mode):
    dev = _null_twin(tmp_path)
    before = os.stat(dev)
    with atomic_write(dev, mode) as fh:
        fh.write("x" * 10000 if mode == "w" else b"x" * 10000)
    write_text_atomic(dev, "again")
    after = os.stat(dev)
    assert stat.S_ISCHR(after.st_mode) and after.st_rdev == before.st_rdev and after.st_ino == before.st_ino
    assert stat.S_IMODE(after.st_mode) == stat.S_IMODE(before.st_mode)
    if dev.parent == tmp_path:
        assert _leftovers(tmp_path) == []


def test_unopenable_device_or_readerless_fifo_is_refused_and_survives(tmp_path, monkeypatch):
    monkeypatch.setattr(atomic, "FIFO_READER_WAIT_S", 0.2)
    if os.geteuid() == 0:  # a block device number reserved for local use: nothing behind it
        node = tmp_path / "blk"
        os.mknod(node, 0o600 | stat.S_IFBLK, os.makedev(240, 123))
        test = stat.S_ISBLK
    else:
        node = tmp_path / "fifo"
        os.mkfifo(node)
        test = stat.S_ISFIFO
    with pytest.raises(ConfigError) as ei:
        write_text_atomic(node, "data")
    assert str(node) in _one_line(ei.value)
    assert test(os.lstat(node).st_mode)
    assert _leftovers(tmp_path) == []


def test_fifo_is_written_into_for_its_reader(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    got: list[bytes] = []

    def reader() -> None:
        with open(fifo, "rb") as fh:
            got.append(fh.read())

    t = threading.Thread(target=reader)
    t.start()
    payload = "line\n" * 50000  # more than a pipe buffer: the writer must block, not fail
    write_text_atomic(fifo, payload)
    t.join(10)
    assert not t.is_alive()
    assert got == [payload.encode()]
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert _leftovers(tmp_path) == []


def test_fifo_without_a_reader_is_refused_without_hanging(tmp_path, monkeypatch):
    monkeypatch.setattr(atomic, "FIFO_READER_WAIT_S", 0.2)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(ConfigError) as ei:
        write_text_atomic(fifo, "data")
    msg = _one_line(ei.value)
    assert "FIFO" in msg and str(fifo) in msg
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_symlink_is_followed_and_kept(tmp_path):
    target = tmp_path / "real.txt"
    target.write_text("old")
    os.chmod(target, 0o640)
    link = tmp_path / "link.txt"
    link.symlink_to("real.txt")
    write_text_atomic(link, "new")
    assert link.is_symlink() and os.readlink(link) == "real.txt"
    assert target.read_text() == "new"
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    assert _leftovers(tmp_path) == []


def test_symlink_chain_to_a_device_writes_into_the_device(tmp_path):
    dev = _null_twin(tmp_path)
    link = tmp_path / "out"
    link.symlink_to(dev)
    write_text_atomic(link, "data")
    assert link.is_symlink() and stat.S_ISCHR(os.stat(dev).st_mode)


def test_dangling_symlink_creates_its_target(tmp_path):
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "sub" / "made.txt")
    write_text_atomic(link, "x")
    assert link.is_symlink() and (tmp_path / "sub" / "made.txt").read_text() == "x"


def test_symlink_loop_is_one_line(tmp_path):
    (tmp_path / "a").symlink_to("b")
    (tmp_path / "b").symlink_to("a")
    with pytest.raises(ConfigError) as ei:
        write_text_atomic(tmp_path / "a", "x")
    assert "loop" in _one_line(ei.value)
    assert (tmp_path / "a").is_symlink() and (tmp_path / "b").is_symlink()


def test_symlink_to_an_unwritable_target_is_refused(tmp_path, monkeypatch):
    target = tmp_path / "ro.txt"
    target.write_text("keep")
    os.chmod(target, 0o444)
    link = tmp_path / "link"
    link.symlink_to(target)
    if os.geteuid() == 0:  # root may write anything: make access() say what it says to a user
        real_access = os.access
        monkeypatch.setattr(os, "access", lambda p, m, **kw: False if Path(p) == target and m & os.W_OK
                            else real_access(p, m, **kw))
    with pytest.raises(ConfigError) as ei:
        write_text_atomic(link, "new")
    msg = _one_line(ei.value)
    assert "symlink" in msg and "not writable" in msg and str(link) in msg
    assert target.read_text() == "keep" and link.is_symlink()
    assert _leftovers(tmp_path) == []


def test_symlink_into_a_path_through_a_file_is_refused(tmp_path):
    (tmp_path / "file").write_text("x")
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "file" / "out.txt")
    with pytest.raises(ConfigError) as ei:
        write_text_atomic(link, "new")
    assert "not a directory" in _one_line(ei.value)
    assert (tmp_path / "file").read_text() == "x"


def test_link_through_proc_is_written_into_not_renamed_over(tmp_path):
    """A link to /proc/self/fd/N (what /dev/stdout is) names an open file: write into it."""
    out = tmp_path / "captured.txt"
    code = textwrap.dedent(f"""
        import os, sys
        from formats.atomic import write_text_atomic
        os.symlink("/proc/self/fd/1", {str(tmp_path / 'mystdout')!r})
        sys.stdout.write("before\\n"); sys.stdout.flush()
        write_text_atomic({str(tmp_path / 'mystdout')!r}, "written\\n")
    """)
    with out.open("w") as fh:
        ino = os.fstat(fh.fileno()).st_ino
        subprocess.run([sys.executable, "-c", code], stdout=fh, check=True, cwd=ROOT)
    assert out.read_text() == "before\nwritten\n"
    assert out.stat().st_ino == ino
    assert (tmp_path / "mystdout").is_symlink()


def test_parent_is_a_file_is_one_line(tmp_path):
    f = tmp_path / "file"
    f.write_text("x")
    for path in (f / "out.txt", f / "deeper" / "out.txt"):
        with pytest.raises(ConfigError) as ei:
            write_text_atomic(path, "new")
        msg = _one_line(ei.value)
        assert str(path) in msg and "not a directory" in msg
    assert f.read_text() == "x"


def test_missing_parents_are_created(tmp_path):
    write_text_atomic(tmp_path / "a" / "b" / "c.txt", "x")
    assert (tmp_path / "a" / "b" / "c.txt").read_text() == "x"


def test_a_directory_named_as_output_is_refused(tmp_path):
    (tmp_path / "d").mkdir()
    with pytest.raises(ConfigError) as ei:
        write_text_atomic(tmp_path / "d", "x")
    assert "directory" in _one_line(ei.value)
    assert (tmp_path / "d").is_dir()


@pytest.mark.parametrize("exc", [RuntimeError("boom"), KeyboardInterrupt()])
def test_exception_or_ctrl_c_leaves_the_old_file_and_no_temp(tmp_path, exc):
    p = tmp_path / "a.txt"
    p.write_text("old")
    with pytest.raises(type(exc)), atomic_write(p) as fh:
        fh.write("half")
        raise exc
    assert p.read_text() == "old"
    assert _leftovers(tmp_path) == []


def test_a_write_that_fails_part_way_leaves_the_old_file(tmp_path):
    """A real failing write: the file-size limit (EFBIG) in a child process."""
    p = tmp_path / "a.txt"
    p.write_text("old")
    os.chmod(p, 0o600)
    code = textwrap.dedent(f"""
        import errno, resource, signal, sys
        from formats.atomic import write_text_atomic
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
        try:
            write_text_atomic({str(p)!r}, "x" * 100000)
        except OSError as e:
            sys.exit(3 if e.errno == errno.EFBIG else 4)
    """)
    r = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 3, r.stderr
    assert p.read_text() == "old" and stat.S_IMODE(p.stat().st_mode) == 0o600
    assert _leftovers(tmp_path) == []


def test_write_files_atomic_writes_all_or_none(tmp_path, monkeypatch):
    import errno

    (tmp_path / "fct.csv").write_text("old fct")
    (tmp_path / "links.csv").write_text("old links")
    os.chmod(tmp_path / "links.csv", 0o600)
    calls = []
    real = atomic._write_all

    def failing(fd, data):
        calls.append(1)
        if len(calls) == 2:
            os.write(fd, data[:3])
            raise OSError(errno.ENOSPC, "No space left on device")
        real(fd, data)

    monkeypatch.setattr(atomic, "_write_all", failing)
    with pytest.raises(OSError):
        write_files_atomic(tmp_path, {"fct.csv": "new fct", "links.csv": "new links"})
    assert (tmp_path / "fct.csv").read_text() == "old fct" and (tmp_path / "links.csv").read_text() == "old links"
    assert _leftovers(tmp_path) == [] and sorted(p.name for p in tmp_path.iterdir()) == ["fct.csv", "links.csv"]
    monkeypatch.setattr(atomic, "_write_all", real)
    write_files_atomic(tmp_path, {"fct.csv": "new fct", "links.csv": "new links"})
    assert (tmp_path / "links.csv").read_text() == "new links"
    assert stat.S_IMODE((tmp_path / "links.csv").stat().st_mode) == 0o600


def test_no_signal_handler_is_installed_at_import_and_the_old_one_is_restored(tmp_path):
    # compared with what the process inherited, not with SIG_DFL: under nohup SIGHUP starts ignored
    code = ("import signal; before = (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGHUP)); "
            "import formats.atomic, engine.commands.run; "
            "print(signal.getsignal(signal.SIGTERM) == before[0], signal.getsignal(signal.SIGHUP) == before[1])")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True)
    assert r.stdout.split() == ["True", "True"]
    before = signal.getsignal(signal.SIGTERM)
    seen = []
    with atomic_write(tmp_path / "a.txt") as fh:
        seen.append(signal.getsignal(signal.SIGTERM))
        fh.write("x")
    assert signal.getsignal(signal.SIGTERM) is before
    assert seen[0] is not before  # guarded while writing


def test_sigterm_with_a_program_handler_still_removes_the_temp(tmp_path):
    class Terminated(Exception):
        pass

    def handler(signum, frame):
        raise Terminated

    p = tmp_path / "a.txt"
    p.write_text("old")
    prev = signal.signal(signal.SIGTERM, handler)
    try:
        with pytest.raises(Terminated), atomic_write(p) as fh:
            fh.write("half")
            os.kill(os.getpid(), signal.SIGTERM)
            fh.write("never")
        assert signal.getsignal(signal.SIGTERM) is handler
    finally:
        signal.signal(signal.SIGTERM, prev)
    assert p.read_text() == "old" and _leftovers(tmp_path) == []


def _sigterm_child(tmp_path: Path, body: str) -> subprocess.CompletedProcess:
    """Run ``body`` in a child that prints READY mid-write; SIGTERM it then."""
    code = textwrap.dedent(body)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=ROOT)
    try:
        line = proc.stdout.readline()
        assert line.strip() == "READY", (line, proc.stderr.read() if proc.poll() is not None else "")
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def test_sigterm_mid_write_removes_the_temp_and_keeps_the_old_file(tmp_path):
    p = tmp_path / "a.txt"
    p.write_text("old")
    r = _sigterm_child(tmp_path, f"""
        import sys, time
        from formats.atomic import atomic_write
        with atomic_write({str(p)!r}) as fh:
            fh.write("half")
            print("READY", flush=True)
            time.sleep(30)
    """)
    assert r.returncode == -signal.SIGTERM, r.stderr
    assert p.read_text() == "old"
    assert _leftovers(tmp_path) == []


def test_check_output_path_refuses_before_any_work_and_creates_nothing(tmp_path):
    """An output path is checked up front (formats.output_paths): a directory, or a parent
    that runs into a file, is one ConfigError naming the option; a missing parent is fine
    and is not created until a file is written."""
    from formats.output_paths import check_output_path

    with pytest.raises(ConfigError) as ei:
        check_output_path(tmp_path, "report")
    assert ei.value.field == "report" and "is a directory" in ei.value.valid
    (tmp_path / "f").write_text("x")
    with pytest.raises(ConfigError) as ei:
        check_output_path(tmp_path / "f" / "sub" / "out.csv", "table")
    assert ei.value.field == "table" and f"its parent {tmp_path / 'f'} is a regular file" in ei.value.valid
    check_output_path(tmp_path / "new" / "deeper" / "out.csv")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f"]
