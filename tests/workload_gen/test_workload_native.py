"""Native format: exact round trip, determinism, readable diffs, errors with path:line."""
from __future__ import annotations

import pytest
from wg_helpers import make

from compute_profile import attach
from formats.native import COLUMNS, read_native, write_native
from workload_gen.core.errors import FormatError

CASES = {
    "gpt3-sp-pp": ("gpt3-175b", dict(world_size=64, tp=8, pp=8, sp=True, global_batch=16)),
    "moe-ep-etp-cp": ("mixtral-8x7b", dict(world_size=32, tp=2, sp=True, ep=4, cp=2, pp=2, global_batch=8,
                                            seq_length=4096, distributed_optimizer=True, overlap_grad_reduce=True)),
    "mla-vpp-recompute": ("deepseek-v2-lite", dict(world_size=24, tp=2, sp=True, ep=4, pp=3, vpp=3, global_batch=12,
                                                   recompute="full", recompute_method="block", recompute_num_layers=2)),
    "llama-cp-selective": ("llama3-70b", dict(world_size=64, tp=8, cp=2, pp=4, vpp=2, sp=True, global_batch=16,
                                              seq_length=8192, recompute="selective", cp_comm="all_gather")),
}


@pytest.mark.parametrize("case", list(CASES))
def test_write_then_read_gives_an_equal_workload(tmp_path, case):
    model, settings = CASES[case]
    w = make(model, **settings)
    path = tmp_path / "w.txt"
    write_native(w, path)
    back = read_native(path)
    assert back == w
    assert back.meta == w.meta


def test_round_trip_keeps_compute_times(tmp_path):
    w, _ = attach(make("llama2-7b", world_size=8, tp=2, pp=2, global_batch=8), "h100")
    w = type(w)(w.model, w.parallel, w.stages, w.params_total, w.gpu, {"note": "tab\tand: colon"})
    path = tmp_path / "w.txt"
    write_native(w, path)
    back = read_native(path)
    assert back == w and back.meta == w.meta
    times = [op.time_s for _, _, op in back.ops() if hasattr(op, "time_s")]
    assert all(t is not None and t > 0 for t in times)


def test_output_is_deterministic_and_diffable(tmp_path):
    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    write_native(make("llama2-7b", world_size=8, tp=2, global_batch=8), a)
    write_native(make("llama2-7b", world_size=8, tp=2, global_batch=8), b)
    assert a.read_bytes() == b.read_bytes()
    # Changing one setting changes only the lines it should: the header line and the sizes.
    write_native(make("llama2-7b", world_size=8, tp=2, global_batch=16), b)
    diff = [(x, y) for x, y in zip(a.read_text().splitlines(), b.read_text().splitlines()) if x != y]
    assert diff == [("# parallel.global_batch: 8", "# parallel.global_batch: 16")]


def test_header_states_units_version_and_columns(tmp_path):
    path = tmp_path / "w.txt"
    w = make("gpt3-125m", world_size=1, global_batch=1)
    write_native(w, path)
    lines = path.read_text().splitlines()
    assert lines[0] == "# trainsim workload"
    assert "# format_version: 1" in lines and any(line.startswith("# units: ") and "time_s=second" in line for line in lines)
    assert f"# params_total: {w.params_total}" in lines
    assert "\t".join(COLUMNS) in lines


def _write_bad(tmp_path, edit):
    path = tmp_path / "w.txt"
    write_native(make("gpt3-125m", world_size=1, global_batch=1), path)
    lines = path.read_text().split("\n")
    edit(lines)
    path.write_text("\n".join(lines))
    return path


def _record_line(lines):
    return next(i for i, line in enumerate(lines) if line.startswith("0\t0\tfwd"))


@pytest.mark.parametrize("edit,message", [
    (lambda ls: ls.__setitem__(0, "hello"), ":1: not a trainsim workload"),
    (lambda ls: ls.__setitem__(1, "# format_version: 9"), ":2: format_version '9'"),
    (lambda ls: ls.__setitem__(_record_line(ls), ls[_record_line(ls)] + "\textra"), "expected 18 tab-separated"),
    (lambda ls: ls.__setitem__(_record_line(ls), ls[_record_line(ls)].replace("\tfwd\t", "\tforward\t", 2)), "bad record"),
    (lambda ls: ls.__setitem__(_record_line(ls), ls[_record_line(ls)].replace("\tembedding\t", "\tembed\t")), "bad record"),
    (lambda ls: ls.__setitem__(_record_line(ls), "5" + ls[_record_line(ls)][1:]), "stage 5 is not declared"),
])
def test_bad_files_name_path_and_line(tmp_path, edit, message):
    path = _write_bad(tmp_path, edit)
    with pytest.raises(FormatError, match=message) as exc:
        read_native(path)
    assert str(exc.value).startswith(str(path) + ":")


def test_bad_record_reports_its_line_number(tmp_path):
    holder = {}

    def edit(ls):
        i = _record_line(ls)
        holder["line"] = i + 1
        ls[i] = ls[i].replace("\t0\t100663296", "\tx\t100663296", 1) if "\t0\t100663296" in ls[i] else ls[i] + "\t?"

    path = _write_bad(tmp_path, edit)
    with pytest.raises(FormatError) as exc:
        read_native(path)
    assert f":{holder['line']}:" in str(exc.value)
