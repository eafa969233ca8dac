"""Attach a time to every compute op of a workload, and say where each time came from.

Order of preference for one op (its key: compute_profile.keys):

1. **exact**: the database has a row for (gpu, kind, shape_key, dtype, phase): its time, with
   the row's own source (measured, imported or estimated).
2. **scaled**: the nearest stored shape of the same (gpu, kind, phase, dtype) (and the same op
   name for elementwise ops): nearest dimension by dimension (the smallest sum of
   |log(op dim / row dim)|; by size alone, 160 experts of 154 tokens would stand in for
   20 experts of 1232, the same FLOPs and a third of the speed); time = row time x (op
   size / row size), size being FLOPs or, when the roofline says the op is memory-bound on
   this GPU, bytes. Only within ``scaling.max_ratio`` (estimator_params.yaml) of size,
   because a linear scale over a large size range misses the efficiency change the
   estimator models.
3. **estimated**: the roofline estimator (compute_profile.estimator).

Speed: ops of identical layers share keys, so each distinct key is resolved once and the
database is queried once per (kind, phase, dtype) family, never once per op; the per-op
work is one dict lookup and one record copy (scripts/bench_attach.py reports the figure).
"""
from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

from compute_profile.db import ProfileDB, ProfileRow
from compute_profile.estimator import EstimatorParams, explain, load_params
from compute_profile.keys import NAMED_KINDS, key_variant, parse_shape, profile_phase, reads_fp8_rows, shape_key
from formats.gc_pause import no_cyclic_gc
from workload_gen.core.errors import ConfigError
from workload_gen.core.gpu_specs import GpuSpec, get_gpu
from workload_gen.core.parallel_config import DTYPE_BYTES, PER_TENSOR_FP8
from workload_gen.core.record import record
from workload_gen.core.records import ComputeOp, OpKind, TimeSource, Workload

_ROW_SOURCE = {"measured": TimeSource.MEASURED, "imported": TimeSource.IMPORTED,
               "estimated": TimeSource.ESTIMATED}


@record
class Coverage:
    """Where the compute time of a workload came from.

    Times are weighted as the iteration runs them: per-micro-batch ops (forward, backward)
    count ``num_microbatches`` times, once-per-iteration ops once, summed over the
    pipeline stages' representative ranks. Shares are fractions of ``total_s``.
    """

    total_s: float
    measured_s: float
    scaled_s: float
    estimated_s: float
    imported_s: float
    ops: int
    """Compute ops in the workload (each op once, unweighted)."""
    distinct_keys: int
    """Distinct profile keys among them: the lookups actually made."""

    def share(self, source: TimeSource | str) -> float:
        part = {"measured": self.measured_s, "scaled": self.scaled_s,
                "estimated": self.estimated_s, "imported": self.imported_s}[str(TimeSource(source))]
        return part / self.total_s if self.total_s > 0 else 0.0

    @property
    def measured(self) -> float:
        return self.share(TimeSource.MEASURED)

    @property
    def scaled(self) -> float:
        return self.share(TimeSource.SCALED)

    @property
    def estimated(self) -> float:
        return self.share(TimeSource.ESTIMATED)

    @property
    def imported(self) -> float:
        return self.share(TimeSource.IMPORTED)

    def as_dict(self) -> dict[str, float | int]:
        return {"compute_time_s": self.total_s, "measured": self.measured, "scaled": self.scaled,
                "estimated": self.estimated, "imported": self.imported,
                "ops": self.ops, "distinct_keys": self.distinct_keys}

    def summary(self) -> str:
        """One line, e.g. ``measured 81.2%, scaled 3.1%, estimated 15.7%, imported 0.0%``."""
        return ", ".join(f"{s} {100 * self.share(s):.1f}%" for s in ("measured", "scaled", "estimated", "imported"))


