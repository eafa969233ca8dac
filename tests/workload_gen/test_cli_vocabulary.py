"""Every command shares one parser behaviour: --version, one-line errors with a 'did you
mean', and no silent prefix matching of flags."""
from __future__ import annotations

import subprocess
import sys

import pytest

COMMANDS = ["gen-workload", "compute-profile", "expand-collective", "run-analytical", "run-ns3", "diff-trace",
            "diff-workload", "sweep", "search"]


def _run(cmd: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([cmd, *args], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("cmd", COMMANDS)
def test_version_everywhere(cmd):
    from importlib.metadata import version

    p = _run(cmd, "--version")
    assert p.returncode == 0 and p.stdout.strip() == f"{cmd} {version('trainsim')}"


def test_typo_gets_a_suggestion_and_exit_2():
    p = _run("gen-workload", "--modle", "llama3-8b")
    assert p.returncode == 2
    assert p.stderr.count("\n") == 1 and "did you mean --model?" in p.stderr and "Traceback" not in p.stderr


def test_a_prefix_is_not_silently_taken_for_a_flag():
    """--seq used to mean --seq-length by argparse's prefix matching."""
    p = _run("gen-workload", "--seq", "100")
    assert p.returncode == 2 and "did you mean --seq-length or --sequence-parallel?" in p.stderr
