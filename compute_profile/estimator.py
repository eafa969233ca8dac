"""Roofline estimator: a compute op's time from its FLOPs, bytes and shape, for any GPU spec.

    time = max(flops / (peak(dtype) * eff_compute), bytes / (hbm_bw * eff_memory))
           + launches * launch_overhead_s

The efficiencies carry the physics a plain roofline misses (docs/compute_profile.md):

- GEMM (and grouped GEMM, and the router's skinny GEMM): the library tiles C[m, n] into
  CTA tiles; partial edge tiles waste work (tile quantisation) and the last wave of tiles
  over the SMs may be partly empty (wave quantisation). The model picks the tile that
  maximises ``rel * tile_util * wave_util`` as cuBLAS's heuristics roughly do, falls back on
  split-K when the tiles do not fill the SMs once, and multiplies by ``k / (k + k_overhead)``
  for the fixed prologue/epilogue of the K loop. The cap ``max_efficiency`` is the best a
  large GEMM reaches on that GPU.
- Attention (flash): CTAs are (batch, head, block of ``block_q`` query rows); the same tile
  and wave quantisation applies; each query row's pass over its keys has a fixed overhead
  (``L / (L + seq_overhead)``, L = keys seen per row, half the sequence when causal);
  head_dim sets how well the tensor cores are fed (table, linear interpolation). Backward
  has its own cap. A sliding window (shape's 7th field) runs whole ``block_kv`` KV tiles per
  query tile, partly masked, and is charged for them (:func:`attention_efficiency`).
- Both caps are public best-case kernel figures. ``tensor_throughput`` scales every
  tensor-core kernel's efficiency by one per-GPU factor: the fraction of those figures a
  training job sustains (clocks under power and thermal limits, library versions slow a GEMM
  and an attention kernel alike). It is 1.0 unless the GPU's measured runs fit it.
- Everything else is memory-bound: bytes at a per-kind fraction of HBM bandwidth, with the
  op's FLOPs at a fraction of the fp32 (CUDA-core) peak as the compute side.

Every number lives in ``compute_profile/data/estimator_params.yaml`` (defaults plus per-GPU
overrides); nothing tunable is in this file. No torch: this runs on the analytical path.
"""
from __future__ import annotations

import bisect
import copy
import math
from dataclasses import replace
from functools import lru_cache
from pathlib import Path
from typing import Any

from workload_gen.core.errors import ConfigError
from workload_gen.core.flops import attention_pairs
from workload_gen.core.gpu_specs import GpuSpec, find_gpu, get_gpu
from workload_gen.core.record import record
from workload_gen.core.parallel_config import DTYPE_BYTES
from workload_gen.core.records import (EXPERT_OP_PREFIX, FP8_PARAM_TRANSPOSE_OP, FP8_WEIGHT_CAST_OP, QUANTIZE_SUFFIX, ComputeOp,
                                      OpKind, Phase, attention_mask)
from workload_gen.core.yaml_file import read_yaml_mapping

PARAMS_PATH = Path(__file__).resolve().parent / "data" / "estimator_params.yaml"
CALIBRATED_PATH = Path(__file__).resolve().parent / "data" / "calibrated.yaml"
"""Fitted values of the declared parameters (written by ``compute-profile calibrate --write``)."""

TENSOR_KINDS = frozenset({OpKind.GEMM, OpKind.GROUPED_GEMM, OpKind.ATTENTION, OpKind.ROUTER})
"""Kinds whose FLOPs run on tensor cores at the op's dtype; the rest use the fp32 vector peak."""


# --- parameters ------------------------------------------------------------------
@record
class Tile:
    m: int
    n: int
    rel: float


