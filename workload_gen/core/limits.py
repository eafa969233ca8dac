"""Explicit size limits on what trainsim reads, each with the reason it exists.

A reader checks these *before* doing the work, so an input beyond them ends in one line
that names the field, the value and the limit, instead of running for minutes, exhausting
memory or hanging (issue 16). Each limit is far above any real training job and far below
what would make a command slow: a limit that a real input hits is a bug, so raise it here
(and only here) with the reason.

:func:`check_limit` is the one way to apply them, so every message has the same shape::

    <file>:<line>: ga=100000000 exceeds the limit of 65,536 micro-batches (workload_gen/core/limits.py MAX_MICROBATCHES)
"""
from __future__ import annotations

import math

from workload_gen.core.errors import ConfigError, FormatError

MAX_RANKS = 65_536
"""GPUs in one job, and ranks in one collective group (2^16). The largest published
training runs use about 16k-32k GPUs (Llama 3 405B: 16,384); per-rank structures (groups,
placements, flows) grow at least linearly with it, and 10 million ranks exhausts memory."""

MAX_MICROBATCHES = 65_536
"""Micro-batches (gradient-accumulation steps) per iteration. Real jobs use at most a few
thousand; SimAI's unrolled files, its accounting and the per-micro-batch timeline grow
linearly with it (a SimAI header with ``ga: 1e308`` once ran the reader into the ground)."""

MAX_LAYERS = 16_384
"""Transformer layers in one model (and SimAI checkpoint entries). The deepest published
models have about 100-200 layers; per-layer op lists and memory tables grow linearly."""

MAX_FLOWS = 10_000_000
"""Point-to-point flows in one expanded collective (expand-collective). A flow costs
about 200 bytes while the graph is built and timed: 10 million flows take about 2 GB and a
minute; the estimate used to refuse a collective up front is an upper bound."""

MAX_RECORDS = 5_000_000
"""Records (op lines) in one workload file, native or SimAI. A 126-layer model with
interleaving writes about 100k; each record becomes a Python object."""

MAX_BYTES = 2**50
"""Bytes of one op or one collective (1 PiB). The largest gradient all-reduce of a
trillion-parameter model in fp32 is about 4 TB; beyond this, sizes stop being exact in
the float64 arithmetic of the timing models."""

MAX_FLOPS = 1e21
"""FLOPs of one compute op (a zettaFLOP: about 20 minutes on a 1 PFLOP/s GPU, for one
kernel). Larger values, and ``inf``, only come from corrupt files."""

MAX_TEXT_FILE_BYTES = 64 * 2**20
"""Bytes of a YAML or JSON config file (run configs, systems, sweep specs, HF config.json):
the largest shipped one is under 100 KiB; /dev/zero or a multi-GB file used to be read
until memory ran out."""

MIN_BANDWIDTH = 1e6
"""Bytes/s: the slowest link a system may declare (1 MB/s). A denormal or tiny bandwidth made
a collective take longer than any clock holds: the simulation deadlocked, or wrote Infinity."""
MAX_BANDWIDTH = 1e16
"""Bytes/s: the fastest link a system may declare (10 PB/s, far above any NVLink or NIC)."""

MAX_SECONDS = 1e6
"""Time of one op (about 11.6 days), in seconds."""

MAX_NANOSECONDS = 10**15
"""MAX_SECONDS in SimAI's nanosecond fields."""

MAX_DIM = 2**40
"""One entry of an op's shape (tokens, widths, heads, vocabulary shards)."""

MAX_SWEEP_POINTS = 1_000_000
"""Points in one sweep grid (before filtering). A point is one simulation, tens of
milliseconds at least: a million is hours on a large machine; the expansion itself keeps
every point's config in memory."""

DEFAULT_SWEEP_POINTS_PER_WORKER = 5_000
"""Points a sweep runs per worker unless ``--max-points`` says more: at 10-50 ms a point,
1-4 minutes of one core. A bigger grid is refused up front with the figure and the flag,
instead of running for an hour on a laptop (issue 29: 10^5 points on one worker)."""

MAX_EXPR_CHARS = 2_000
"""Characters of one sweep filter expression."""

MAX_EXPR_NODES = 200
"""Syntax-tree nodes of one sweep filter expression."""

MAX_EXPR_DEPTH = 32
"""Nesting depth of one sweep filter expression (Python's own parser and evaluator
recurse per level; deep nesting is a RecursionError or a crash)."""

