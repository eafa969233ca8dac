"""CPU time, wall time and peak memory of processes, for the bench_*.py scripts (one home
for the os.wait4 / getrusage accounting they all report). Units: seconds, bytes."""
from __future__ import annotations

import os
import resource
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class ChildUsage:
    cpu_s: float
    """user + sys CPU seconds of the finished child (start-up included)."""
    wall_s: float
    max_rss_bytes: int
    stdout: bytes
    stderr: bytes = b""
    """What the child wrote to stderr (its progress and notes, for benches that report them)."""


def run_child(cmd: list[str], *, cwd: Path | str | None = None, env: dict[str, str] | None = None,
              stdout_devnull: bool = False) -> ChildUsage:
    """Run ``cmd`` to completion and account for it alone (os.wait4's rusage of that child).
    stdout is read before waiting, as a terminal would take it (``stdout_devnull``: sent to
    /dev/null instead, where writes cost the child almost nothing; ``stdout`` is then b"");
    stderr goes to a temporary file, so neither pipe can fill and stall the child. A non-zero
    exit ends the bench with the child's last stderr lines."""
    with tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL if stdout_devnull else subprocess.PIPE,
                                stderr=err)
        out = b""
        if proc.stdout is not None:
            out = proc.stdout.read()
            proc.stdout.close()
        _pid, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        err_bytes = err.read()
        if proc.returncode != 0:
            raise SystemExit(f"{' '.join(map(str, cmd))} exited with {proc.returncode}: "
                             f"{err_bytes.decode(errors='replace').strip()[-400:]}")
    return ChildUsage(usage.ru_utime + usage.ru_stime, wall, usage.ru_maxrss * 1024, out, err_bytes)


def cpu_self_and_children() -> float:
    """CPU seconds of this process plus its reaped children (a local process pool's workers,
    once the pool is shut down; not Ray's workers, which are not our children)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime
