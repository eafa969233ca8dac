"""Measure the distinct op shapes of a workload with torch on the local device.

``compute-profile measure`` builds the workload of a model/parallel config, collects its
distinct profile keys (compute_profile.keys: ops of identical layers share them), runs each
one with torch (compute_profile.kernels) and stores the median time with its spread and
provenance in the profile database.

Timing: ``warmup`` untimed calls, then ``repeats`` timed calls, each synchronised: CUDA
events around the call on a GPU (the device is synchronised before each call, so a call
never overlaps the previous one), ``time.perf_counter`` on the CPU. The stored time is the
median; ``min_s``/``max_s`` keep the spread. On the CPU, a call slower than
``slow_call_s`` cuts the repeats to 3, so a mistakenly large shape costs seconds, not hours.

FP8 runs: the GEMMs of a per-tensor recipe (delayed or current scaling) are measured as the
FP8 GEMM Transformer Engine calls, cuBLASLt's with one scale per operand (``torch._scaled_mm``,
compute_profile.kernels.fp8_gemm_bench), on a device with FP8 tensor cores; block-scaled
recipes' GEMMs (MXFP8, blockwise) are skipped with the reason and left to the estimator.

The optimizer step is measured on a shard of at most ``optimizer_max_params`` fp32
elements and scaled linearly to the stage's shard (Adam is a streaming, memory-bound
kernel: time is proportional to elements once launch overhead is negligible, i.e. beyond a
few million elements); the row's ``note`` records the measured size and the factor.

torch is imported here only, inside functions: the analytical path never loads it.
"""
from __future__ import annotations

import datetime as _dt
import platform
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable, Collection
from typing import Any, TextIO

from compute_profile.db import ProfileRow
from compute_profile.kernels import adam_bench, build_bench  # no torch at import: it is passed in
from compute_profile.keys import FP8_GEMM_KINDS, profile_phase, reads_fp8_rows, shape_key
from workload_gen.core.errors import ConfigError, TrainsimError
from workload_gen.core.gpu_specs import GPUS, get_gpu
from workload_gen.core.record import record
from workload_gen.core.records import ComputeOp, OpKind, Phase, Workload

MEASURED_DTYPES = frozenset({"bf16", "fp16", "fp32"})
FP8_MIN_CAPABILITY = (8, 9)
"""FP8 tensor cores: Ada (8.9), Hopper (9.0) and newer; cuBLASLt has no FP8 GEMM below."""


@record
class Case:
    """One distinct profile key to measure, with a representative op."""

    kind: OpKind
    phase: Phase
    """Profile phase (recompute already folded into fwd)."""
    dtype: str
    shape: tuple[int, ...]
    shape_key: str
    name: str
    flops: float
    bytes: float


def collect_cases(workload: Workload) -> list[Case]:
    """Distinct profile keys of ``workload``, in first-appearance order (deterministic)."""
    seen: dict[tuple[str, str, str, str], Case] = {}
    for _, _, op in workload.ops():
        if not isinstance(op, ComputeOp):
            continue
        phase = profile_phase(op.phase)
        sk = shape_key(op)
        key = (op.kind.value, phase.value, op.dtype, sk)
        if key not in seen:
            seen[key] = Case(OpKind(op.kind), phase, op.dtype, tuple(op.shape), sk, op.name, op.flops, op.bytes)
    return list(seen.values())


@record
class Timing:
    median_s: float
    min_s: float
    max_s: float
    repeats: int


def time_bench(torch: Any, bench: Any, dev: Any, *, warmup: int, repeats: int, slow_call_s: float = 0.5) -> Timing:
    """Median/min/max seconds of ``bench.step`` (``bench.prepare`` runs untimed before each)."""
    cuda = getattr(dev, "type", str(dev)) == "cuda"
    sync: Callable[[], None] = (lambda: torch.cuda.synchronize(dev)) if cuda else (lambda: None)
    prep = bench.prepare or (lambda: None)
    t0 = time.perf_counter()
    for i in range(max(1, warmup)):
        prep()
        bench.step()
        if i == 0:
            sync()
            if not cuda and time.perf_counter() - t0 > slow_call_s:
                repeats = min(repeats, 3)
                break
    sync()
    times: list[float] = []
    if cuda:
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
    for _ in range(repeats):
        prep()
        sync()
        if cuda:
            start.record()
            bench.step()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        else:
            t = time.perf_counter()
            bench.step()
            times.append(time.perf_counter() - t)
    return Timing(statistics.median(times), min(times), max(times), len(times))