class TimeResolver:
    """Resolves op times for one GPU against one database, caching every decision.

    Usable on its own (``resolver.time(op) -> (seconds, TimeSource)``) by code that times
    ops outside a Workload.
    """

    def __init__(self, gpu: GpuSpec | str, db: ProfileDB | None = None,
                 params: EstimatorParams | None = None, *, fp8_recipe: str = "delayed") -> None:
        """``fp8_recipe``: the run's FP8 recipe; a block-scaled one's GEMMs do not take the
        database's fp8 rows, which are per-tensor kernels (compute_profile.keys.reads_fp8_rows)."""
        self.spec = gpu if isinstance(gpu, GpuSpec) else get_gpu(gpu)
        self.params = params if params is not None else load_params(self.spec.name)
        self.db = db
        self.fp8_recipe = fp8_recipe
        self._families: dict[tuple[str, str, str], dict[str, ProfileRow]] = {}
        self._cache: dict[tuple, tuple[float, TimeSource]] = {}

    def _family(self, kind: str, phase: str, dtype: str) -> dict[str, ProfileRow]:
        fam = self._families.get((kind, phase, dtype))
        if fam is None:
            usable = self.db is not None and (dtype != "fp8" or reads_fp8_rows(kind, self.fp8_recipe))
            fam = self.db.family(self.spec.name, kind, phase, dtype) if usable else {}
            self._families[(kind, phase, dtype)] = fam
        return fam

    def time(self, op: ComputeOp) -> tuple[float, TimeSource]:
        ck = (op.kind, op.phase, op.dtype, op.shape, op.name if op.kind in NAMED_KINDS else "")
        hit = self._cache.get(ck)
        if hit is None:
            hit = self._resolve(op)
            self._cache[ck] = hit
        return hit

    @property
    def distinct_keys(self) -> int:
        return len(self._cache)

    def _resolve(self, op: ComputeOp) -> tuple[float, TimeSource]:
        phase = profile_phase(op.phase).value
        kind = OpKind(op.kind).value
        skey = shape_key(op)
        fam = self._family(kind, phase, op.dtype)
        row = fam.get(skey)
        if row is not None:
            return row.time_s, _ROW_SOURCE[row.source]
        est = explain(op, self.spec, self.params)
        scaled = self._scale(op, skey, fam, est.memory_bound)
        if scaled is not None:
            return scaled, TimeSource.SCALED
        return est.time_s, TimeSource.ESTIMATED

    def _scale(self, op: ComputeOp, skey: str, fam: dict[str, ProfileRow], memory_bound: bool) -> float | None:
        if not fam:
            return None
        variant = key_variant(skey) if op.kind in NAMED_KINDS else None
        dims = op.shape
        metrics = ("bytes", "flops") if memory_bound else ("flops", "bytes")
        for metric in metrics:  # the preferred size measure; the other if the op lacks it
            x = float(getattr(op, metric))
            if x <= 0:
                continue
            best: tuple[float, float, str, ProfileRow] | None = None
            for key, row in fam.items():
                if variant is not None and key_variant(key) != variant:
                    continue
                xr = getattr(row, metric)
                if not xr or xr <= 0:
                    continue
                d = _shape_distance(dims, parse_shape(key))
                size = abs(math.log(x / xr))
                if best is None or (d, size, key) < best[:3]:
                    best = (d, size, key, row)
            if best is None:
                continue
            if best[1] > math.log(self.params.scaling_max_ratio):
                return None
            return best[3].time_s * x / getattr(best[3], metric)
        return None


def _shape_distance(a: tuple[int, ...], b: tuple[int, ...]) -> float:
    """Sum of |log| ratios of two shapes' dimensions (0 = the same shape); a shape of
    another rank is farther than any of the same rank (among those, size decides)."""
    if len(a) != len(b):
        return math.inf
    return sum(abs(math.log(x / y)) for x, y in zip(a, b) if x > 0 and y > 0)


def _slot_copier():
    """A ComputeOp copy with a new time and source, ~2x faster than the constructor.

    Frozen dataclasses assign every field through ``object.__setattr__`` in ``__init__``;
    writing the slots through their member descriptors does the same work without the
    generic lookup. Used only by attach's hot loop; tests check it equals the constructor.
    """
    names = ("name", "layer", "phase", "kind", "shape", "dtype", "flops", "bytes", "time_s", "source")
    if tuple(f for f in ComputeOp.__slots__) != names:  # pragma: no cover - record changed: use the constructor
        return lambda op, t, src: op.with_time(t, src)
    sets = [ComputeOp.__dict__[n].__set__ for n in names]
    s_name, s_layer, s_phase, s_kind, s_shape, s_dtype, s_flops, s_bytes, s_time, s_src = sets
    new = object.__new__

    def with_time(op: ComputeOp, t: float, src: TimeSource) -> ComputeOp:
        n = new(ComputeOp)
        s_name(n, op.name)
        s_layer(n, op.layer)
        s_phase(n, op.phase)
        s_kind(n, op.kind)
        s_shape(n, op.shape)
        s_dtype(n, op.dtype)
        s_flops(n, op.flops)
        s_bytes(n, op.bytes)
        s_time(n, t)
        s_src(n, src)
        return n

    return with_time


_with_time = _slot_copier()


RECIPE_RATES = {"blockwise": "blockwise_fp8_rate", "mxfp8": "mxfp8_rate"}
"""FP8 recipe -> the GemmParams field holding its GEMM rate relative to per-tensor scaling."""


def recipe_params(params: EstimatorParams, fp8_recipe: str) -> EstimatorParams:
    """``params`` for a run with the FP8 recipe ``fp8_recipe``: its FP8 GEMMs at the recipe's
    fraction of the per-tensor rate (``gemm.blockwise_fp8_rate`` for 1x128 / 128x128 scales,
    ``gemm.mxfp8_rate`` for MXFP8's 1x32 ones), the one place the recipe changes a GEMM's
    speed (the casts' bytes per recipe are workload_gen.costs'). Per-tensor scaling (delayed
    or current) is the rate ``gemm.fp8_speedup`` itself."""
    field = RECIPE_RATES.get(fp8_recipe)
    if field is None:
        return params
    g = params.gemm
    return replace(params, gemm=replace(g, fp8_speedup=g.fp8_speedup * getattr(g, field)))


