"""Issue 16: bad workload inputs are refused with one line naming file, line, field and
value; documented limits are checked up front with the limit in the message."""
from __future__ import annotations

import re
import signal

import pytest
from rel_helpers import edit_native, edit_record, native_text, simai_text, write

from formats.native import read_native
from formats.simai_convert import simai_to_workload
from formats.simai_reader import parse_simai
from workload_gen.core import limits
from workload_gen.core.errors import ConfigError, FormatError


def test_every_limit_is_documented_with_its_reason():
    import ast
    import inspect

    tree = ast.parse(inspect.getsource(limits))
    body = tree.body
    names = [n.targets[0].id for n in body if isinstance(n, ast.Assign) and n.targets[0].id.startswith("MAX_")]
    assert {"MAX_RANKS", "MAX_MICROBATCHES", "MAX_LAYERS", "MAX_FLOWS"} <= set(names)
    for i, node in enumerate(body):
        if isinstance(node, ast.Assign) and node.targets[0].id.startswith("MAX_"):
            doc = body[i + 1]
            assert isinstance(doc, ast.Expr) and isinstance(doc.value, ast.Constant) and len(doc.value.value) > 20, \
                f"{node.targets[0].id} needs a docstring giving its reason"


def test_check_limit_names_value_limit_and_where():
    with pytest.raises(FormatError) as exc:
        limits.check_limit("ga", 100_000, "MAX_MICROBATCHES", "micro-batches", path="f.txt", line=3)
    assert str(exc.value) == ("f.txt:3: ga=100000 exceeds the limit of 65,536 micro-batches "
                              "(workload_gen/core/limits.py MAX_MICROBATCHES)")
    with pytest.raises(ConfigError, match="MAX_RANKS"):
        limits.check_limit("ranks", limits.MAX_RANKS + 1, "MAX_RANKS", "ranks")
    with pytest.raises(ConfigError, match="MAX_BYTES"):
        limits.check_limit("size", float("inf"), "MAX_BYTES", "bytes")
    limits.check_limit("ranks", limits.MAX_RANKS, "MAX_RANKS", "ranks")  # the limit itself is allowed


# --- SimAI text ---------------------------------------------------------------------------
def _simai(header_edit) -> str:
    lines = simai_text().split("\n")
    lines[0] = header_edit(lines[0])
    return "\n".join(lines)


@pytest.fixture
def no_hang():
    """Fail (instead of hanging the suite) if the test runs over 20 s."""
    def alarm(signum, frame):
        raise TimeoutError("hung: over 20 s")

    old = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(20)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


@pytest.mark.parametrize("key", ["checkpoints:", "checkpoint_initiates:"])
def test_simai_negative_checkpoint_count_is_refused_not_a_hang(key, no_hang):
    text = _simai(lambda h: h.replace(f"{key} 0", f"{key} -3"))
    with pytest.raises(FormatError, match=rf"w\.txt:1: header key '{key}' has value '-3'; must be >= 0"):
        parse_simai(text, "w.txt")


@pytest.mark.parametrize("edit, message", [
    (lambda h: h.replace("ga: 2", "ga: 1e308"), r"w\.txt:1: header ga=1e\+308 exceeds the limit of 65,536 micro-batches"),
    (lambda h: h.replace("ga: 2", "ga: inf"), r"w\.txt:1: header key 'ga:' has value 'inf'; expected an integer \(ASCII digits\)"),
    (lambda h: h.replace("all_gpus: 8", "all_gpus: 10000000"), r"header all_gpus=10000000 exceeds the limit of 65,536"),
    (lambda h: h.replace("checkpoints: 0", "checkpoints: 99999999999"), r"header checkpoints count=99999999999 exceeds"),
    (lambda h: h[:h.index("checkpoints:")] + "checkpoints: 5 1 2", r"announces 5 layer\(s\) but only 2 token"),
    (lambda h: h.replace("model_parallel_NPU_group: 2", "model_parallel_NPU_group: -2"), r"has value '-2'; must be >= 0"),
    (lambda h: h.replace("pp: 1", "pp: 0"), r"header lacks a positive pp:"),
])
def test_simai_header_values_are_checked(edit, message):
    with pytest.raises(FormatError, match=message):
        parse_simai(_simai(edit), "w.txt")


def test_simai_unknown_comm_type_and_huge_sizes_are_refused():
    lines = simai_text().split("\n")
    rec = next(i for i, line in enumerate(lines) if "\tALLREDUCE\t" in line)
    bad = list(lines)
    bad[rec] = bad[rec].replace("\tALLREDUCE\t", "\tALLREDUCX\t", 1).replace("\tALLREDUCE\t", "\tFOO\t", 1)
    with pytest.raises(FormatError, match=rf"w\.txt:{rec + 1}: .* comm type is '(ALLREDUCX|FOO)'"):
        parse_simai("\n".join(bad), "w.txt")
    bad = list(lines)
    f = bad[rec].split("\t")
    f[4] = str(2**60)
    bad[rec] = "\t".join(f)
    with pytest.raises(FormatError, match=rf"w\.txt:{rec + 1}: forward comm bytes={2**60} exceeds the limit"):
        parse_simai("\n".join(bad), "w.txt")