def gpu_label_for_device(torch: Any, dev: Any) -> str:
    """The gpu_specs name of the local device (``cpu`` without CUDA)."""
    if getattr(dev, "type", str(dev)) != "cuda":
        return "cpu"
    name = torch.cuda.get_device_name(dev).lower()
    # "NVIDIA GB200" contains "b200": the Grace-Blackwell parts are matched first
    for token, spec in (("gb200", "gb200"), ("gb300", "gb300"), ("b300", "b300"),
                        ("h200", "h200"), ("h100", "h100-sxm"), ("h20", "h20"), ("b200", "b200"),
                        ("a100", "a100-sxm-80gb" if "pcie" not in name else "a100-pcie")):
        if token in name:
            return spec
    raise ConfigError("gpu", name, f"unknown device; pass --gpu with one of {', '.join(sorted(GPUS))}")


def _label(torch: Any, dev: Any, gpu: str | None) -> str:
    """The rows' GPU name: the detected device, or --gpu when it agrees with (or names) it.

    Labelling CPU timings as a GPU (or one GPU's timings as another) would poison every
    later prediction that uses the database, so a contradiction is refused.
    """
    if gpu is None:
        return gpu_label_for_device(torch, dev)
    name = get_gpu(gpu).name
    if getattr(dev, "type", str(dev)) != "cuda":
        if name != "cpu":
            raise ConfigError("gpu", gpu, "this run measures the CPU: rows must be labelled cpu (use a CUDA device for GPU rows)")
        return name
    try:
        detected = gpu_label_for_device(torch, dev)
    except ConfigError:
        return name  # a device gpu_specs does not know: the user names its spec
    if detected != name:
        raise ConfigError("gpu", gpu, f"the local device is {torch.cuda.get_device_name(dev)} ({detected})")
    return name


def _provenance(torch: Any, dev: Any) -> dict[str, str]:
    cuda = getattr(dev, "type", str(dev)) == "cuda"
    return {
        "torch_version": torch.__version__,
        "cuda_version": (torch.version.cuda or "") if cuda else "",
        "device_name": torch.cuda.get_device_name(dev) if cuda else (platform.processor() or platform.machine()),
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }


def require_torch() -> Any:
    """torch, or one line saying how to install it (torch is the optional `measure` extra)."""
    try:
        import torch  # lazy: only measuring needs torch
    except ModuleNotFoundError:
        raise TrainsimError("compute-profile measure needs torch, which is not installed: pip install "
                            "'trainsim[measure]' (CPU build: see README), or a CUDA build of torch on a GPU machine") from None
    return torch


MeasureKey = tuple[str, str, str, str]
"""(kind, shape_key, dtype, phase): one measured row of a GPU."""


def measure_workload(workload: Workload, *, gpu: str | None = None, device: str = "auto", repeats: int = 10,
                     warmup: int = 3, max_ops: int | None = None, max_gflop: float | None = None,
                     optimizer_max_params: int | None = None, threads: int | None = None,
                     progress: TextIO | None = None, quiet: bool = False,
                     known: Callable[[str], Collection[MeasureKey]] | None = None,
                     on_row: Callable[[ProfileRow], None] | None = None,
                     saved: Callable[[], str] | None = None, tty: bool | None = None) -> list[ProfileRow]:
    """Measure every distinct op key of ``workload``; return the rows measured.

    ``max_ops`` keeps the first N keys, ``max_gflop`` skips ops above that many GFLOP (both
    for CPU runs of larger models); skipped keys are left to attach's scaling or estimator.

    Saving as it goes and resuming: ``on_row`` is called with each row as soon as its shape
    is measured (``compute-profile measure`` stores it in the database there, so an
    interrupted run keeps every shape it finished), and ``known(gpu_label)`` gives the keys
    already stored for the GPU, which are not measured again.

    Progress (workload_gen.core.progress) goes to ``progress`` (default: sys.stderr at call
    time): on a terminal a bar with the ETA from the shapes measured so far and one line
    per shape above it; elsewhere only the final line (with ``saved()`` appended, e.g. the
    database's counts); nothing with ``quiet``. ``tty`` forces the terminal mode (tests).
    """
    torch = require_torch()

    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    prev_threads = torch.get_num_threads()
    if threads or not device.startswith("cuda"):
        # One CPU thread by default: reproducible on shared CI runners (see gpu_specs "cpu").
        torch.set_num_threads(threads or 1)
    try:
        return _measure(torch, workload, gpu, device, repeats, warmup, max_ops, max_gflop,
                        optimizer_max_params, progress or sys.stderr, quiet, known, on_row, saved, tty)
    finally:
        torch.set_num_threads(prev_threads)