@record
class GemmParams:
    max_efficiency: float
    """Best fraction of the dense bf16/fp16 peak a large GEMM sustains on this GPU."""
    fp8_speedup: float
    """FP8 GEMM FLOP/s over bf16 at the same shape (below the 2x of the datasheet peaks:
    cuBLAS 12.9 reports 1.25-1.75x on Hopper)."""
    fp4_speedup: float
    """NVFP4 GEMM FLOP/s over bf16 at the same shape, on GPUs with FP4 tensor cores
    (Blackwell); a GPU without an "fp4" peak refuses fp4 training before this is read."""
    k_overhead: float
    fp8_k_overhead: float
    """The K-loop's fixed prologue/epilogue in K units for FP8 GEMMs: larger than bf16's,
    because the loop itself runs faster while the fixed part does not."""
    grouped_efficiency: float
    grouped_issue_s: float
    """Host time to issue one expert's GEMM of a grouped GEMM: Transformer Engine runs a
    grouped GEMM as one cuBLAS call per expert, issued one after another from the host, so
    many small experts take at least experts x this, however little each computes."""
    grouped_memory_exposure: float
    """Share of the shorter of an expert grouped GEMM's math and memory time that does not
    hide behind the longer (busy = max + this x min; 0: the roofline's full overlap). TE's
    grouped GEMM is one cuBLAS GEMM per expert spread over a few streams: each expert's
    weight (and, in wgrad, its fp32 gradient) streams in and out around its own short math,
    so the per-expert kernels overlap one another's phases only in part."""
    blockwise_fp8_rate: float
    """Fraction of the per-tensor FP8 GEMM rate that FP8 GEMMs with 1x128 / 128x128 block
    scales reach (applied by compute_profile.attaching for the blockwise recipe)."""
    mxfp8_rate: float
    """Fraction of the per-tensor FP8 GEMM rate that MXFP8 GEMMs (an E8M0 scale per 32
    elements, applied by Blackwell's block-scaled MMA) reach: the scale factors are operands
    the kernel loads and the MMA consumes beside the data (applied by compute_profile.attaching
    for the mxfp8 recipe)."""
    memory_efficiency: float
    tiles: tuple[Tile, ...]
    split_k_max: int
    split_k_min_k: int
    split_k_rel: float


@record
class AttentionParams:
    fwd_max_efficiency: float
    bwd_max_efficiency: float
    block_q: int
    seq_overhead: float
    head_dims: tuple[int, ...]
    head_dim_factors: tuple[float, ...]
    memory_efficiency: float
    block_kv: int = 128
    """Key rows per KV tile of the kernel's inner loop: a sliding window visits whole KV tiles
    (attention_efficiency)."""


@record
class EstimatorParams:
    """The estimator's parameters for one GPU (defaults merged with its overrides)."""

    gpu: str
    launch_overhead_s: float
    launches: tuple[tuple[str, int], ...]
    gemm: GemmParams
    attention: AttentionParams
    mem_default: float
    mem_by_kind: tuple[tuple[str, float], ...]
    vector_flops_efficiency: float
    scaling_max_ratio: float
    step_overhead_s: float = 0.0
    """Fixed host-side work of one optimizer step (workload op ``step_overhead``)."""
    overlap_slowdown: float = 0.0
    """Fractional slow-down of a compute kernel while a collective runs beside it on the
    same GPU (applied by the engine where the timeline overlaps; Workload.overlap_slowdown)."""
    tensor_throughput: float = 1.0
    """Sustained fraction of the public kernel figures (the GEMM and attention caps) that a
    training job on this GPU reaches: one factor on every tensor-core kernel, because what
    lowers it (clocks under power and thermal limits, library versions) slows a GEMM and a
    flash-attention kernel alike."""
    fp8_transpose_copies: bool = True
    """A per-tensor fp8 quantize writes the transposed copy too (FP8 GEMMs take the TN layout
    only: Hopper), as the workload's cast bytes count it; False where they take any layout
    (set at attach for a delayed or current-scaling run on such a GPU:
    compute_profile.attaching.fp8_run_params), and :func:`explain` leaves that write out."""

    def launch_count(self, kind: str, phase: str) -> int:
        table = dict(self.launches)
        return table.get(f"{kind}/{phase}", table.get(kind, 1))

    def memory_efficiency(self, kind: str, phase: str = "") -> float:
        table = dict(self.mem_by_kind)
        return table.get(f"{kind}/{phase}", table.get(kind, self.mem_default))


def _deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _deep_merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def _positive(src: str, field: str, value: Any, upper: float | None = None) -> float:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not value > 0 or (
            upper is not None and value > upper):
        bound = f" and <= {upper}" if upper is not None else ""
        raise ConfigError(field, value, f"must be a number > 0{bound}", src)
    return float(value)


def _datasheet_fp4_ratio(gpu: str) -> float:
    """The most an NVFP4 GEMM can gain over a BF16 one on ``gpu``: its datasheet's dense FP4 over
    BF16 peak (4 on B200 and GB200, 6 on Blackwell Ultra), 4 where the spec has no FP4 peak.
    ``gemm.fp4_speedup`` above it would claim more than the tensor cores do."""
    spec = find_gpu(gpu)
    peaks = spec.peak_flops if spec is not None else {}
    return peaks["fp4"] / peaks["bf16"] if "fp4" in peaks and peaks.get("bf16") else 4.0


