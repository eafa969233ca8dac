"""Fuzz the SimAI/AICB workload reader and its conversion to a Workload."""
from __future__ import annotations

from fuzz_helpers import fuzz_settings, mutated_text, nasty_text, only_trainsim_errors, scratch_file
from fuzz_seeds import simai_texts
from hypothesis import example, given
from hypothesis import strategies as st

from formats.simai_convert import simai_to_workload
from formats.simai_reader import parse_simai, read_simai

HEADER = "HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: 2 ep: 1 pp: 1 vpp: 1 ga: 1 all_gpus: 4 "
RECORD = "l0\t-1\t10\tALLREDUCE\t1024\t10\tNONE\t0\t10\tALLREDUCE\t2048\t100"


def _read_and_convert(text: str) -> None:
    sw = parse_simai(text, "fuzz.txt", require_parallel=False)
    sw = parse_simai(text, "fuzz.txt")
    simai_to_workload(sw)


@fuzz_settings(150)
@given(mutated_text(list(simai_texts())))
# Regression seeds (issue 16): each hung, crashed or was silently accepted before.
@example(HEADER + "checkpoints: -3\n1\n" + RECORD)           # negative count: infinite loop
@example(HEADER + "checkpoint_initiates: -1\n1\n" + RECORD)   # same
@example(HEADER + "checkpoints: 100000000000 1 2\n1\n" + RECORD)
@example(HEADER.replace("ga: 1", "ga: 1e308") + "\n1\n" + RECORD)
@example(HEADER.replace("ga: 1", "ga: inf") + "\n1\n" + RECORD)
@example(HEADER.replace("ga: 1", "ga: 0") + "\n1\n" + RECORD)
@example(HEADER.replace("model_parallel_NPU_group: 2", "model_parallel_NPU_group: -2") + "\n1\n" + RECORD)
@example(HEADER.replace("all_gpus: 4", "all_gpus: 999999999999") + "\n1\n" + RECORD)
@example(HEADER + "\n1\n" + RECORD.replace("ALLREDUCE\t1024", "FOO\t1024"))
@example(HEADER + "\n1\n" + RECORD.replace("1024", "99999999999999999999"))
@example(HEADER + "\n99999999999999\n" + RECORD)
@example(HEADER + "\n1\n" + RECORD.replace("\t-1\t", "\t" + "9" * 5000 + "\t"))
def test_simai_text_only_raises_trainsim_errors(text):
    only_trainsim_errors(_read_and_convert, text)


@fuzz_settings(100)
@given(st.lists(st.one_of(nasty_text, st.sampled_from(HEADER.split() + RECORD.split("\t"))), max_size=30),
       st.lists(st.lists(nasty_text, max_size=14).map("\t".join), max_size=4), st.booleans())
def test_simai_from_scratch_only_raises_trainsim_errors(header, records, count_right):
    text = "\n".join([" ".join(["HYBRID_TRANSFORMER", *header]), str(len(records) if count_right else 3), *records])
    only_trainsim_errors(_read_and_convert, text)


@fuzz_settings(50)
@given(st.binary(max_size=300))
@example(b"HYBRID_TRANSFORMER \xff\xfe\n1\n")
def test_simai_file_bytes_only_raise_trainsim_errors(data):
    path = scratch_file("simai.txt", data)
    only_trainsim_errors(read_simai, path)
