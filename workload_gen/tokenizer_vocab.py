"""The vocabulary size a Megatron-LM launch line implies through its tokenizer flags.

Why: real launch scripts rarely pass --vocab-size; Megatron takes it from the tokenizer
(--tokenizer-type, --tokenizer-model). A pasted script without it used to end in
"model.vocab_size=None is invalid". Each entry is the ``vocab_size`` of the model's public
Hugging Face config.json (the embedding rows the checkpoint has; Megatron pads it further
to a multiple of --make-vocab-size-divisible-by x TP, which the workload applies).
"""
from __future__ import annotations

import re

BY_TOKENIZER_TYPE: dict[str, int] = {
    "GPT2BPETokenizer": 50257,   # openai-community/gpt2 config.json vocab_size
    "Llama2Tokenizer": 32000,    # meta-llama/Llama-2-7b-hf config.json vocab_size
}
"""Tokenizer types with a fixed vocabulary (Megatron-LM's --tokenizer-type choices)."""

BY_MODEL_NAME: tuple[tuple[str, int, str], ...] = (
    # (pattern in --tokenizer-model, vocab_size, config.json it is read from)
    (r"llama[-_]?3|meta-llama-3", 128256, "meta-llama/Meta-Llama-3-8B, Llama-3.1-8B/70B/405B"),
    (r"llama[-_]?2", 32000, "meta-llama/Llama-2-7b-hf"),
    (r"qwen3|qwen2\.5|qwen2", 151936, "Qwen/Qwen3-30B-A3B, Qwen/Qwen2.5-7B"),
    (r"deepseek[-_]?v3|deepseek[-_]?r1", 129280, "deepseek-ai/DeepSeek-V3"),
    (r"deepseek[-_]?v2", 102400, "deepseek-ai/DeepSeek-V2"),
    (r"mixtral|mistral[-_]?7b", 32000, "mistralai/Mixtral-8x7B-v0.1, Mistral-7B-v0.1"),
    (r"gpt[-_]?oss", 201088, "openai/gpt-oss-120b"),
    (r"nemotron[-_]?3[-_]?nano[-_]?30b", 131072, "nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16"),
    (r"gpt2", 50257, "openai-community/gpt2"),
)
"""Hugging Face tokenizer names (--tokenizer-model), matched case-insensitively, first wins."""


def tokenizer_vocab(tokenizer_type: str | None, tokenizer_model: str | None) -> tuple[int, str] | None:
    """(vocab_size, what it came from) for these tokenizer flags, or None when unknown."""
    if tokenizer_model:
        name = str(tokenizer_model).lower()
        for pattern, size, source in BY_MODEL_NAME:
            if re.search(pattern, name):
                return size, f"--tokenizer-model {tokenizer_model} ({source} config.json)"
    if tokenizer_type in BY_TOKENIZER_TYPE:
        return BY_TOKENIZER_TYPE[tokenizer_type], f"--tokenizer-type {tokenizer_type}"
    return None
