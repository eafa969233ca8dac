"""A run directory is replaced as a whole: a failure part-way leaves the previous run
intact, stale outputs of another backend go, the user's own files stay, and nothing
temporary is left behind (engine.commands.run.write_outputs over formats.atomic_directory.write_directory)."""
from __future__ import annotations

import errno
import os
import signal
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from engine.commands.run import OUTPUT_FILES, analytical_main, known_output_files, write_outputs
from formats import atomic, atomic_directory
from workload_gen.core.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
SMALL = ["--model", "gpt3-125m", "--num-layers", "2", "--world-size", "4", "--tp", "2", "--global-batch", "4",
         "--micro-batch", "1", "--seq-length", "256", "--system", "h100", "--no-plot"]

NEW = {"summary.json": "{\"run\": 2}\n", "layers.csv": "layer\n2\n", "trace.json": "[2]\n",
       "EndToEnd.csv": "e2e,2\n", "run.png": b"\x89PNG2"}


def _snapshot(d: Path) -> dict[str, object]:
    """Every entry under ``d``: content, mode and kind (so 'intact' means intact)."""
    snap: dict[str, object] = {"": stat.S_IMODE(d.stat().st_mode)}
    for p in sorted(d.rglob("*")):
        st = p.lstat()
        rel = str(p.relative_to(d))
        snap[rel] = (stat.S_IFMT(st.st_mode), stat.S_IMODE(st.st_mode),
                     p.read_bytes() if stat.S_ISREG(st.st_mode) else None)
    return snap


def _temps(parent: Path) -> list[str]:
    found = []
    for p in parent.rglob("*"):
        if p.name.endswith((".tmp", ".tmpdir", ".old")) or p.name.startswith(".trainsim-"):
            found.append(str(p.relative_to(parent)))
    return sorted(found)


@pytest.fixture
def old_run(tmp_path: Path) -> Path:
    """A previous run-ns3 directory (with fct.csv, links.csv), a user's notes and subfolder."""
    out = tmp_path / "run"
    write_outputs(out, {"summary.json": "{\"run\": 1}\n", "layers.csv": "layer\n1\n", "trace.json": "[1]\n",
                        "EndToEnd.csv": "e2e,1\n"})
    atomic.write_files_atomic(out, {"fct.csv": "flow\n1\n", "links.csv": "src\n1\n"})
    (out / "notes.txt").write_text("my notes")
    (out / "analysis").mkdir()
    (out / "analysis" / "plot.py").write_text("print(1)")
    os.chmod(out / "summary.json", 0o600)
    return out


def test_every_backend_file_is_a_known_output():
    assert set(OUTPUT_FILES) <= set(known_output_files())
    assert {"fct.csv", "links.csv"} <= set(known_output_files())
    from network.ns3.kind import NS3
    from network.ns3.outputs import NS3_OUTPUT_FILES

    assert NS3.output_files == NS3_OUTPUT_FILES
    src = (ROOT / "network" / "ns3" / "outputs.py").read_text()
    assert 'NS3_OUTPUT_FILES = ("fct.csv", "links.csv")' in src


def test_rerun_replaces_ours_removes_stale_backend_files_and_keeps_the_users(old_run, tmp_path):
    write_outputs(old_run, NEW)
    names = sorted(p.name for p in old_run.iterdir())
    assert names == sorted([*NEW, "notes.txt", "analysis"])  # fct.csv, links.csv of the ns-3 run: gone
    assert (old_run / "notes.txt").read_text() == "my notes"
    assert (old_run / "analysis" / "plot.py").read_text() == "print(1)"
    assert (old_run / "summary.json").read_text() == NEW["summary.json"]
    assert (old_run / "run.png").read_bytes() == NEW["run.png"]
    assert stat.S_IMODE((old_run / "summary.json").stat().st_mode) == 0o600  # kept
    assert _temps(tmp_path) == []


def test_new_directory_mode_and_parents(tmp_path):
    out = tmp_path / "a" / "b" / "run"
    write_outputs(out, NEW)
    mask = os.umask(0)
    os.umask(mask)
    assert stat.S_IMODE(out.stat().st_mode) == 0o777 & ~mask
    assert stat.S_IMODE((out / "layers.csv").stat().st_mode) == 0o666 & ~mask
    assert _temps(tmp_path) == []


def test_directory_mode_is_kept(old_run, tmp_path):
    os.chmod(old_run, 0o700)
    write_outputs(old_run, NEW)
    assert stat.S_IMODE(old_run.stat().st_mode) == 0o700


