"""The engine: one training iteration as a discrete-event simulation.

Public surface: :func:`simulate` and :func:`estimate_memory`; the result records are in
:mod:`workload_gen.run_result`, the backend interface in :mod:`network.backend`.
"""
from engine.api import simulate
from engine.memory import estimate_memory

__all__ = ["simulate", "estimate_memory"]
