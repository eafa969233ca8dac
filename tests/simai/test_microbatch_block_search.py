"""find_microbatch_block: the longest block repeated ga times back to back (issue 16: the
search was quadratic in the record count, a 20k-record file without blocks took minutes)."""
from __future__ import annotations

import random

import pytest

from formats.simai_convert import _find_block_vectorised, find_microbatch_block
from formats.simai_reader import read_simai


def _loop(keys, ga):
    """The definition, written out: for each length from the longest, the first position
    where ``length * (ga - 1)`` consecutive records equal the one ``length`` later."""
    n = len(keys)
    for length in range(n // ga, 0, -1):
        need, run = length * (ga - 1), 0
        for i in range(n - length):
            run = run + 1 if keys[i] == keys[i + length] else 0
            if run >= need:
                return i - need + 1, length
    return None


def test_the_vectorised_search_is_the_definition():
    rng = random.Random(7)
    for _ in range(300):
        n, ga = rng.randint(2, 80), rng.randint(2, 5)
        keys = [rng.randrange(rng.randint(1, 4)) for _ in range(n)]  # record ids, as the reader makes them
        try:
            got = _find_block_vectorised(keys, ga, n // ga)
        except ValueError:
            got = None
        assert got == _loop(keys, ga), (keys, ga)


def _simai(names_sizes, ga):
    head = (f"HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: 2 ep: 1 pp: 1 vpp: 1 ga: {ga} "
            "all_gpus: 16 checkpoints: 0 checkpoint_initiates: 0 pp_comm 0")
    rows = [f"{n}\t-1\t1\tALLREDUCE\t{s}\t1\tNONE\t0\t1\tNONE\t0\t100" for n, s in names_sizes]
    return "\n".join([head, str(len(rows)), *rows]) + "\n"


def test_a_long_file_finds_its_blocks_and_one_without_blocks_is_refused(tmp_path):
    block = [(f"layer{i}", 4096 * (i + 1)) for i in range(50)]
    iters = [("grad_sync", 10**9), ("optimizer", 7)]
    ok = tmp_path / "ok.txt"
    ok.write_text(_simai(iters + block * 300, 300))
    sw = read_simai(ok)
    assert find_microbatch_block(sw.records, 300) == (2, 50)
    bad = tmp_path / "bad.txt"
    rng = random.Random(1)
    bad.write_text(_simai([(f"r{i}", rng.randint(1, 10**9)) for i in range(20_000)], 4))
    with pytest.raises(ValueError):
        find_microbatch_block(read_simai(bad).records, 4)