@pytest.mark.parametrize("fail_at", [1, 3, 5])
def test_disk_full_part_way_leaves_the_previous_run_whole(old_run, tmp_path, monkeypatch, fail_at):
    before = _snapshot(old_run)
    calls = []
    real = atomic._write_all

    def disk_full(fd, data):
        calls.append(1)
        if len(calls) == fail_at:
            os.write(fd, data[: len(data) // 2])
            raise OSError(errno.ENOSPC, "No space left on device")
        real(fd, data)

    monkeypatch.setattr(atomic, "_write_all", disk_full)
    with pytest.raises(OSError) as ei:
        write_outputs(old_run, NEW)
    assert ei.value.errno == errno.ENOSPC
    assert _snapshot(old_run) == before
    assert _temps(tmp_path) == []


def test_failed_swap_rolls_back_without_exchange(old_run, tmp_path, monkeypatch):
    """Where renameat2(RENAME_EXCHANGE) is missing: old renamed away, new renamed in; if
    the second rename fails, the old directory comes back."""
    monkeypatch.setattr(atomic_directory, "_exchange", lambda a, b: False)
    before = _snapshot(old_run)
    real_rename = os.rename

    def rename(src, dst, *a, **kw):
        if str(src).endswith(".tmpdir") and str(dst) == str(old_run):
            raise OSError(errno.EIO, "I/O error")
        return real_rename(src, dst, *a, **kw)

    monkeypatch.setattr(os, "rename", rename)
    with pytest.raises(OSError):
        write_outputs(old_run, NEW)
    monkeypatch.setattr(os, "rename", real_rename)
    assert _snapshot(old_run) == before
    assert _temps(tmp_path) == []
    write_outputs(old_run, NEW)  # and the fallback path works
    assert sorted(p.name for p in old_run.iterdir()) == sorted([*NEW, "notes.txt", "analysis"])
    assert _temps(tmp_path) == []


def test_file_size_limit_in_a_real_process_leaves_the_previous_run_whole(old_run, tmp_path):
    before = _snapshot(old_run)
    code = textwrap.dedent(f"""
        import errno, resource, signal, sys
        from engine.commands.run import write_outputs
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of a kill
        resource.setrlimit(resource.RLIMIT_FSIZE, (65536, 65536))
        try:
            write_outputs({str(old_run)!r}, {{"summary.json": "{{}}", "trace.json": "x" * 1000000}})
        except OSError as e:
            sys.exit(3 if e.errno == errno.EFBIG else 4)
    """)
    r = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 3, r.stderr
    assert _snapshot(old_run) == before
    assert _temps(tmp_path) == []


def test_sigterm_while_writing_leaves_the_previous_run_and_no_temp(old_run, tmp_path):
    before = _snapshot(old_run)
    code = textwrap.dedent(f"""
        import time
        from formats import atomic
        from engine.commands.run import write_outputs
        real = atomic._write_all
        n = []
        def slow(fd, data):
            n.append(1)
            if len(n) == 3:
                print("READY", flush=True)
                time.sleep(30)
            real(fd, data)
        atomic._write_all = slow
        write_outputs({str(old_run)!r}, {NEW!r})
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=ROOT)
    try:
        assert proc.stdout.readline().strip() == "READY"
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == -signal.SIGTERM, proc.stderr.read()
    assert _snapshot(old_run) == before
    assert _temps(tmp_path) == []


@pytest.mark.parametrize("kind", ["file", "fifo", "device"])
def test_out_that_is_not_a_directory_is_one_line_and_untouched(tmp_path, kind):
    out = tmp_path / "out"
    if kind == "file":
        out.write_text("x")
    elif kind == "fifo":
        os.mkfifo(out)
    elif os.geteuid() == 0:
        os.mknod(out, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    else:
        out = Path("/dev/null")
    mode = os.lstat(out).st_mode
    with pytest.raises(ConfigError) as ei:
        write_outputs(out, NEW)
    msg = str(ei.value)
    assert "\n" not in msg and "not a directory" in msg and str(out) in msg
    assert os.lstat(out).st_mode == mode
    if kind == "file":
        assert out.read_text() == "x"


def test_parent_is_a_file_is_one_line(tmp_path):
    (tmp_path / "f").write_text("x")
    with pytest.raises(ConfigError) as ei:
        write_outputs(tmp_path / "f" / "run", NEW)
    msg = str(ei.value)
    assert "\n" not in msg and "not a directory" in msg and str(tmp_path / "f" / "run") in msg
    assert (tmp_path / "f").read_text() == "x"


def test_symlinked_out_keeps_the_link_and_replaces_the_target(old_run, tmp_path):
    link = tmp_path / "latest"
    link.symlink_to("run")
    write_outputs(link, NEW)
    assert link.is_symlink() and os.readlink(link) == "run"
    assert sorted(p.name for p in old_run.iterdir()) == sorted([*NEW, "notes.txt", "analysis"])
    assert (link / "trace.json").read_text() == NEW["trace.json"]
    assert _temps(tmp_path) == []


def test_dangling_symlinked_out_creates_the_target(tmp_path):
    link = tmp_path / "latest"
    link.symlink_to(tmp_path / "runs" / "r1")
    write_outputs(link, NEW)
    assert link.is_symlink() and (tmp_path / "runs" / "r1" / "summary.json").exists()


@pytest.mark.parametrize("kind", ["symlink", "fifo", "dir"])
def test_a_non_regular_entry_with_one_of_our_names_is_refused(old_run, tmp_path, kind):
    victim = tmp_path / "elsewhere.txt"
    victim.write_text("precious")
    entry = old_run / "trace.json"
    entry.unlink()
    if kind == "symlink":
        entry.symlink_to(victim)
    elif kind == "fifo":
        os.mkfifo(entry)
    else:
        entry.mkdir()
    before = _snapshot(old_run)
    with pytest.raises(ConfigError) as ei:
        write_outputs(old_run, NEW)
    assert "trace.json" in str(ei.value) and "\n" not in str(ei.value)
    assert _snapshot(old_run) == before and victim.read_text() == "precious"


def test_out_is_the_working_directory_falls_back_to_staging_inside(old_run, tmp_path, monkeypatch):
    monkeypatch.chdir(old_run)
    write_outputs(Path("."), NEW)
    assert Path.cwd() == old_run and os.path.samefile(".", old_run)  # not stranded in a deleted dir
    assert sorted(p.name for p in old_run.iterdir()) == sorted([*NEW, "notes.txt", "analysis"])
    assert _temps(tmp_path) == []


def test_staging_inside_also_survives_a_failure(old_run, tmp_path, monkeypatch):
    monkeypatch.chdir(old_run / "analysis")  # an ancestor of the cwd cannot be renamed either
    before = _snapshot(old_run)
    calls = []
    real = atomic._write_all

    def disk_full(fd, data):
        calls.append(1)
        if len(calls) == 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        real(fd, data)

    monkeypatch.setattr(atomic, "_write_all", disk_full)
    with pytest.raises(OSError):
        write_outputs(old_run, NEW)
    assert _snapshot(old_run) == before
    assert _temps(tmp_path) == []


def test_temp_leftovers_of_a_killed_run_inside_are_not_kept_as_user_files(old_run, tmp_path):
    (old_run / ".summary.json.abc123.tmp").write_text("half")
    write_outputs(old_run, NEW)
    assert not (old_run / ".summary.json.abc123.tmp").exists()
    assert (old_run / "notes.txt").exists()


def test_unknown_names_are_a_programming_error(tmp_path):
    with pytest.raises(ValueError):
        write_outputs(tmp_path / "run", {"other.txt": "x"})
    assert not (tmp_path / "run").exists()


def test_run_analytical_into_a_run_ns3_directory(old_run, tmp_path, capsys):
    assert analytical_main([*SMALL, "--out", str(old_run)]) == 0
    names = sorted(p.name for p in old_run.iterdir())
    assert "fct.csv" not in names and "links.csv" not in names
    assert {"summary.json", "layers.csv", "EndToEnd.csv", "notes.txt", "analysis"} <= set(names)
    assert "run.png" not in names  # --no-plot
    assert _temps(tmp_path) == []


def test_run_analytical_out_errors_are_one_line(tmp_path, capsys):
    (tmp_path / "f").write_text("x")
    for out in (tmp_path / "f", tmp_path / "f" / "run"):
        assert analytical_main([*SMALL, "--out", str(out)]) == 2
        err = capsys.readouterr().err
        # progress lines and warnings about the plan (this 125M model is host-sensitive) aside
        errors = [line for line in err.splitlines() if not line.startswith(("[run-analytical]", "warning: "))]
        assert len(errors) == 1 and errors[0].startswith("error: ") and "not a directory" in errors[0]
        assert "Traceback" not in err
    assert (tmp_path / "f").read_text() == "x"