def _nonnegative(src: str, field: str, value: Any, upper: float | None = None) -> float:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not value >= 0 or math.isinf(value) or (
            upper is not None and value > upper):
        bound = f" and <= {upper}" if upper is not None else ""
        raise ConfigError(field, value, f"must be a finite number >= 0{bound}", src)
    return float(value)


def params_from_dict(gpu: str, raw: dict[str, Any], src: str = "estimator parameters") -> EstimatorParams:
    """Build and validate one GPU's parameters from a merged mapping."""
    try:
        g, a, mb = raw["gemm"], raw["attention"], raw["memory_bound"]
        tiles = tuple(Tile(int(t["m"]), int(t["n"]), _positive(src, "gemm.tiles.rel", t["rel"], 1.0))
                      for t in g["tiles"])
        if not tiles:
            raise ConfigError("gemm.tiles", [], "needs at least one tile", src)
        hd = sorted((int(k), float(v)) for k, v in a["head_dim_factor"].items())
        sk = g.get("split_k", {"max_splits": 1, "min_k_per_split": 1, "rel": 1.0})
        return EstimatorParams(
            gpu=gpu,
            launch_overhead_s=float(raw["launch_overhead_s"]),
            launches=tuple(sorted((str(k), int(v)) for k, v in raw.get("launches", {}).items())),
            gemm=GemmParams(
                max_efficiency=_positive(src, "gemm.max_efficiency", g["max_efficiency"], 1.0),
                fp8_speedup=_positive(src, "gemm.fp8_speedup", g.get("fp8_speedup", 2.0), 2.0),
                fp4_speedup=_positive(src, "gemm.fp4_speedup", g.get("fp4_speedup", 4.0), _datasheet_fp4_ratio(gpu)),
                k_overhead=float(g["k_overhead"]),
                fp8_k_overhead=float(g.get("fp8_k_overhead", g["k_overhead"])),
                grouped_efficiency=_positive(src, "gemm.grouped_efficiency", g["grouped_efficiency"], 1.0),
                blockwise_fp8_rate=_positive(src, "gemm.blockwise_fp8_rate", g.get("blockwise_fp8_rate", 1.0), 1.0),
                mxfp8_rate=_positive(src, "gemm.mxfp8_rate", g.get("mxfp8_rate", 1.0), 1.0),
                grouped_issue_s=_nonnegative(src, "gemm.grouped_issue_s", g.get("grouped_issue_s", 0.0), 1e-3),
                grouped_memory_exposure=_nonnegative(src, "gemm.grouped_memory_exposure",
                                                     g.get("grouped_memory_exposure", 0.0), 1.0),
                memory_efficiency=_positive(src, "gemm.memory_efficiency", g["memory_efficiency"], 1.0),
                tiles=tiles,
                split_k_max=int(sk["max_splits"]), split_k_min_k=int(sk["min_k_per_split"]),
                split_k_rel=_positive(src, "gemm.split_k.rel", sk["rel"], 1.0),
            ),
            attention=AttentionParams(
                fwd_max_efficiency=_positive(src, "attention.fwd_max_efficiency", a["fwd_max_efficiency"], 1.0),
                bwd_max_efficiency=_positive(src, "attention.bwd_max_efficiency", a["bwd_max_efficiency"], 1.0),
                block_q=int(a["block_q"]), seq_overhead=float(a["seq_overhead"]),
                block_kv=int(a.get("block_kv", 128)),
                head_dims=tuple(h for h, _ in hd), head_dim_factors=tuple(f for _, f in hd),
                memory_efficiency=_positive(src, "attention.memory_efficiency", a["memory_efficiency"], 1.0),
            ),
            mem_default=_positive(src, "memory_bound.default_efficiency", mb["default_efficiency"], 1.0),
            mem_by_kind=tuple(sorted((str(k), _positive(src, f"memory_bound.by_kind.{k}", v, 1.0))
                                     for k, v in mb.get("by_kind", {}).items())),
            vector_flops_efficiency=_positive(src, "memory_bound.vector_flops_efficiency",
                                              mb["vector_flops_efficiency"], 1.0),
            scaling_max_ratio=float(raw.get("scaling", {}).get("max_ratio", 16.0)),
            step_overhead_s=_nonnegative(src, "step_overhead_s", raw.get("step_overhead_s", 0.0)),
            overlap_slowdown=_nonnegative(src, "overlap_slowdown", raw.get("overlap_slowdown", 0.0)),
            tensor_throughput=_positive(src, "tensor_throughput", raw.get("tensor_throughput", 1.0), 2.0),
        )
    except KeyError as exc:
        raise ConfigError(f"{gpu}.{exc.args[0]}", None, "is missing from the estimator parameters", src) from None


