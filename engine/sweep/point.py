"""Evaluate one sweep point in-process: config mapping in, one flat table row out.

No files in between: configs -> build -> memory check -> attach -> simulate. A point
that cannot run is kept with ``status="invalid"`` and the reason (the same one-line
message the CLIs print), never dropped. Memory over the GPU's capacity is checked
before simulating, since it is cheap and such points need no timing.
"""
from __future__ import annotations

import json
from typing import Any

from workload_gen.core.errors import TrainsimError
from workload_gen.core.system import SystemConfig, load_system, system_from_dict
from workload_gen.core.units import GiB as GIB

_SYSTEMS: dict[str, SystemConfig] = {}
"""A mapping-valued system, by its JSON text: the grid's system axes repeat few values."""


def system_of(config: dict[str, Any]) -> SystemConfig:
    spec = config.get("system", "h100")
    if isinstance(spec, str):
        return load_system(spec)
    if isinstance(spec, dict):
        try:
            key = json.dumps(spec, sort_keys=True, default=str)
        except TypeError:  # keys of mixed types: no cache
            return system_from_dict(spec, source="sweep system")
        hit = _SYSTEMS.get(key)
        if hit is None:
            if len(_SYSTEMS) > 256:
                _SYSTEMS.clear()
            hit = _SYSTEMS[key] = system_from_dict(spec, source="sweep system")
        return hit
    raise TrainsimError(f"system={spec!r} must be a preset name or a mapping of system fields")


def evaluate_config(config: dict[str, Any], headroom: float = 0.0) -> dict[str, Any]:
    """One row: status, reason, the resolved inputs, and every summary figure. A point whose
    memory does not fit (workload_gen.core.memory_fit, keeping ``headroom`` of the GPU free)
    is invalid with the reason."""
    from engine.pipeline import build_cached, run_workload
    from workload_gen.config_loading import configs_from_dict
    from workload_gen.core.memory_fit import allocator_budget
    from workload_gen.core.metrics import headline

    row: dict[str, Any] = {"status": "ok", "reason": ""}
    try:
        system = system_of(config)
        model, par = configs_from_dict(config, source="sweep point")
        row.update({
            "model": model.name, "system": system.name, "gpus": par.world_size,
            "tp": par.tp, "pp": par.pp, "vpp": par.vpp, "dp": par.dp, "cp": par.cp, "ep": par.ep, "sp": par.sp,
            "micro_batch": par.micro_batch, "global_batch": par.global_batch, "seq_length": par.seq_length,
            "recompute": par.recompute, "distributed_optimizer": par.distributed_optimizer,
        })
        # built once per (model, parallel) in this process: points that differ only in
        # system fields share the workload, its memory estimate and its compute times
        workload, memory = build_cached(model, par)
        peak = max(m.allocated_peak for m in memory)
        reserved = max(m.reserved_peak for m in memory)
        row.update(peak_memory_bytes=peak, reserved_memory_bytes=reserved, peak_memory_gib=peak / GIB)
        capacity = system.gpu_spec.memory_bytes
        budget = allocator_budget(capacity, headroom)
        if reserved > budget:
            kept = f", {headroom:.0%} kept free" if headroom else ""
            row.update(status="invalid",
                       reason=f"memory: reserved {reserved / GIB:.1f} GiB > {budget / GIB:.1f} GiB the allocator may "
                              f"use on {system.gpu} ({capacity / GIB:.1f} GiB less the CUDA context{kept})")
            return row
        result = run_workload(workload, system, timeline=False, attach=True, memory=memory)
    except TrainsimError as exc:
        row.update(status="invalid", reason=str(exc))
        return row
    h = headline(result)
    row.update(iteration_time_s=h.iteration_time_s, tokens_per_s=h.tokens_per_s,
               tflops_per_gpu=h.tflops_per_gpu, mfu=h.mfu)
    for part, seconds in result.breakdown.as_dict().items():
        row[f"breakdown_s.{part}"] = seconds
    cov = result.extras.get("compute_coverage")
    if cov is not None:
        for source in ("measured", "scaled", "estimated", "imported"):
            row[f"coverage.{source}"] = cov.share(source)
    if result.host_load is not None:
        row["host_load"] = result.host_load
    return row


