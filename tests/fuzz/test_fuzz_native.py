"""Fuzz trainsim's native workload reader."""
from __future__ import annotations

from fuzz_helpers import fuzz_settings, mutated_bytes, mutated_text, only_trainsim_errors, scratch_file
from fuzz_seeds import native_texts
from hypothesis import example, given
from hypothesis import strategies as st

from formats.native import read_native

SEED = native_texts()[0]
LINES = SEED.split("\n")


def _edit(prefix: str, new: str) -> str:
    """The first seed with the first line starting with ``prefix`` replaced."""
    return "\n".join(new if line.startswith(prefix) else line for line in LINES)


def _record(name: str, column: int, value: str) -> str:
    out = []
    done = False
    for line in LINES:
        f = line.split("\t")
        if not done and len(f) == 18 and f[4] == name:
            f[column] = value
            line = "\t".join(f)
            done = True
        out.append(line)
    return "\n".join(out)


def _read(text: str | bytes) -> None:
    read_native(scratch_file("native.txt", text))


@fuzz_settings(150)
@given(mutated_text(list(native_texts()), max_mutations=8))
# Regression seeds (issue 16): each crashed, hung or simulated as if valid before.
@example(_edit("# stage 0:", "# stage 0: params=1 dense_params=1 chunks=0:0-100000000000"))  # huge chunk range
@example(_edit("# model.name:", "# model.name: " + "[" * 100000 + "]" * 100000))         # deep nesting
@example(_edit("# gpu:", "# meta.x: " + "[" * 100000 + "]" * 100000))
@example(_record("qkv", 10, "1e400"))                                                      # flops inf
@example(_record("core_attn", 8, "1x0x512x512x64x1"))                                      # zero attention shape
@example(_record("core_attn", 8, "1x-6x512x512x64x1"))                                     # negative shape
@example(_record("proj_ar", 11, "-786432"))                                                # negative bytes
@example(_record("proj_ar", 15, "0"))                                                      # group size 0
@example("\n".join(line for line in LINES if not line.startswith("# parallel.tp:")))      # tp missing
@example(_edit("# model.num_experts:", "# model.num_experts: 2.5"))                        # 2.5 experts
@example(_edit("# model.num_layers:", "# model.num_layers: 1000000"))
@example(_edit("# model.hidden_size:", "# model.hidden_size: NaN"))
@example(_edit("# parallel.global_batch:", "# parallel.global_batch: 8000000000"))
@example(_record("qkv", 8, ""))
def test_native_workload_only_raises_trainsim_errors(text):
    only_trainsim_errors(_read, text)


@fuzz_settings(50)
@given(mutated_bytes([s.encode() for s in native_texts()[:2]]))
def test_native_workload_bytes_only_raise_trainsim_errors(data):
    only_trainsim_errors(_read, data)


@fuzz_settings(50)
@given(st.integers(0, 17), st.text(max_size=30), st.integers(0, 200))
def test_native_any_record_cell_only_raises_trainsim_errors(column, value, nth):
    records = [i for i, line in enumerate(LINES) if line[:1].isdigit() or line.startswith("-")]
    i = records[nth % len(records)]
    lines = list(LINES)
    f = lines[i].split("\t")
    f[column] = value.replace("\t", " ").replace("\n", " ")
    lines[i] = "\t".join(f)
    only_trainsim_errors(_read, "\n".join(lines))
