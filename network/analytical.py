"""The analytical network backend: closed-form collective times, no contention.

time = latency(kind, n, nodes) + D / (busbw(kind, placement) * eff(D)),   D = S * factor(kind, n)

with the fabric, busbw and latency from :mod:`network.busbw`, the size efficiency from
:mod:`network.efficiency` (network/data/efficiency.yaml unless given), and SimAI-style
per-group overrides from :mod:`network.busbw_overrides`. Every collective sees an idle
network (``contention_free = True``): concurrent transfers do not slow each other, which
is what lets the engine simulate one representative rank per stage.

Units: seconds, bytes, bytes/s.
"""
from __future__ import annotations

import heapq
import math
from pathlib import Path

from collectives.closed_form import bus_factor as algorithm_factor
from network.backend import Completion, Transfer
from network.busbw import CollectivePath, collective_path
from network.busbw_overrides import BusbwOverrides, read_busbw_yaml
from network.efficiency import IDEAL, EfficiencyTable, load_efficiency
from workload_gen.core.errors import ConfigError
from workload_gen.core.placement import GroupShape
from workload_gen.core.records import CollectiveOp, CollKind, Group
from workload_gen.core.system import SystemConfig


class AnalyticalBackend:
    """Closed-form :class:`network.backend.NetworkBackend`; also answers single queries."""

    contention_free = True
    name = "analytical"

    def __init__(
        self,
        system: SystemConfig,
        world_size: int,
        *,
        busbw_overrides: BusbwOverrides | str | Path | None = None,
        efficiency: EfficiencyTable | str | Path | None = None,
    ) -> None:
        if world_size < 1:
            raise ConfigError("world_size", world_size, "must be a positive integer")
        self.system = system.for_job(world_size)  # a rack-scale job's NVLink domain (its Slurm segment)
        self.world_size = world_size
        if isinstance(busbw_overrides, (str, Path)):
            busbw_overrides = read_busbw_yaml(busbw_overrides)
        self.overrides: BusbwOverrides = dict(busbw_overrides or {})
        if efficiency is None or isinstance(efficiency, (str, Path)):
            efficiency = load_efficiency(system.name, efficiency)
        self.efficiency: EfficiencyTable = efficiency
        self._cache: dict[tuple, float] = {}
        self._heap: list[tuple[float, int]] = []

    # --- closed forms -----------------------------------------------------------------
    def shape(self, ranks: tuple[int, ...] | list[int]) -> GroupShape:
        for r in ranks:
            if not 0 <= r < self.world_size:
                raise ConfigError("rank", r, f"must be in 0..{self.world_size - 1} (world size {self.world_size})")
        return GroupShape.from_ranks(ranks, self.system.domain_gpus)

    def path(self, kind: CollKind, group: Group, shape: GroupShape, nbytes: float) -> CollectivePath:
        """Algorithm, fabric, busbw and latency, with a user override applied to busbw."""
        p = collective_path(kind, shape, self.system, nbytes)
        bw = self.overrides.get((group, kind))
        if bw is not None:
            return CollectivePath(p.algorithm, bw, p.latency_s, p.link)
        return p

    def time_for(self, kind: CollKind, group: Group, nbytes: float, shape: GroupShape) -> float:
        """Seconds for one collective of ``nbytes`` (NCCL convention) on a group of this shape."""
        if shape.n <= 1 or nbytes <= 0:
            return 0.0
        p = self.path(kind, group, shape, nbytes)
        moved = nbytes * algorithm_factor(kind, shape.n)
        curve = IDEAL if (group, kind) in self.overrides else self.efficiency.curve(p.link, kind.value)
        return p.latency_s + curve.transfer_time(moved, p.busbw)

    def collective_time(self, op: CollectiveOp, ranks: tuple[int, ...] | list[int]) -> float:
        """Seconds for ``op`` on these global ranks (ring order; (src, dst) for send/recv)."""
        key = (op.kind, op.group, op.bytes, tuple(ranks))
        t = self._cache.get(key)
        if t is None:
            t = self.time_for(op.kind, op.group, op.bytes, self.shape(ranks))
            self._cache[key] = t
        return t

    # --- NetworkBackend -----------------------------------------------------------------
    def submit(self, transfer: Transfer, now: float) -> None:
        heapq.heappush(self._heap, (now + self.collective_time(transfer.op, transfer.ranks), transfer.id))

    def next_completion_time(self) -> float:
        return self._heap[0][0] if self._heap else math.inf

    def advance_to(self, t: float) -> list[Completion]:
        done: list[Completion] = []
        heap = self._heap
        while heap and heap[0][0] <= t:
            finish, tid = heapq.heappop(heap)
            done.append(Completion(tid, finish))
        return done

    def advance_until(self, t: float) -> list[Completion]:
        """Completions at the next finish time if that is by ``t``; finish times are known
        in closed form, so nothing needs to run."""
        heap = self._heap
        if not heap or heap[0][0] > t:
            return []
        return self.advance_to(heap[0][0])
