"""Stage 1: model + parallel config -> per-stage workload (DESIGN.md).

Public surface: :func:`build`, the config loaders in :mod:`workload_gen.config_loading`
and the records in :mod:`workload_gen.records`. No torch in this import path.

``build`` and ``model_flops_per_iteration`` load on first use: importing one small
submodule (``workload_gen.errors``, ``workload_gen.units``) does not load the builder.
"""
from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from workload_gen.builder import build
    from workload_gen.flops import model_flops_per_iteration

_LAZY = {"build": "workload_gen.builder", "model_flops_per_iteration": "workload_gen.flops"}

__all__ = ["build", "model_flops_per_iteration"]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'workload_gen' has no attribute {name!r}")
