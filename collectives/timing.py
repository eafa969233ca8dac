"""Contention-free timing of a FlowGraph: the algorithm's own time, with nothing else on the links.

Link model (documented so the closed forms can be derived from it):
- Resources. An intra-node GPU->GPU flow uses the source GPU's NVLink egress and the
  destination's NVLink ingress (``nvlink_bw`` each). A GPU->NVSwitch flow uses the GPU's
  NVLS egress, a switch->GPU flow the GPU's NVLS ingress (``nvls rate``, below). An
  inter-node flow uses the NIC of the source GPU's rail on its node (egress) and the NIC
  of the destination GPU's rail (ingress), ``nic_bw`` each.
- Sharing. A *lane* is (channel, src, dst, hop, step): one NCCL connection, and within
  it one stage of the algorithm. The lanes that use a
  resource at the same time share it evenly; "at the same time" means the same step for
  step-synchronous algorithms (ring, halving-doubling, all-to-all) and the whole graph for
  pipelined ones (tree, NVLS, chains, send/recv), per FlowGraph.concurrency. A flow's rate
  is ``min(egress share, ingress share) * protocol efficiency``. The shares are static, so
  the model stays contention-free (no dynamic max-min sharing; that is the packet
  backend's job).
- Time. A flow starts when all its parents have finished and lasts
  ``bytes / rate``, plus the link latency if it is the first chunk of its step on its lane
  (``chunk == 0``): later chunks stream behind the first. The collective's time is the
  latest finish.
- NVLS rate. ``nvls_busbw`` is a bus bandwidth (what nccl-tests reports for an NVLS
  all-reduce). A GPU sends S to and receives S from the switch, so the per-GPU rate that
  reproduces it is ``nvls_busbw * m / (2 (m-1))`` for m GPUs on the switch.

``LinkModel.from_system`` uses the system's *achievable* figures by default (nvlink_busbw,
nic_busbw = nic_bw * nic_efficiency), the same the analytical backend uses, so the two
agree on an uncongested collective; ``achievable=False`` uses line rates.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from collectives.flowgraph import FlowGraph, gather_csr
from collectives.protocol import get_protocol
from workload_gen.core.record import record
from workload_gen.core.system import SystemConfig


@record
class LinkModel:
    nvlink_bw: float
    """Per GPU, per direction, bytes/s."""
    nic_bw: float
    """Per NIC, per direction, bytes/s."""
    nvlink_latency_s: float
    network_latency_s: float
    nvls_busbw: float = 0.0
    """NVLS all-reduce bus bandwidth, bytes/s (0: no NVLS; switch flows then use nvlink_bw)."""

    @classmethod
    def from_system(cls, system: SystemConfig, achievable: bool = True) -> LinkModel:
        return cls(
            nvlink_bw=system.nvlink_busbw if achievable else system.nvlink_bw,
            nic_bw=system.nic_busbw if achievable else system.nic_bw,
            nvlink_latency_s=system.nvlink_latency_s,
            network_latency_s=system.network_latency_s,
            nvls_busbw=system.nvls_busbw if system.nvls else 0.0,
        )

    def nvls_rate(self, m: int) -> float:
        if self.nvls_busbw <= 0 or m < 2:
            return self.nvlink_bw
        return self.nvls_busbw * m / (2 * (m - 1))


@dataclass(frozen=True, slots=True, eq=False)
class Timing:
    time_s: float
    start_s: np.ndarray
    finish_s: np.ndarray
    rate: np.ndarray
    """Bytes/s each flow gets."""


_GPU_OUT, _GPU_IN, _NVLS_OUT, _NVLS_IN, _NIC_OUT, _NIC_IN = range(6)


def flow_rates(g: FlowGraph, links: LinkModel) -> np.ndarray:
    """Static share of each flow (see module docstring)."""
    n = g.num_flows
    gpn, nics = g.gpus_per_node, g.nics_per_node
    src, dst = g.src, g.dst
    to_sw, from_sw = dst < 0, src < 0
    inter = ~g.is_intra_node
    gpu_src, gpu_dst = np.maximum(src, 0), np.maximum(dst, 0)

    def nic(r):
        return (r // gpn) * nics + (r % gpn) * nics // gpn

    # one resource per side; a switch flow uses only its GPU's NVLS port (both keys equal)
    out_kind = np.select([inter, to_sw, from_sw], [_NIC_OUT, _NVLS_OUT, _NVLS_IN], _GPU_OUT)
    out_ent = np.select([inter, from_sw], [nic(gpu_src), gpu_dst], gpu_src)
    in_kind = np.select([inter, to_sw, from_sw], [_NIC_IN, _NVLS_OUT, _NVLS_IN], _GPU_IN)
    in_ent = np.select([inter, to_sw], [nic(gpu_dst), gpu_src], gpu_dst)

    bw = np.full(6, 0.0)
    bw[[_GPU_OUT, _GPU_IN]] = links.nvlink_bw
    bw[[_NIC_OUT, _NIC_IN]] = links.nic_bw
    nvls_bw = np.full(n, links.nvlink_bw)
    if (to_sw | from_sw).any():
        sw = np.where(to_sw, dst, src)
        gpu = np.where(to_sw, src, dst)
        sel = to_sw | from_sw
        pairs = np.unique(np.stack([sw[sel], gpu[sel]], axis=1), axis=0)
        sws, m = np.unique(pairs[:, 0], return_counts=True)  # GPUs attached to each switch
        rates = np.array([links.nvls_rate(int(c)) for c in m])
        nvls_bw[sel] = rates[np.searchsorted(sws, sw[sel])]

    lane_key = ((g.channel.astype(np.int64) * (1 << 22) + (src + (1 << 21))) * (1 << 22) + (dst + (1 << 21))) * 2 + g.hop
    _, lane = np.unique(lane_key, return_inverse=True)
    # different template edges on one connection (NVLS-tree: a head's reduce and its later
    # push into the switch) are separate streams: the step tells them apart
    _, lane = np.unique(lane.astype(np.int64) * (int(g.step.max()) + 1) + g.step, return_inverse=True)
    n_lanes = int(lane.max()) + 1
    group = g.step.astype(np.int64) if g.concurrency == "step" else np.zeros(n, dtype=np.int64)
    n_groups = int(group.max()) + 1

    def lanes_on(kind, ent):
        _, res = np.unique(kind.astype(np.int64) * (1 << 40) + ent, return_inverse=True)
        rg = res.astype(np.int64) * n_groups + group
        u = np.unique(rg * n_lanes + lane)
        cnt = np.bincount(u // n_lanes, minlength=int(rg.max()) + 1)
        return cnt[rg]

    res_bw_out = np.where((out_kind == _NVLS_OUT) | (out_kind == _NVLS_IN), nvls_bw, bw[out_kind])
    res_bw_in = np.where((in_kind == _NVLS_OUT) | (in_kind == _NVLS_IN), nvls_bw, bw[in_kind])
    rate = np.minimum(res_bw_out / lanes_on(out_kind, out_ent), res_bw_in / lanes_on(in_kind, in_ent))
    return rate * get_protocol(g.protocol).efficiency


def evaluate(g: FlowGraph, links: LinkModel) -> Timing:
    """Contention-free time of the whole graph (longest path with the static shares)."""
    n = g.num_flows
    if n == 0:
        z = np.zeros(0)
        return Timing(0.0, z, z, z)
    rate = flow_rates(g, links)
    lat = np.where(g.chunk == 0, np.where(g.is_intra_node, links.nvlink_latency_s, links.network_latency_s), 0.0)
    dur = g.bytes / rate + lat
    start = np.zeros(n)
    finish = np.zeros(n)
    for rows in g.levels():
        par, which = gather_csr(g.parent_ptr, g.parent_idx, rows)
        st = np.zeros(rows.size)
        if par.size:
            np.maximum.at(st, which, finish[par])
        start[rows] = st
        finish[rows] = st + dur[rows]
    return Timing(float(finish.max()), start, finish, rate)


def contention_free_time(g: FlowGraph, system: SystemConfig, achievable: bool = True) -> float:
    return evaluate(g, LinkModel.from_system(system, achievable)).time_s
