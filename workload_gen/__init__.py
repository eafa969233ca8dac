"""Stage 1: model + parallel config -> per-stage workload (DESIGN.md).

Public surface: :func:`build`, the config loaders in :mod:`workload_gen.config_loading`
and the records in :mod:`workload_gen.records`. No torch in this import path.
"""
from workload_gen.builder import build
from workload_gen.flops import model_flops_per_iteration

__all__ = ["build", "model_flops_per_iteration"]