def _measure(torch: Any, workload: Workload, gpu: str | None, device: str, repeats: int, warmup: int,
             max_ops: int | None, max_gflop: float | None, optimizer_max_params: int | None,
             stream: TextIO, quiet: bool, known: Callable[[str], Collection[MeasureKey]] | None,
             on_row: Callable[[ProfileRow], None] | None, saved: Callable[[], str] | None,
             tty: bool | None) -> list[ProfileRow]:
    from workload_gen.core.progress import Progress

    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ConfigError("device", device, "CUDA is not available here; use --device cpu")
    dev = torch.device(device)
    label = _label(torch, dev, gpu)
    prov = _provenance(torch, dev)
    cuda = dev.type == "cuda"
    opt_cap = optimizer_max_params or (1 << 28 if cuda else 1 << 22)
    normalization = workload.model.normalization
    topk = workload.model.moe_router_topk

    cases = collect_cases(workload)
    fp8_refusal = _fp8_refusal(torch, dev, workload.parallel.fp8_recipe)
    todo, skipped = [], []
    for c in cases:
        fp8_gemm = c.dtype == "fp8" and c.kind in FP8_GEMM_KINDS
        if c.kind is OpKind.OPTIMIZER and not c.shape[0]:
            skipped.append((c, "fixed host work of the step, not a kernel (estimator: step_overhead_s)"))
        elif fp8_gemm and fp8_refusal:
            skipped.append((c, fp8_refusal))
        elif c.dtype not in MEASURED_DTYPES and not fp8_gemm:
            skipped.append((c, f"dtype {c.dtype} not measured"))
        elif max_gflop is not None and c.flops > max_gflop * 1e9:
            skipped.append((c, f"{c.flops / 1e9:.1f} GFLOP > --max-gflop {max_gflop}"))
        else:
            todo.append(c)
    if max_ops is not None and len(todo) > max_ops:
        skipped.extend((c, f"beyond --max-ops {max_ops}") for c in todo[max_ops:])
        todo = todo[:max_ops]
    have = set(known(label)) if known is not None else set()
    already = [c for c in todo if (c.kind.value, c.shape_key, c.dtype, c.phase.value) in have]
    todo = [c for c in todo if (c.kind.value, c.shape_key, c.dtype, c.phase.value) not in have]

    bar = Progress(len(todo) + len(already), f"measure {label}", unit="shape", initial=len(already),
                   quiet=quiet, stream=stream, tty=tty)
    bar.note(f"measuring {len(todo)} distinct op shapes of {len(cases)} on {label} ({prov['device_name']}, "
             f"torch {prov['torch_version']}); {len(already)} already in the database, {len(skipped)} skipped")
    for c, why in skipped:
        if not why.startswith("beyond --max-ops"):
            bar.note(f"  skip {c.kind.value} {c.phase.value} {c.shape_key} {c.dtype}: {why}")
    if max_ops is not None and any(why.startswith("beyond --max-ops") for _, why in skipped):
        bar.note(f"  skip {sum(why.startswith('beyond --max-ops') for _, why in skipped)} shapes beyond --max-ops {max_ops}")
    rows: list[ProfileRow] = []
    torch.manual_seed(0)
    t_start = time.perf_counter()
    with bar:
        for i, c in enumerate(todo, 1):
            bar.doing(f"{c.kind.value} {c.phase.value} {c.shape_key}")
            scale, note_extra = 1.0, ""
            if c.kind is OpKind.OPTIMIZER:
                n = min(int(c.shape[0]), opt_cap)
                bench = adam_bench(torch, n, dev)
                scale = c.shape[0] / n
                if scale != 1.0:
                    note_extra = f"; measured on {n} params, scaled x{scale:.6g} (linear in params)"
            else:
                bench = build_bench(torch, c.kind, c.phase, c.shape, c.dtype, c.name, dev,
                                    normalization=normalization, topk=topk)
            t = time_bench(torch, bench, dev, warmup=warmup, repeats=repeats)
            note = f"{c.name}: {bench.note}{note_extra}"
            del bench
            row = ProfileRow(
                gpu=label, kind=c.kind.value, shape_key=c.shape_key, dtype=c.dtype, phase=c.phase.value,
                time_s=t.median_s * scale, source="measured", flops=c.flops, bytes=c.bytes,
                min_s=t.min_s * scale, max_s=t.max_s * scale, repeats=t.repeats,
                note=note, **prov,
            )
            if on_row is not None:
                on_row(row)  # saved before the next shape starts: an interrupt keeps it
            rows.append(row)
            spread = (t.max_s - t.min_s) / t.median_s * 100 if t.median_s > 0 else 0.0
            bar.note(f"[{i}/{len(todo)}] {c.kind.value:<12} {c.phase.value:<10} {c.shape_key:<28} {c.dtype:<4} "
                     f"{t.median_s * scale * 1e6:10.1f} us  (spread {spread:.0f}%, n={t.repeats}, "
                     f"elapsed {time.perf_counter() - t_start:.1f}s)")
            bar.update()
        reasons = Counter(_short_reason(why) for _, why in skipped)
        final = (f"measured {len(rows)} op shapes on {label} ({prov['device_name']}, torch {prov['torch_version']}) "
                 f"in {bar.elapsed_s:.1f} s" + (f" ({bar.rate_text()})" if rows else "")
                 + f"; {len(already)} already in the database"
                 + (f"; {len(skipped)} skipped ({', '.join(f'{n} {r}' for r, n in reasons.items())})" if skipped else "")
                 + (f"; {saved()}" if saved is not None else ""))
        bar.close(final)
    return rows


