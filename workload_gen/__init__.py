"""Stage 1: model + parallel config -> per-stage workload (DESIGN.md).

Public surface: :func:`build`, the config loaders in :mod:`workload_gen.config_loading`
and the records in :mod:`workload_gen.core.records`. No torch in this import path.

``build`` and ``model_flops_per_iteration`` load on first use: importing one small
submodule (``workload_gen.core.errors``, ``workload_gen.core.units``) does not load the builder.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from workload_gen.core.lazy import lazy_attributes

if TYPE_CHECKING:
    from workload_gen.builder import build
    from workload_gen.core.flops import model_flops_per_iteration

_LAZY = {"build": "workload_gen.builder", "model_flops_per_iteration": "workload_gen.core.flops"}

__all__ = ["build", "model_flops_per_iteration"]

__getattr__ = lazy_attributes(__name__, _LAZY)