@record
class DeclaredParameter:
    """A parameter of the compute model that calibration may fit: where it lives in the
    parameter file, its prior (the value used until calibrated), its bounds, and the
    public source of the prior."""

    path: str
    """Dotted path in the parameter file, e.g. ``gpus.h100-sxm.gemm.max_efficiency``."""
    prior: float
    lower: float
    upper: float
    source: str
    sigma: float
    """Standard deviation of the Gaussian prior: the file's ``sigma`` where the kernel-level
    data behind the prior measure its spread, else a quarter of the bounds' width."""


def _unwrap(node: Any, path: str, declared: list[DeclaredParameter], src: str) -> Any:
    """The plain mapping behind the annotated file: ``{value: V, source: S}`` is a constant
    with its source, ``{prior: P, bounds: [lo, hi], source: S}`` a fitted parameter whose
    value is P until calibrated; both become their number."""
    if isinstance(node, dict):
        if "prior" in node:
            b = node.get("bounds")
            if (not isinstance(b, list) or len(b) != 2 or not all(isinstance(x, (int, float)) for x in b)
                    or not b[0] <= node["prior"] <= b[1]):
                raise ConfigError(f"{path}.bounds", b, "needs [lower, upper] around the prior", src)
            if not node.get("source"):
                raise ConfigError(f"{path}.source", None, "a fitted parameter needs the source of its prior", src)
            sigma = node.get("sigma", (b[1] - b[0]) / 4)
            if isinstance(sigma, bool) or not isinstance(sigma, (int, float)) or not 0 < sigma <= b[1] - b[0]:
                raise ConfigError(f"{path}.sigma", sigma, "needs a number above 0 and at most the bounds' width", src)
            declared.append(DeclaredParameter(path, float(node["prior"]), float(b[0]), float(b[1]),
                                              str(node["source"]), float(sigma)))
            return float(node["prior"])
        if "value" in node and "source" in node:
            return node["value"]
        return {k: _unwrap(v, f"{path}.{k}" if path else str(k), declared, src) for k, v in node.items()}
    return node


@lru_cache(maxsize=4)
def _load_yaml(path: str) -> tuple[dict[str, Any], tuple[DeclaredParameter, ...]]:
    data = read_yaml_mapping(path, "'defaults' and 'gpus' sections")
    if "defaults" not in data:
        raise ConfigError("defaults", None, "the estimator parameter file needs a 'defaults' mapping", path)
    declared: list[DeclaredParameter] = []
    plain = _unwrap(data, "", declared, path)
    return plain, tuple(declared)


def declared_parameters(path: str | None = None) -> tuple[DeclaredParameter, ...]:
    """Every parameter calibration may fit, in file order."""
    return _load_yaml(str(path or PARAMS_PATH))[1]


@lru_cache(maxsize=4)
def calibrated_values(path: str | None = None) -> tuple[tuple[str, float], ...]:
    """The fitted values ``compute-profile calibrate --write`` stored (path, value); empty
    when the file does not exist (every fitted parameter is then at its prior)."""
    p = Path(path) if path is not None else CALIBRATED_PATH
    if not p.exists():
        return ()
    data = read_yaml_mapping(p, "a 'parameters' mapping of dotted paths to values")
    values = data.get("parameters") or {}
    if not isinstance(values, dict):
        raise ConfigError("parameters", values, "must map dotted parameter paths to numbers", str(p))
    return tuple((str(k), float(v)) for k, v in values.items())


def _set_path(data: dict[str, Any], dotted: str, value: float, src: str) -> None:
    head, *rest = dotted.split(".")
    node = data
    parts = [head, *rest]
    for part in parts[:-1]:
        if not isinstance(node.get(part), dict):
            raise ConfigError("parameter", dotted, "no such parameter in the estimator parameter file", src)
        node = node[part]
    if parts[-1] not in node:
        raise ConfigError("parameter", dotted, "no such parameter in the estimator parameter file", src)
    node[parts[-1]] = value