def _fp8_refusal(torch: Any, dev: Any, fp8_recipe: str) -> str:
    """Why this run's FP8 GEMMs cannot be measured here ('' when they can).

    Only the per-tensor recipes (delayed and current scaling) are measured: their GEMM is
    cuBLASLt's FP8 GEMM with one scale per operand, which ``torch._scaled_mm`` calls.
    MXFP8 and blockwise GEMMs apply a scale per block inside the kernel; torch has no call
    for them on every GPU, and a per-tensor time stored under their key would be another
    kernel's (attach does not use fp8 rows for them: compute_profile.attaching)."""
    if not reads_fp8_rows(OpKind.GEMM, fp8_recipe):
        return f"{fp8_recipe} FP8 GEMMs are block-scaled kernels; only per-tensor ones are measured (estimator)"
    if not hasattr(torch, "_scaled_mm") or not hasattr(torch, "float8_e4m3fn"):
        return f"torch {torch.__version__} has no FP8 GEMM (torch._scaled_mm)"
    if getattr(dev, "type", "") == "cuda":
        cap = torch.cuda.get_device_capability(dev)
        if tuple(cap) < FP8_MIN_CAPABILITY:
            need = ".".join(map(str, FP8_MIN_CAPABILITY))
            return f"FP8 GEMMs need compute capability {need}+ (FP8 tensor cores); this GPU is {cap[0]}.{cap[1]}"
    return ""


def _short_reason(why: str) -> str:
    if why.startswith("fixed host work"):
        return "host work, not kernels"
    if why.startswith("beyond --max-ops"):
        return "beyond --max-ops"
    if "--max-gflop" in why:
        return "above --max-gflop"
    if "block-scaled" in why:
        return "block-scaled FP8 GEMMs"
    if "FP8 GEMM" in why:
        return "FP8 GEMMs unsupported here"
    return why
