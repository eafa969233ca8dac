"""The in-process path: configs -> workload -> compute times -> simulated iteration.

Sweeps call :func:`run_analytical` thousands of times, so it does only what a result
needs: build, attach, simulate. No files, no plots, no pandas or torch imports. The
network backend is asked for by name (network.registry); the shipped efficiency table is
read once per system.

Units: seconds, bytes.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from network.backend import NetworkBackend
from network.registry import create_backend
from workload_gen.core.errors import ConfigError
from workload_gen.core.model_config import ModelConfig
from workload_gen.core.parallel_config import ParallelConfig
from workload_gen.core.records import Workload
from workload_gen.core.run_result import RunResult
from workload_gen.core.system import SystemConfig, load_system

ACCOUNTINGS = ("event", "simai")


class _SharedTimes:
    """A backend whose contention-free ``collective_time`` answers are kept across the runs of
    one process that use the same system and GPU count (a sweep's points, a search's layouts):
    the analytical time of a collective is a function of (kind, group, bytes, ranks) and the
    backend's configuration alone. Everything else goes to the fresh backend underneath."""

    def __init__(self, inner: NetworkBackend, times: dict) -> None:
        self._inner = inner
        self._times = times

    def collective_time(self, op: Any, ranks: Any) -> float:
        key = (op.kind, op.group, op.bytes, op.group_size, tuple(ranks))
        t = self._times.get(key)
        if t is None:
            t = self._times[key] = self._inner.collective_time(op, ranks)
        return t

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


_TIMES: dict[Any, dict] = {}
"""(system, world size) -> collective times of the default analytical backend (see _SharedTimes)."""


def make_backend(system: SystemConfig, world_size: int, *, busbw_overrides: Any = None,
                 efficiency: Any = None) -> NetworkBackend:
    """The analytical backend (by its registered name); the shipped efficiency table is
    read once per system and process. With the default table and no overrides, collective
    times are kept per (system, world size) across runs of the process (:class:`_SharedTimes`)."""
    net = create_backend("analytical", system, world_size, busbw_overrides=busbw_overrides, efficiency=efficiency)
    if busbw_overrides is not None or efficiency is not None or not getattr(net, "contention_free", False) \
            or not hasattr(net, "collective_time"):
        return net
    try:
        key = (system, world_size)
        times = _TIMES.get(key)
    except TypeError:  # an unhashable system: no sharing
        return net
    if times is None:
        if len(_TIMES) > 64:
            _TIMES.clear()
        times = _TIMES[key] = {}
    elif len(times) > 200_000:
        times.clear()
    return _SharedTimes(net, times)  # type: ignore[return-value]


def _system(system: SystemConfig | str) -> SystemConfig:
    return load_system(system) if isinstance(system, str) else system


class _Lru:
    """A small least-recently-used map; values keep their keys' objects alive (so an ``id`` in
    a key cannot be reused while its entry is held)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.data: dict[Any, Any] = {}

    def get(self, key: Any) -> Any:
        hit = self.data.pop(key, None)
        if hit is not None:
            self.data[key] = hit
        return hit

    def put(self, key: Any, value: Any) -> Any:
        self.data[key] = value
        while len(self.data) > self.size:
            del self.data[next(iter(self.data))]
        return value

    def clear(self) -> None:
        self.data.clear()


_BUILT = _Lru(16)
"""(model, parallel) -> (workload, its memory estimate): sweep points that differ only in
system fields (bandwidths, NIC counts) share the workload, which does not depend on them."""
_ATTACHED = _Lru(16)
"""(id(workload), gpu, profile file state) -> (workload, (attached workload, coverage))."""


def clear_caches() -> None:
    """Forget the per-process caches of :func:`build_cached` and :func:`attach_compute`."""
    _BUILT.clear()
    _ATTACHED.clear()
    _TIMES.clear()


def build_cached(model: ModelConfig, parallel: ParallelConfig) -> tuple[Workload, tuple[Any, ...]]:
    """workload_gen.build(model, parallel) and engine.estimate_memory of it, kept per process for
    the last few configurations (both are pure functions of the two configs; the result is
    immutable). A build error is raised every time, never cached."""
    key = (model, parallel)
    hit = _BUILT.get(key)
    if hit is not None:
        return hit
    from engine.memory import estimate_memory
    from workload_gen import build

    workload = build(model, parallel)
    return _BUILT.put(key, (workload, estimate_memory(workload)))


def _profile_state(profile: str | Path | None) -> Any:
    """What identifies a profile database's content for the attach cache (None: estimates only)."""
    if profile is None:
        return None
    if not isinstance(profile, (str, Path)):
        return ("object", id(profile))
    try:
        st = Path(profile).stat()
    except OSError:
        return ("missing", str(profile))
    return (str(Path(profile).resolve()), st.st_mtime_ns, st.st_size, st.st_ino)


