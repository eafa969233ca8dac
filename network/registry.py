"""Network backends by name, so that the engine never imports a backend module.

The built-in kinds are listed here as ``module:attribute`` strings and imported on first
use (the ns-3 one loads a C++ simulator; nobody running the analytical backend should pay
for that import). Another package adds a backend without touching this file by declaring
an entry point in the ``trainsim.network_backends`` group whose object meets
:class:`network.backend.BackendKind`.
"""
from __future__ import annotations

import importlib
from typing import Any

from network.backend import BackendKind, NetworkBackend
from workload_gen.core.errors import ConfigError
from workload_gen.core.system import SystemConfig

ENTRY_POINT_GROUP = "trainsim.network_backends"

BUILTIN_KINDS: dict[str, str] = {
    "analytical": "network.analytical_kind:ANALYTICAL",
    "ns3": "network.ns3.kind:NS3",
    "flow": "network.flow.kind:FLOW",
}
"""Name -> where its BackendKind lives."""


def _load(target: str) -> Any:
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)


def _plugins() -> dict[str, Any]:
    from importlib.metadata import entry_points  # only when a name is not built in (~10 ms)

    return {ep.name: ep for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name not in BUILTIN_KINDS}


def backend_names() -> tuple[str, ...]:
    """Every registered backend name: the built-ins first, then plug-ins by name."""
    return (*BUILTIN_KINDS, *sorted(_plugins()))


def backend_kind(name: str) -> BackendKind:
    """The registered kind called ``name``; a ConfigError listing the valid names otherwise."""
    if name in BUILTIN_KINDS:
        return _load(BUILTIN_KINDS[name])
    plugin = _plugins().get(name)
    if plugin is None:
        raise ConfigError("backend", name, f"valid: {', '.join(backend_names())}")
    return plugin.load()


def create_backend(name: str, system: SystemConfig, world_size: int, **options: Any) -> NetworkBackend:
    """A backend of the named kind for ``world_size`` GPUs of ``system``."""
    return backend_kind(name).create(system, world_size, **options)
