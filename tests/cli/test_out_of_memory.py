"""Running out of memory is one line and exit 2, never a traceback (issue 29: `ulimit -v`
ended in MemoryError tracebacks, or in OpenBLAS's native "Memory allocation still failed"
from its thread pool's buffers)."""
from __future__ import annotations

import os
import resource
import subprocess
import sys

from engine.commands.parser import run_cli


def test_memory_error_is_one_line_and_exit_2(capsys):
    def body() -> int:
        raise MemoryError

    assert run_cli(body) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: out of memory") and err.count("\n") == 1


def test_numpy_gets_one_blas_thread_unless_the_user_chose(monkeypatch):
    monkeypatch.delenv("OPENBLAS_NUM_THREADS", raising=False)
    run_cli(lambda: 0)
    assert os.environ["OPENBLAS_NUM_THREADS"] == "1"
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "4")
    run_cli(lambda: 0)
    assert os.environ["OPENBLAS_NUM_THREADS"] == "4"


def test_a_command_under_an_address_space_limit_fails_in_one_line(tmp_path):
    """A limit that lets the interpreter start but not the job: either the run fits (exit 0)
    or it says so in one line (exit 2); no traceback, no native abort."""
    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (400 << 20, 400 << 20))

    code = ("import sys; from engine.commands.parser import run_cli\n"
            "def body():\n"
            "    import numpy\n"  # the BLAS pool loads here, under the limit
            "    blocks = [bytearray(64 << 20) for _ in range(64)]  # 4 GiB: past any 400 MiB limit\n"
            "    return 0\n"
            "sys.exit(run_cli(body))\n")
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, preexec_fn=limit,
                          env=env, cwd=tmp_path, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith("error: out of memory") and proc.stderr.count("\n") == 1