def test_simai_gpus_beyond_the_limit_are_refused():
    sw = parse_simai(simai_text(), "w.txt")
    with pytest.raises(ConfigError, match="gpus=10000000 is invalid; exceeds the limit of 65,536"):
        simai_to_workload(sw, gpus=10_000_000)


def test_run_analytical_simai_accounting_refuses_negative_tp(tmp_path):
    from rel_helpers import run_main

    from engine.commands.run import analytical_main

    path = write(tmp_path / "w.txt", _simai(lambda h: h.replace("model_parallel_NPU_group: 2",
                                                                 "model_parallel_NPU_group: -2")))
    rc, _, err = run_main(analytical_main, [str(path), "--accounting", "simai"])
    assert rc == 2 and "must be >= 0" in err and "Traceback" not in err


# --- native workloads -----------------------------------------------------------------------
def _line_of(text: str, prefix: str) -> int:
    return next(i for i, line in enumerate(text.split("\n"), 1) if line.startswith(prefix))


@pytest.mark.parametrize("prefix, new, message", [
    ("# stage 0:", "# stage 0: params=1 dense_params=1 chunks=0:0-100000000000",
     r"chunk layers '0-100000000000'=100000000001 exceeds the limit of 16,384 layers"),
    ("# model.name:", "# model.name: " + "[" * 100000 + "]" * 100000, r"model\.name=.*must be a single JSON value"),
    ("# model.num_experts:", "# model.num_experts: 2.5", r"model\.num_experts=2\.5: must be int, not float"),
    ("# model.num_layers:", "# model.num_layers: 1000000", r"model\.num_layers=1000000 exceeds the limit of 16,384"),
    ("# model.hidden_size:", "# model.hidden_size: NaN", r"model\.hidden_size='NaN': must be a finite number"),
    ("# parallel.world_size:", "# parallel.world_size: 10000000", r"exceeds the limit of 65,536 ranks"),
    ("# stage 1:", "# stage 7: params=1 dense_params=1 chunks=0:2-3", r"stage 7: must be in 0\.\.pp-1 = 0\.\.1"),
])
def test_native_header_problems_name_file_line_field_value(tmp_path, prefix, new, message):
    text = edit_native(prefix, new)
    path = write(tmp_path / "w.txt", text)
    with pytest.raises(FormatError, match=message) as exc:
        read_native(path)
    assert str(exc.value).startswith(f"{path}:{_line_of(text, new)}:")
    assert "\n" not in str(exc.value)


def test_native_missing_parallel_line_is_refused(tmp_path):
    path = write(tmp_path / "w.txt", edit_native("# parallel.tp:", None))
    with pytest.raises(FormatError, match=r"header line '# parallel\.tp:' is missing"):
        read_native(path)


def test_native_meta_nesting_is_bounded(tmp_path):
    path = write(tmp_path / "w.txt", edit_native("# gpu:", "# meta.x: " + "[" * 100000 + "]" * 100000 + "\n# gpu: "))
    with pytest.raises(FormatError, match=r"meta\.x nesting depth=100000 exceeds the limit of 64 levels"):
        read_native(path)


@pytest.mark.parametrize("name, column, value, message", [
    ("qkv", 10, "1e400", r"flops=1e400 must be a finite number >= 0"),
    ("qkv", 11, "-5", r"bytes=-5 must be a finite number >= 0"),
    ("qkv", 12, "nan", r"time_s=nan must be a finite number >= 0"),
    ("core_attn", 8, "1x0x512x512x64x1", r"attention shape '1x0x512x512x64x1': must be"),
    ("core_attn", 8, "1x-6x512x512x64x1", r"shape '1x-6x512x512x64x1': entry=-6 must be >= 0"),
    ("core_attn", 8, "1x6x512x512x64x7", r"causal 0 or 1"),
    ("qkv", 8, "512x0x768", r"gemm shape '512x0x768': must be 3 dimensions, each >= 1"),
    ("qkv", 9, "int3", r"dtype='int3'"),
    ("proj_ar", 11, "-786432", r"bytes=-786432 must be >= 0"),
    ("proj_ar", 15, "0", r"group_size=0 must be >= 1"),
    ("proj_ar", 15, "3", r"group_size=3 of a tp collective disagrees with the parallel header \(tp group of 2\)"),
    ("pp_send_fwd", 15, "8", r"group_size=8 of a pp collective disagrees with the parallel header \(pp group of 2\)"),
    ("proj_ar", 17, "5", r"peer=5: valid -1"),
    ("proj_ar", 5, "99999999", r"layer=99999999: must be -1"),
])
def test_native_record_problems_name_file_line_field_value(tmp_path, name, column, value, message):
    text, line = edit_record(name, column, value)
    path = write(tmp_path / "w.txt", text)
    with pytest.raises(FormatError, match=message) as exc:
        read_native(path)
    assert str(exc.value).startswith(f"{path}:{line}:")


def test_native_reader_still_round_trips(tmp_path):
    from formats.native import write_native

    w = read_native(write(tmp_path / "a.txt", native_text()))
    write_native(w, tmp_path / "b.txt")
    assert (tmp_path / "b.txt").read_text() == native_text()
    assert re.search(r"# parallel\.tp: 2", native_text())