def fp8_run_params(params: EstimatorParams, fp8_recipe: str, gpu: GpuSpec) -> EstimatorParams:
    """``params`` for an fp8 run with ``fp8_recipe`` on ``gpu``: its GEMMs at the recipe's rate
    (:func:`recipe_params`), and, for a per-tensor recipe on a GPU whose FP8 GEMMs take any
    layout, quantizes that write no transposed copy (``fp8_transpose_copies`` False:
    Transformer Engine keeps a Float8Tensor's data alone there, GpuSpec.fp8_gemm_any_layout)."""
    params = recipe_params(params, fp8_recipe)
    if fp8_recipe in PER_TENSOR_FP8 and gpu.fp8_gemm_any_layout:
        params = replace(params, fp8_transpose_copies=False)
    return params


def check_dtype_on_gpu(dtype: str, gpu: str) -> None:
    """Refuse, in one line, a training dtype whose GEMMs the GPU has no tensor cores for
    (fp4 before Blackwell: NVFP4 needs SM 10.0+, TE docs): the first point where the GPU is
    known, so a GPU-less gen-workload still builds the workload."""
    spec = get_gpu(gpu)
    if dtype == "fp4" and dtype not in spec.peak_flops:
        valid = ", ".join(d for d in DTYPE_BYTES if d in spec.peak_flops)
        raise ConfigError("dtype", dtype, f"NVFP4 training (--fp4-format e2m1) needs FP4 tensor cores (Blackwell); "
                                          f"{spec.name} has none (valid on {spec.name}: {valid})")


def attach(workload: Workload, gpu: str, db: ProfileDB | str | Path | None = None, *,
           params: EstimatorParams | None = None) -> tuple[Workload, Coverage]:
    """Return ``workload`` with a time and source on every compute op, and the coverage.

    ``db`` is a ProfileDB, the path of a database file (must exist), or None (estimator only).
    """
    opened: ProfileDB | None = None
    if isinstance(db, (str, Path)):
        db = opened = ProfileDB(db, create=False)
    try:
        par = workload.parallel
        check_dtype_on_gpu(par.dtype, gpu)
        if par.dtype == "fp8":
            spec = get_gpu(gpu)
            params = fp8_run_params(params if params is not None else load_params(spec.name), par.fp8_recipe, spec)
        resolver = TimeResolver(gpu, db, params, fp8_recipe=par.fp8_recipe)
        totals = {s: 0.0 for s in TimeSource}
        nmb = workload.parallel.num_microbatches
        n_ops = 0
        cls = ComputeOp
        cache = resolver._cache
        resolve = resolver.time
        named = NAMED_KINDS
        make = _with_time

        def timed(ops: tuple, weight: float) -> tuple:
            # Hot loop (100k ops): the cache lookup of TimeResolver.time is inlined here.
            nonlocal n_ops
            out = []
            append = out.append
            sums = dict.fromkeys(TimeSource, 0.0)
            for op in ops:
                if type(op) is cls:
                    kind = op.kind
                    hit = cache.get((kind, op.phase, op.dtype, op.shape, op.name if kind in named else ""))
                    if hit is None:
                        hit = resolve(op)
                    t, src = hit
                    append(make(op, t, src))
                    sums[src] += t
                    n_ops += 1
                else:
                    append(op)
            for src, v in sums.items():
                totals[src] += v * weight
            return tuple(out)

        stages = []
        # The copies are ~100k small tracked objects: pausing the cyclic GC while they are
        # made halves the time (each generation-0 pass would otherwise rescan them; nothing
        # here creates cycles).
        with no_cyclic_gc():
            for st in workload.stages:
                chunks = tuple(replace(ch, forward=timed(ch.forward, nmb), backward=timed(ch.backward, nmb))
                               for ch in st.chunks)
                stages.append(replace(st, chunks=chunks, iteration=timed(st.iteration, 1.0)))
        cov = Coverage(
            total_s=sum(totals.values()),
            measured_s=totals[TimeSource.MEASURED], scaled_s=totals[TimeSource.SCALED],
            estimated_s=totals[TimeSource.ESTIMATED], imported_s=totals[TimeSource.IMPORTED],
            ops=n_ops, distinct_keys=resolver.distinct_keys,
        )
        meta = dict(workload.meta)
        meta["compute_coverage"] = cov.summary()
        meta["compute_profile"] = str(db.path) if db is not None else "estimator only"
        return replace(workload, stages=tuple(stages), gpu=resolver.spec.name,
                       overlap_slowdown=resolver.params.overlap_slowdown, meta=meta), cov
    finally:
        if opened is not None:
            opened.close()
