"""The main job runs without torch (it is the optional `measure` extra): torch is made
unimportable in a fresh interpreter, and run-analytical still writes its outputs, while
compute-profile measure says in one line what to install."""
from __future__ import annotations

import subprocess
import sys

BLOCK = "import sys; sys.modules['torch'] = None; "


def test_run_analytical_without_torch(tmp_path):
    code = BLOCK + (f"from engine.commands.run import analytical_main; "
                    f"sys.exit(analytical_main(['--out', r'{tmp_path / 'run'}', '--no-plot']))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    assert (tmp_path / "run" / "summary.json").is_file()
    assert "iteration time" in p.stdout


def test_measure_without_torch_is_one_line(tmp_path):
    code = BLOCK + (f"from engine.commands.compute_profile import main; "
                    f"sys.exit(main(['measure', '--model', 'gpt3-125m', '--num-layers', '1', '--world-size', '1', '--profile', "
                    f"r'{tmp_path / 'x.sqlite'}']))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert p.returncode == 2
    assert p.stderr.count("\n") == 1 and "needs torch" in p.stderr and "trainsim[measure]" in p.stderr
    assert "Traceback" not in p.stderr