@lru_cache(maxsize=256)
def load_params(gpu: str, path: str | None = None,
                overrides: tuple[tuple[str, float], ...] | None = None) -> EstimatorParams:
    """Parameters for ``gpu`` (a gpu_specs name or alias): defaults + that GPU's overrides,
    with the fitted parameters at their calibrated values (``overrides=None``: the
    shipped calibration, compute_profile/data/calibrated.yaml) or at the given ones
    (calibration evaluating a candidate; ``()`` means every fitted parameter at its prior).

    A GPU without an override section gets the defaults (documented, not an error), so a
    user-defined GPU spec still has an estimate.
    """
    src = str(path or PARAMS_PATH)
    plain, declared = _load_yaml(src)
    values = calibrated_values() if overrides is None and path is None else (overrides or ())
    data = copy.deepcopy(plain)
    for dotted, value in values:
        _set_path(data, dotted, value, src)
    name = get_gpu(gpu).name
    sections = data.get("gpus") or {}
    own = sections.get(name) or {}
    base = data["defaults"]
    if "sustains_like" in own:  # defaults, then the sibling's fitted values, then its own
        fit = _sibling_fit(name, own["sustains_like"], sections, declared, src, float(base.get("power_exponent", 1.0)))
        base = _deep_merge(base, fit)
    return params_from_dict(name, _deep_merge(base, own), src)


def power_scaled_throughput(fitted: float, sibling: GpuSpec, gpu: GpuSpec, exponent: float) -> float:
    """The ``tensor_throughput`` a GPU takes from the sibling whose fit it shares.

    Why: a fitted ``tensor_throughput`` is mostly the clock a GEMM-bound step holds at the
    board's power limit (the sibling's long kernels ran at ~0.7 of its short ones). Two parts
    of one silicon at different limits (B200 at 1,000 W, GB200 at 1,200 W, GB300 at 1,400 W)
    then sustain absolute tensor rates in the ratio of their limits to ``exponent``
    (defaults.power_exponent, from a GB300 power-cap sweep), not the same fraction of their
    datasheet peaks, which assume different clocks. Capped at 1: no part runs faster than the
    public kernel figures (the caps) measured at an unthrottled clock. Parts at the same
    limit and peak (H200 and H800 beside H100 SXM) keep the fitted value as it is; so does a
    part whose limit, or its sibling's, is not known (0)."""
    if gpu.board_power_w <= 0 or sibling.board_power_w <= 0:
        return fitted
    rate = fitted * sibling.peak("bf16") * (gpu.board_power_w / sibling.board_power_w) ** exponent
    return min(1.0, rate / gpu.peak("bf16"))


@record
class ThroughputCarry:
    """How a GPU without a fit of its own takes its sibling's tensor rate (``sustains_like``)."""

    sibling: str
    """The GPU whose fitted ``tensor_throughput`` this one carries."""
    sibling_power_w: int
    power_w: int
    rate_ratio: float
    """This GPU's sustained tensor rate (FLOP/s) over its sibling's: the power law's
    (power_w / sibling_power_w) ** exponent, less where the cap at 1 binds."""


def throughput_carry(gpu: str, path: str | None = None) -> ThroughputCarry | None:
    """The power-law carry of ``gpu``'s tensor throughput from its ``sustains_like`` sibling, or
    None for a GPU with a section of its own fit (or none) or at its sibling's board power.

    Why: the carried rate is an extrapolation (:func:`power_scaled_throughput`), not a fit,
    and a prediction on such a GPU should say so; run-analytical prints it."""
    src = str(path or PARAMS_PATH)
    plain, _declared = _load_yaml(src)
    spec = get_gpu(gpu)
    sibling = ((plain.get("gpus") or {}).get(spec.name) or {}).get("sustains_like")
    if not isinstance(sibling, str):
        return None
    other = get_gpu(sibling)
    if spec.board_power_w <= 0 or other.board_power_w <= 0 or spec.board_power_w == other.board_power_w:
        return None
    own = load_params(spec.name, path).tensor_throughput * spec.peak("bf16")
    theirs = load_params(other.name, path).tensor_throughput * other.peak("bf16")
    return ThroughputCarry(other.name, other.board_power_w, spec.board_power_w, own / theirs)


