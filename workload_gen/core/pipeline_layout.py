"""Megatron-Core's ``--pipeline-model-parallel-layout``: which layers each virtual stage holds.

The grammar is Megatron-Core's (megatron/core/transformer/pipeline_parallel_layer_layout.py,
``PipelineParallelLayerLayout.parse_str_to_list``, NVIDIA/Megatron-LM@d98e8a64):

- ``E`` the embedding, ``t`` one transformer (decoder) layer, ``m`` one multi-token
  prediction (MTP) layer, ``L`` the output layer and loss;
- ``|`` separates virtual stages; commas are cosmetic and dropped;
- ``(...)*N`` repeats a group N times, then ``x*N`` repeats one character N times (in that
  order, each pattern once over the whole string, so groups do not nest).

Virtual stage ``v`` (0-based, in the string's order) runs on pipeline rank ``v % pp`` as its
model chunk ``v // pp``: the string lists the stages in the order data flows through them,
and pp*vpp = the number of stages gives vpp (Megatron sets
``virtual_pipeline_model_parallel_size`` from it). Decoder layers are numbered in that
order, so chunk c of rank s holds the ``t``s of stage c*pp + s with the ids that follow
every ``t`` before it (``get_layer_offset``). A stage may be empty (``||``).

Why a module of its own: the layout is a second way, besides the even split and the
first/last-stage counts, to say which layers each (stage, chunk) builds; the parameter
counts (:mod:`workload_gen.core.params`), the builder and the checks all read it from here.
"""
from __future__ import annotations

import re
from functools import lru_cache

from workload_gen.core.errors import ConfigError
from workload_gen.core.limits import MAX_LAYERS
from workload_gen.core.record import record
from workload_gen.core.virtual_stages import stage_chunk, virtual_stage

SYMBOLS = {"E": "embedding", "t": "transformer layer", "m": "MTP layer", "L": "loss (output layer)"}
"""Megatron-Core's layer characters (``char2layer_type``)."""

_MAX_SYMBOLS = 4 * MAX_LAYERS
"""Longest expanded layout accepted: bounds what ``x*N`` may allocate before it is checked."""

_FIELD = "pipeline_layout"


@record
class PipelineLayout:
    """A parsed layout: the symbols of each virtual stage, in data-flow order."""
    pp: int
    vpp: int
    stages: tuple[tuple[str, ...], ...]
    """Virtual stages in data-flow order, each a tuple of 'E', 't', 'm', 'L'; which (rank,
    chunk) runs each is workload_gen.core.virtual_stages' (``vshape`` for DualPipeV)."""

    def stage(self, rank: int, chunk: int, vshape: bool = False) -> tuple[str, ...]:
        return self.stages[virtual_stage(rank, chunk, self.pp, vshape)]

    def count(self, symbol: str) -> int:
        return sum(s.count(symbol) for s in self.stages)

    def layer_ids(self, rank: int, chunk: int, symbol: str = "t", vshape: bool = False) -> tuple[int, ...]:
        """Ids of the ``symbol`` layers of (rank, chunk): those of every earlier virtual stage
        come first (Megatron-Core's get_layer_id_list)."""
        v = virtual_stage(rank, chunk, self.pp, vshape)
        offset = sum(s.count(symbol) for s in self.stages[:v])
        return tuple(range(offset, offset + self.stages[v].count(symbol)))

    def holder(self, symbol: str, vshape: bool = False) -> tuple[int, int] | None:
        """(rank, chunk) of the first virtual stage holding ``symbol``; None if none does."""
        for v, s in enumerate(self.stages):
            if symbol in s:
                return stage_chunk(v, self.pp, vshape)
        return None


def _unroll(text: str, pattern: str) -> str:
    total = [len(text)]

    def repeat(m: re.Match[str]) -> str:
        n = int(m.group(2))
        total[0] += len(m.group(1)) * max(n - 1, 0)
        if total[0] > _MAX_SYMBOLS:
            raise ConfigError(_FIELD, text, f"expands to more than {_MAX_SYMBOLS:,} symbols "
                                            "(workload_gen/core/limits.py MAX_LAYERS x 4)")
        return m.group(1) * n

    return re.sub(pattern, repeat, text)


@lru_cache(maxsize=256)
def parse_layout(text: str, pp: int) -> PipelineLayout:
    """Parse Megatron's layout string for ``pp`` pipeline ranks (ConfigError on bad input)."""
    if not isinstance(text, str) or not text.strip():
        raise ConfigError(_FIELD, text, "must be a non-empty string such as 'Et*3|(tt|)*29,m|L'")
    flat = text.replace(",", "").replace(" ", "")
    flat = _unroll(flat, r"\(([^)]+)\)\*(\d+)")
    flat = _unroll(flat, r"(.)\*(\d+)")
    stages: list[tuple[str, ...]] = []
    for part in flat.split("|"):
        bad = [c for c in part if c not in SYMBOLS]
        if bad:
            raise ConfigError(_FIELD, text, f"unknown symbol {bad[0]!r}; valid: E (embedding), t (transformer "
                                            "layer), m (MTP layer), L (loss), | (stage boundary), (...)*N and x*N")
        stages.append(tuple(part))
    if len(stages) % pp:
        raise ConfigError(_FIELD, text, f"has {len(stages)} virtual stages, not a multiple of pp={pp} "
                                        "(Megatron: pp*vpp stages separated by '|')")
    return PipelineLayout(pp=pp, vpp=len(stages) // pp, stages=tuple(stages))


def check_layout(layout: PipelineLayout, text: str, num_layers: int, mtp_layers: int) -> None:
    """Megatron-Core's validate_layer_layout, plus where our builder places the embedding
    and the output layer (virtual stage 0 and the last one, as Megatron-Core builds them):
    one ConfigError naming what is wrong."""
    first, last = layout.stages[0], layout.stages[-1]
    if layout.count("E") != 1 or not first or first[0] != "E":
        raise ConfigError(_FIELD, text, "needs exactly one E (embedding), as the first symbol of the first stage")
    if layout.count("L") != 1 or not last or last[-1] != "L":
        raise ConfigError(_FIELD, text, "needs exactly one L (loss), as the last symbol of the last stage")
    if layout.count("t") != num_layers:
        raise ConfigError(_FIELD, text, f"holds {layout.count('t')} transformer layers (t); the model has "
                                        f"num_layers={num_layers}")
    if layout.count("m") != mtp_layers:
        raise ConfigError(_FIELD, text, f"holds {layout.count('m')} MTP layers (m); the model has "
                                        f"mtp_num_layers={mtp_layers}")
    if mtp_layers:
        flat = [c for s in layout.stages for c in s]
        if "t" in flat[flat.index("m"):]:
            raise ConfigError(_FIELD, text, "MTP layers (m) must come after every transformer layer (t)")
        holders = [v for v, s in enumerate(layout.stages) if "m" in s]
        if len(holders) != 1 or holders[0] // layout.pp != layout.vpp - 1:
            raise ConfigError(_FIELD, text, "all MTP layers (m) must be in one virtual stage, the last chunk of "
                                            "its pipeline rank (Megatron-Core's restriction)")
