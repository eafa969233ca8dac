"""A pasted launch line without --vocab-size takes it from its tokenizer flags, as Megatron-LM
does (issue 29); an unknown tokenizer names the fix; -q silences notes, not warnings."""
from __future__ import annotations

import shlex

import pytest

from engine.commands.gen_workload import main
from workload_gen.tokenizer_vocab import tokenizer_vocab

SHAPE = "--num-layers 2 --hidden-size 1024 --num-attention-heads 16 --world-size 8 --global-batch 8"


@pytest.mark.parametrize("flags, vocab", [
    # vocab_size of each model's public config.json
    ("--tokenizer-type HuggingFaceTokenizer --tokenizer-model meta-llama/Meta-Llama-3-8B", 128256),
    ("--tokenizer-type HuggingFaceTokenizer --tokenizer-model Qwen/Qwen3-30B-A3B", 151936),
    ("--tokenizer-type HuggingFaceTokenizer --tokenizer-model deepseek-ai/DeepSeek-V3", 129280),
    ("--tokenizer-type GPT2BPETokenizer --vocab-file v.json --merge-file m.txt", 50257),
    ("--tokenizer-type Llama2Tokenizer --tokenizer-model /data/tokenizer.model", 32000),
])
def test_the_vocab_comes_from_the_tokenizer(tmp_path, capsys, flags, vocab):
    out = tmp_path / "w.txt"
    assert main([*shlex.split(f"{SHAPE} {flags}"), "-o", str(out)]) == 0
    err = capsys.readouterr().err
    assert f"note: vocab_size {vocab} from " in err
    assert f"# model.vocab_size: {vocab}" in out.read_text()


def test_an_unknown_tokenizer_names_the_fix(capsys):
    argv = shlex.split(f"{SHAPE} --tokenizer-type HuggingFaceTokenizer --tokenizer-model acme/secret-7b")
    assert main([*argv, "-o", "/dev/null"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --tokenizer-model='acme/secret-7b' is invalid; its vocabulary size is not known here; "
                          "give --vocab-size N")
    assert tokenizer_vocab("HuggingFaceTokenizer", "acme/secret-7b") is None


def test_an_explicit_vocab_size_wins_and_quiet_silences_notes_only(tmp_path, capsys):
    argv = shlex.split(f"{SHAPE} --vocab-size 1000 --tokenizer-type GPT2BPETokenizer --sequence-parallel")
    out = tmp_path / "w.txt"
    assert main([*argv, "-q", "-o", str(out)]) == 0
    err = capsys.readouterr().err
    assert "# model.vocab_size: 1000" in out.read_text()
    assert "note:" not in err  # the ignored-flags note is informational
    assert "warning: --sequence-parallel with tensor parallel size 1" in err  # Megatron's warning stays