def attach_compute(workload: Workload, gpu: str, profile: str | Path | None) -> tuple[Workload, Any]:
    """compute_profile.attach: a time on every compute op, and the coverage it reports.

    Kept per process for the last few (workload object, GPU, profile file) triples: a sweep's
    points that differ only in network fields attach the same workload once. A profile
    database is keyed by its path and file state (a changed file is read again)."""
    state = _profile_state(profile)
    key = (id(workload), gpu, state)
    hit = _ATTACHED.get(key)
    if hit is not None and hit[0] is workload:
        return hit[1]
    from compute_profile import attach

    out = attach(workload, gpu, profile)
    if state is None or state[0] not in ("object", "missing"):
        _ATTACHED.put(key, (workload, out))
    return out


def run_workload(
    workload: Workload,
    system: SystemConfig | str,
    *,
    profile: str | Path | None = None,
    gpu: str | None = None,
    timeline: bool = True,
    accounting: str = "event",
    busbw_overrides: Any = None,
    efficiency: Any = None,
    attach: bool | None = None,
    memory: tuple[Any, ...] | None = None,
    backend: NetworkBackend | None = None,
    trace_window: int | None = None,
) -> RunResult:
    """Simulate an existing workload (generated, read from a file, or converted from SimAI).

    Compute times are attached unless every compute op already has one (``attach=None``),
    e.g. a SimAI file carries its own. ``accounting="simai"`` gives SimAI_analytical's
    report instead of the event simulation (engine.simai_report.simai_workload_result). ``backend``: a
    network backend already built (e.g. run-ns3's); default the analytical one, with
    ``busbw_overrides`` and ``efficiency`` (a table, a YAML path, or None for the shipped one).
    ``trace_window``: engine.api.simulate's (the timeline keeps only the micro-batches a trace shows).
    """
    if accounting not in ACCOUNTINGS:
        raise ConfigError("accounting", accounting, f"valid: {', '.join(ACCOUNTINGS)}")
    sysc = _system(system)
    coverage = None
    if attach is None:
        from workload_gen.core.records import ComputeOp

        attach = any(isinstance(op, ComputeOp) and op.time_s is None for _, _, op in workload.ops())
    if attach:
        workload, coverage = attach_compute(workload, gpu or sysc.gpu, profile)
    if accounting == "simai":
        from engine.simai_report import simai_workload_result

        result = simai_workload_result(workload, sysc)
    else:
        from engine import simulate

        net = backend if backend is not None else make_backend(
            sysc, workload.parallel.world_size, busbw_overrides=busbw_overrides, efficiency=efficiency)
        result = simulate(workload, sysc, net, timeline=timeline, memory=memory, trace_window=trace_window)
    if coverage is not None:
        result.extras["compute_coverage"] = coverage
    return result


def run_analytical(model: ModelConfig, parallel: ParallelConfig, system: SystemConfig | str,
                   **options: Any) -> RunResult:
    """Build the workload for (model, parallel), attach compute times, simulate on
    ``system``; ``options`` are :func:`run_workload`'s (profile, gpu, timeline, accounting,
    busbw_overrides, efficiency, backend)."""
    from workload_gen import build

    return run_workload(build(model, parallel), system, attach=True, **options)