def _sibling_fit(name: str, sibling: Any, sections: dict[str, Any], declared: tuple[DeclaredParameter, ...],
                 src: str, power_exponent: float) -> dict[str, Any]:
    """``sustains_like: X``: a GPU of the same silicon as X has the same FP8 data path and the
    same kernels, so X's fitted per-GPU parameters apply to it (as a nested mapping, which the
    GPU's own section then overrides), its ``tensor_throughput`` carried to the GPU's own board
    power (:func:`power_scaled_throughput`; unchanged for H200 and H800 beside H100 SXM)."""
    if not isinstance(sibling, str) or not isinstance(sections.get(sibling), dict):
        raise ConfigError(f"gpus.{name}.sustains_like", sibling, "must name another GPU section of this file", src)
    prefix = f"gpus.{sibling}."
    out: dict[str, Any] = {}
    for d in declared:
        if d.path.startswith(prefix):
            *parents, leaf = d.path[len(prefix):].split(".")
            value, target = sections[sibling], out
            for part in parents:
                value, target = value[part], target.setdefault(part, {})
            target[leaf] = value[leaf]
    if "tensor_throughput" in out:
        out["tensor_throughput"] = power_scaled_throughput(float(out["tensor_throughput"]), get_gpu(sibling),
                                                           get_gpu(name), power_exponent)
    return out


# --- efficiency models ---------------------------------------------------------------
def _tile_wave_util(rows: int, cols: int, tm: int, tn: int, sms: int, groups: int = 1) -> tuple[float, float, int]:
    """(tile utilisation, wave utilisation, tile count) of C[rows, cols] x groups on ``sms`` SMs."""
    tiles = groups * math.ceil(rows / tm) * math.ceil(cols / tn)
    tile_util = groups * rows * cols / (tiles * tm * tn)
    waves = math.ceil(tiles / sms)
    return tile_util, tiles / (waves * sms), tiles


