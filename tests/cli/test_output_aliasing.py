"""An output never destroys the command's own input (issue 29): -o naming gen-workload's -c
config (directly or through a symlink), expand-collective's -w workload, or export-csv's
database, and a sweep journal that is a symlink to another file, are refused in one line
and the input is left as it was."""
from __future__ import annotations

import os

import pytest

from engine.commands.compute_profile import main as profile_main
from engine.commands.expand_collective import main as expand_main
from engine.commands.gen_workload import main as gen_main
from engine.commands.sweep import sweep_main

CONFIG = "model: llama3-8b\nparallel: {world_size: 8, tp: 2}\n"


@pytest.mark.parametrize("via_link", [False, True])
def test_gen_workload_will_not_write_over_its_config(tmp_path, capsys, via_link):
    cfg = tmp_path / "run.yaml"
    cfg.write_text(CONFIG)
    out = cfg
    if via_link:
        out = tmp_path / "link.yaml"
        os.symlink(cfg, out)
    assert gen_main(["-c", str(cfg), "-o", str(out), "-q"]) == 2
    assert "is the command's input -c" in capsys.readouterr().err
    assert cfg.read_text() == CONFIG


def test_expand_collective_and_export_csv_keep_their_inputs(tmp_path, capsys):
    w = tmp_path / "w.txt"
    assert gen_main(["--model", "gpt3-125m", "--world-size", "2", "--tp", "2", "-o", str(w), "-q"]) == 0
    before = w.read_bytes()
    assert expand_main(["-w", str(w), "-o", str(w)]) == 2
    assert "is the command's input -w" in capsys.readouterr().err
    assert w.read_bytes() == before
    db = tmp_path / "p.sqlite"
    db.write_bytes(b"not touched")
    assert profile_main(["export-csv", "--profile", str(db), "-o", str(db)]) == 2
    assert "is the command's input --profile" in capsys.readouterr().err
    assert db.read_bytes() == b"not touched"


def test_a_sweep_journal_that_is_a_symlink_is_refused(tmp_path, capsys):
    spec = tmp_path / "s.yaml"
    text = ("base:\n  model: gpt3-125m\n  system: h100\n  training: {seq_length: 512}\n"
            "grid:\n  - product:\n      parallel.tp: [1, 2]\noutput: t.csv\n")
    spec.write_text(text)
    os.symlink(spec, tmp_path / "t.csv.journal.jsonl")
    assert sweep_main([str(spec), "--workers", "1", "-q"]) == 2
    assert "is a symlink or not a regular file" in capsys.readouterr().err
    assert spec.read_text() == text


@pytest.mark.parametrize("command", ["run-analytical -q --model gpt3-125m --world-size 1 --global-batch 1",
                                     "gen-workload --model gpt3-125m --world-size 1 -q"])
def test_a_closed_stdout_is_no_traceback(command, tmp_path):
    """`cmd >&-` left sys.stdout None and ended in AttributeError (issue 29): the output is
    discarded, as print() would, and the command succeeds. Run in a scratch directory: both
    commands write their default outputs (workload.txt, run/) into the working directory."""
    import subprocess

    done = subprocess.run(["sh", "-c", f"{command} >&-"], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr


def test_unbounded_or_special_config_files_are_refused_at_once(tmp_path, capsys):
    """/dev/zero or a FIFO given as a config used to be read until memory ran out (issue 29)."""
    from engine.commands.run import analytical_main

    assert analytical_main(["--system", "/dev/zero", "-q"]) == 2
    assert "/dev/zero: is not a regular file" in capsys.readouterr().err
    fifo = tmp_path / "f.yaml"
    os.mkfifo(fifo)
    assert gen_main(["-c", str(fifo), "-q"]) == 2
    assert "is not a regular file" in capsys.readouterr().err


def test_a_250_character_output_name_is_written(tmp_path):
    """Valid input refused (issue 29): the atomic writer's temporary name repeated the whole
    target name and went past the file system's 255-byte limit."""
    out = tmp_path / ("a" * 250 + ".txt")
    assert gen_main(["--model", "gpt3-125m", "--world-size", "1", "-o", str(out), "-q"]) == 0
    assert out.read_text().startswith("# trainsim workload")