MAX_EXPR_INT_BITS = 256
"""Bits of any integer a filter computes (``9 ** 9 ** 9`` would need 1.2 GB and minutes)."""

MAX_EXPR_SEQUENCE = 10_000
"""Length of any string or list a filter computes (``"a" * 4000000000`` would need 4 GB)."""

MAX_EXPERTS = 65_536
"""Routed experts in one MoE layer. The largest published Megatron-style MoE models route
over 256-384 experts (DeepSeek-V3, Kimi K2); search enumerates the divisors of the count."""
MAX_NESTING = 64
"""Nesting depth of a JSON or YAML value in any input file (configs are a few levels
deep; Python's parsers recurse per level)."""


LIMITS: dict[str, int | float] = {k: v for k, v in list(vars().items()) if k.startswith("MAX_")}
"""Every limit above by its name, as :func:`check_limit` and the tables below name them."""

PARALLEL_FIELD_LIMITS: dict[str, tuple[str, str]] = {
    "world_size": ("MAX_RANKS", "ranks"),
    "tp": ("MAX_RANKS", "ranks"),
    "pp": ("MAX_RANKS", "ranks"),
    "cp": ("MAX_RANKS", "ranks"),
    "ep": ("MAX_RANKS", "ranks"),
    "etp": ("MAX_RANKS", "ranks"),
    "vpp": ("MAX_LAYERS", "virtual stages"),
    "recompute_num_layers": ("MAX_LAYERS", "layers"),
    "first_stage_layers": ("MAX_LAYERS", "layers"),
    "last_stage_layers": ("MAX_LAYERS", "layers"),
}
"""ParallelConfig field -> (limit name, unit) for :func:`check_limit`: the bounds every
parallel layout is held to, whether built from flags, a YAML file or a workload file."""

MODEL_FIELD_LIMITS: dict[str, tuple[str, str]] = {
    "num_layers": ("MAX_LAYERS", "layers"),
    "num_experts": ("MAX_EXPERTS", "experts"),
    **{name: ("MAX_DIM", "elements") for name in (
        "hidden_size", "num_attention_heads", "vocab_size", "num_query_groups", "kv_channels", "ffn_hidden_size",
        "moe_ffn_hidden_size", "dense_ffn_hidden_size", "moe_shared_expert_intermediate_size", "q_lora_rank",
        "max_position_embeddings", "kv_lora_rank", "qk_head_dim", "qk_pos_emb_head_dim", "v_head_dim")},
}
"""ModelConfig field -> (limit name, unit): layers and experts bound per-layer and
per-expert work; widths only enter arithmetic, so they are bounded only to stay exact."""


def check_fields(obj: object, table: dict[str, tuple[str, str]]) -> None:
    """:func:`check_limit` on every field of ``obj`` that ``table`` names and that is set."""
    for field, (name, unit) in table.items():
        value = getattr(obj, field, None)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            check_limit(field, value, name, unit)


def limit_message(field: str, value: object, limit: float, unit: str, name: str) -> str:
    """``field=value exceeds the limit of <limit> <unit> (workload_gen/core/limits.py NAME)``."""
    return f"{field}={value!r} {_exceeds(limit, unit, name)}"


def _exceeds(limit: float, unit: str, name: str) -> str:
    shown = f"{limit:,}" if isinstance(limit, int) else f"{limit:g}"
    return f"exceeds the limit of {shown} {unit} (workload_gen/core/limits.py {name})"


def check_limit(field: str, value: float, name: str, unit: str, *, path: str | None = None,
                line: int | None = None) -> None:
    """Raise (FormatError with ``path``, else ConfigError) when ``value`` exceeds the limit
    ``name`` of this module (a key of :data:`LIMITS`), or is not a finite number."""
    limit = LIMITS[name]
    if isinstance(value, float) and not math.isfinite(value) or value > limit:
        if path is not None:
            raise FormatError(path, line, limit_message(field, value, limit, unit, name))
        raise ConfigError(field, value, _exceeds(limit, unit, name))  # ConfigError itself says field=value


def nesting_depth(text: str) -> int:
    """Deepest bracket nesting of a JSON/flow-YAML text ([ { ( ), ignoring quoting: an
    upper bound, cheap, and never recursive, so it can be asked before a parser is."""
    depth = best = 0
    for ch in text:
        if ch in "[{(":
            depth += 1
            best = max(best, depth)
        elif ch in "]})":
            depth = max(0, depth - 1)
    return best