def gemm_efficiency(m: int, n: int, k: int, sm_count: int, p: GemmParams, groups: int = 1) -> float:
    """Fraction of peak a GEMM C[m,n] = A[m,k] B[k,n] (``groups`` of them, grouped) reaches.

    Never above ``p.max_efficiency``; equal to it only for tile-aligned shapes that fill
    whole waves with long K.
    """
    if min(m, n, k, groups) <= 0:
        return p.max_efficiency
    best = 0.0
    for t in p.tiles:
        tile_util, wave_util, tiles = _tile_wave_util(m, n, t.m, t.n, sm_count, groups)
        score = t.rel * tile_util * wave_util
        if tiles < sm_count and p.split_k_max > 1:
            # Split-K: several CTAs share one output tile's K loop, then a reduction pass.
            splits = min(p.split_k_max, sm_count // tiles, max(1, k // p.split_k_min_k))
            if splits > 1:
                split_tiles = tiles * splits
                waves = math.ceil(split_tiles / sm_count)
                score = max(score, t.rel * p.split_k_rel * tile_util * split_tiles / (waves * sm_count))
        best = max(best, score)
    k_factor = k / (k + p.k_overhead)
    eff = p.max_efficiency * best * k_factor
    if groups > 1:
        eff *= p.grouped_efficiency
    return eff


def head_dim_factor(head_dim: int, p: AttentionParams) -> float:
    """Linear interpolation in the head_dim table, clamped at its ends."""
    hs, fs = p.head_dims, p.head_dim_factors
    if head_dim <= hs[0]:
        return fs[0]
    if head_dim >= hs[-1]:
        return fs[-1]
    i = bisect.bisect_right(hs, head_dim)
    h0, h1, f0, f1 = hs[i - 1], hs[i], fs[i - 1], fs[i]
    return f0 + (f1 - f0) * (head_dim - h0) / (h1 - h0)


def window_kv_tiles(s: int, window: int, block_q: int, block_kv: int) -> int:
    """KV tiles a causal sliding-window flash kernel visits over a sequence of ``s`` tokens,
    summed over its query tiles (FlashAttention's local mask, ``n_block_min`` /
    ``n_block_max`` of hopper/block.h): query tile i (rows i*M .. min((i+1)*M, s)-1) sees keys
    max(0, i*M - w) .. its last row, so it runs tiles floor(max(0, i*M - w) / N) up to
    ceil(min((i+1)*M, s) / N), whole tiles, the window's edge and the diagonal partly masked."""
    return _window_kv_tiles(s, window, block_q, block_kv)


@lru_cache(maxsize=1024)
def _window_kv_tiles(s: int, w: int, m: int, n: int) -> int:
    total = 0
    for i in range(-(-s // m)):
        total += -(-min((i + 1) * m, s) // n) - max(0, i * m - w) // n
    return total


def attention_efficiency(batch: int, heads: int, seq_q: int, seq_kv: int, head_dim: int, causal: bool,
                         backward: bool, sm_count: int, p: AttentionParams, window: int = 0) -> float:
    """Fraction of peak a flash-attention kernel reaches (forward or backward).

    Full attention: ``L / (L + seq_overhead)`` with L the keys per query row (half the
    sequence when causal). ``window`` > 0 (causal sliding window, seq_q == seq_kv): the kernel
    runs whole KV tiles (window_kv_tiles), so its useful fraction is the band's pairs per row
    over the tiles' key slots per row plus the fixed per-row overhead, ``useful / (visited +
    seq_overhead - block_kv/2)``: seq_overhead was fitted on causal kernels, whose diagonal
    tiles already cost half a tile per row, and with the window covering the sequence the
    two forms agree. The backward visits the transposed band (query tiles of each KV tile),
    the same count with square tiles; it is taken equal."""
    cap = p.bwd_max_efficiency if backward else p.fwd_max_efficiency
    tile_util, wave_util, _ = _tile_wave_util(seq_q, 1, p.block_q, 1, sm_count, batch * heads)
    if window > 0:
        useful = attention_pairs(seq_q, ("window", window)) / seq_q
        visited = window_kv_tiles(seq_q, window, p.block_q, p.block_kv) * p.block_kv * p.block_q / (
            -(-seq_q // p.block_q) * p.block_q)
        seq_factor = useful / (visited + p.seq_overhead - p.block_kv / 2)
    else:
        keys_per_row = seq_kv / 2 if causal else seq_kv
        seq_factor = keys_per_row / (keys_per_row + p.seq_overhead)
    return cap * tile_util * wave_util * seq_factor * head_dim_factor(head_dim, p)


# --- the estimate ----------------------------------------------------------------------
@record
class Estimate:
    """An estimate with its terms, for explanations and tests."""

    time_s: float
    compute_s: float
    memory_s: float
    launch_s: float
    compute_efficiency: float
    memory_efficiency: float
    issue_s: float = 0.0
    """Host issue floor (grouped GEMMs: experts x gemm.grouped_issue_s); 0 for other ops."""

    @property
    def memory_bound(self) -> bool:
        return self.memory_s > self.compute_s


def _compute_efficiency(op: ComputeOp, spec: GpuSpec, p: EstimatorParams) -> float:
    if op.kind in TENSOR_KINDS:
        return p.tensor_throughput * _tensor_shape_efficiency(op, spec, p)
    return p.vector_flops_efficiency


def _tensor_shape_efficiency(op: ComputeOp, spec: GpuSpec, p: EstimatorParams) -> float:
    """A tensor-core kernel's fraction of peak by its shape, at the public kernel figures."""
    kind, s = op.kind, op.shape
    g = p.gemm if op.dtype != "fp8" else replace(p.gemm, k_overhead=p.gemm.fp8_k_overhead)
    if kind is OpKind.GEMM and len(s) >= 3:
        return gemm_efficiency(s[0], s[1], s[2], spec.sm_count, g)
    if kind is OpKind.GROUPED_GEMM and len(s) >= 4:
        return gemm_efficiency(s[1], s[2], s[3], spec.sm_count, g, groups=s[0])
    if kind is OpKind.ROUTER and len(s) >= 3:
        return gemm_efficiency(s[0], s[2], s[1], spec.sm_count, g)
    if kind is OpKind.ATTENTION and len(s) >= 5:
        causal, window = attention_mask(s)
        backward = Phase(op.phase) in (Phase.BWD_INPUT, Phase.BWD_WEIGHT)
        return attention_efficiency(s[0], s[1], s[2], s[3], s[4], causal, backward, spec.sm_count, p.attention,
                                    window)
    return p.gemm.max_efficiency  # shape too short to model: plain cap


def is_expert_gemm(op: ComputeOp) -> bool:
    """An MoE experts' grouped GEMM (workload_gen.core.records.EXPERT_OP_PREFIX), which
    Transformer Engine runs as one GEMM per expert: the issue floor and the partly exposed
    memory time apply to it, not to other grouped GEMMs (one batched call)."""
    return OpKind(op.kind) is OpKind.GROUPED_GEMM and op.name.startswith(EXPERT_OP_PREFIX) and bool(op.shape)


def _without_transpose_write(op: ComputeOp) -> float:
    """``op``'s bytes on a GPU whose FP8 GEMMs take any layout, in a per-tensor fp8 run: a
    quantize (``*.fp8_cast``, the per-step ``fp8_weight_cast``) writes its data alone, not the
    transposed copy too (one fp8 byte per element, its shape's first two
    entries); the gathered weights' transpose is not made at all. Any other op: its bytes."""
    name = op.name
    if name == FP8_PARAM_TRANSPOSE_OP:
        return 0.0
    if name.endswith(QUANTIZE_SUFFIX["fp8"]) or name == FP8_WEIGHT_CAST_OP:
        return max(0.0, op.bytes - DTYPE_BYTES["fp8"] * op.shape[0] * op.shape[1])
    return op.bytes


def explain(op: ComputeOp, gpu: GpuSpec | str, params: EstimatorParams | None = None) -> Estimate:
    """The estimate of ``op`` on ``gpu`` with its compute, memory and launch terms."""
    spec = gpu if isinstance(gpu, GpuSpec) else get_gpu(gpu)
    p = params if params is not None else load_params(spec.name)
    kind = OpKind(op.kind)
    if kind is OpKind.OPTIMIZER and op.shape[:1] == (0,):
        # the step's fixed host work (workload op step_overhead): no kernel, a constant
        return Estimate(p.step_overhead_s, 0.0, 0.0, p.step_overhead_s, 0.0, 0.0)
    eff_c = _compute_efficiency(op, spec, p)
    nbytes = op.bytes if p.fp8_transpose_copies else _without_transpose_write(op)
    if kind not in TENSOR_KINDS:
        peak = spec.peak("fp32")
    elif op.dtype == "fp8":
        # FP8 GEMMs: the GPU must have FP8 tensor cores (spec.peak raises otherwise); their
        # rate is the bf16 rate of the same shape times the measured library speed-up,
        # not the datasheet's 2x (cuBLAS 12.9 on Hopper: 1.25-1.75x).
        spec.peak("fp8")
        peak = spec.peak("bf16") * p.gemm.fp8_speedup
    elif op.dtype == "fp4":
        # NVFP4 GEMMs: FP4 tensor cores required (spec.peak raises otherwise); the rate is the
        # bf16 rate of the same shape times gemm.fp4_speedup. Blackwell applies the E4M3
        # block scales in the MMA and accumulates in FP32 tensor memory, so the K loop's
        # fixed part is bf16's (no fp8_k_overhead).
        spec.peak("fp4")
        peak = spec.peak("bf16") * p.gemm.fp4_speedup
    else:
        peak = spec.peak(op.dtype)
    if kind in (OpKind.GEMM, OpKind.GROUPED_GEMM):
        eff_m = p.gemm.memory_efficiency
    elif kind is OpKind.ATTENTION:
        eff_m = p.attention.memory_efficiency
    else:
        eff_m = p.memory_efficiency(kind.value, Phase(op.phase).value)
    compute_s = op.flops / (peak * eff_c) if op.flops > 0 else 0.0
    memory_s = nbytes / (spec.hbm_bw * eff_m) if nbytes > 0 else 0.0
    launches = p.launch_count(kind.value, Phase(op.phase).value)
    if kind in (OpKind.ELEMENTWISE, OpKind.PERMUTE, OpKind.ROPE) and len(op.shape) == 3:  # its kernel count (shape_doc)
        launches = op.shape[2]
    launch_s = launches * p.launch_overhead_s
    per_expert = is_expert_gemm(op)
    issue_s = op.shape[0] * p.gemm.grouped_issue_s if per_expert else 0.0
    busy = max(compute_s, memory_s)
    if per_expert:
        busy += p.gemm.grouped_memory_exposure * min(compute_s, memory_s)
    return Estimate(max(busy, issue_s) + launch_s, compute_s, memory_s, launch_s, eff_c, eff_m, issue_s)


def estimate_time(op: ComputeOp, gpu: GpuSpec | str, params: EstimatorParams | None = None) -> float:
    """Estimated seconds of one call of ``op`` on ``gpu`` (a GpuSpec or a spec name)."""
    return explain(op, gpu, params).time_s


