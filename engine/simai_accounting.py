"""SimAI_analytical's own accounting, reproduced for users who compare with SimAI.

This is ``run-analytical --accounting simai``: not our model of a training iteration,
but a faithful copy of what SimAI 1.7's analytical binary reports for a SimAI workload
file (``workload/Layer.cc`` ``report``/``compute_time``, ``system/calbusbw.cc``), bugs
included, so that numbers can be compared one to one. Our own accounting (the event
simulation) never uses anything from this module.

What SimAI does (all figures per iteration, for rank 0 only):

* Compute: the sum over records of forward + input-grad + weight-grad compute. The
  collectives are never on the timeline; their times are computed at report time.
* Each collective: a short message (1 < bytes < 1 MiB) costs a fixed latency by group
  size (2: 10 us, 4: 12, 8: 15, 16: 66, 32: 135, 64: 200, 128: 320; any other size: 0,
  which is SimAI's bug). Otherwise
  ``time_ns = bytes / 2^30 / (ratio * busbw) * 1e9 * f`` with ``f = 2(n-1)/n`` for
  all-reduce and ``(n-1)/n`` for the rest, truncated to whole ns.
* busbw comes from the cluster flags after mapping the group onto nodes
  (:func:`group_busbw`); the ratio from SimAI's measured tables (:func:`bw_ratio`).
* Exposed: weight-grad comm * (1 - dp_o) goes to DP or DP_EP; forward + input-grad
  comm * (1 - ep_o) goes to EP when the *forward* group is EP, else * (1 - tp_o) to TP.
* Bubble = sum over records except ``embedding_layer`` of (fwd comm + fwd compute +
  wg compute + ig compute + ig comm) * (PP - 1) / (ga * vpp), using the full
  (pre-overlap) comm times.
* Exposed PP = 2 * vpp * ga * (pp_comm / 2^30 / pp_o * 1e9) / 1000 * (1 - pp_o): SimAI
  divides by the overlap ratio where a bandwidth belongs; 0 at the default pp_o = 1.
* Total = compute + exposed comm + bubble + exposed PP.

Precision follows SimAI's C++ types: bandwidths and ratios are ``float`` (emulated by
rounding each operation to single precision), times are ``double`` then truncated to integer ns (``Tick``), and the
overlap scaling multiplies a Tick by a float in float precision. That is what makes the
official example match to the microsecond.

Where SimAI's behaviour is undefined rather than merely odd (a one-rank TP group gives
0/0, a zero-NIC group mapping gives busbw -1, pp_o = 0 divides by zero), we raise a
clear error or, for the one-rank group, charge 0 and say so in docs/simai.md.
"""
from __future__ import annotations

import struct
from functools import lru_cache
from operator import attrgetter
from typing import TYPE_CHECKING

from formats.simai_reader import check_runnable
from formats.simai_text import SimaiGroup, SimaiRecord, SimaiWorkload, coll_name, comm_group
from workload_gen.core.errors import ConfigError
from workload_gen.core.record import record
from workload_gen.core.units import GiB as GIB

if TYPE_CHECKING:
    from workload_gen.core.records import CollKind

_FLOAT = struct.Struct("f")


def F32(x: float) -> float:  # noqa: N802 - reads like the C type it stands for
    """Round to IEEE single precision, as a C ``float`` holds it.

    One +, -, * or / of two floats done in double and rounded once to float gives the
    correctly rounded float result, so chaining this after each operation reproduces
    SimAI's float arithmetic without numpy.
    """
    return _FLOAT.unpack(_FLOAT.pack(x))[0]


"""SimAI's "GB" (its ``GBps`` macro is 1/2^30)."""
FREQ = 1000.0
"""SimAI's ticks (ns) per reported unit (us)."""

SHORT_MESSAGE_LATENCY_NS: dict[int, int] = {2: 10_000, 4: 12_000, 8: 15_000, 16: 66_000, 32: 135_000, 64: 200_000, 128: 320_000}
"""SimAI's fixed cost of a 1 < bytes < 1 MiB collective, by group size; other sizes cost 0 (its bug)."""
SHORT_MESSAGE_LIMIT = 1_048_576

_COLLECTIVES = frozenset({"allreduce", "allgather", "reducescatter", "alltoall"})
"""The collectives SimAI's analytical model prices (CollKind values; a StrEnum is its value as str)."""


@record(kw_only=True)
class SimaiCluster:
    """SimAI_analytical's command-line flags."""

    gpus: int
    """``-g``: GPU count; DP = gpus / (tp * pp)."""
    gpus_per_server: int = 8
    """``-g_p_s``."""
    nvlink_busbw: float
    """``-nv``: NVLink bus bandwidth, GB/s (2^30 bytes)."""
    nic_busbw: float
    """``-nic``: bandwidth of one NIC, GB/s (2^30 bytes)."""
    nics_per_server: int = 8
    """``-n_p_s``."""
    dp_o: float = 0.0
    tp_o: float = 0.0
    ep_o: float = 0.0
    pp_o: float = 1.0

    def __post_init__(self) -> None:
        for name in ("gpus", "gpus_per_server", "nics_per_server"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(name, value, "must be a positive integer")
        for name in ("nvlink_busbw", "nic_busbw"):
            value = getattr(self, name)
            if not value > 0:
                raise ConfigError(name, value, "must be a positive bandwidth in GB/s")
        for name in ("dp_o", "tp_o", "ep_o"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ConfigError(name, value, "an overlap ratio must be in [0, 1]")
        if not 0.0 < self.pp_o <= 1.0:
            raise ConfigError("pp_o", self.pp_o, "must be in (0, 1]: SimAI divides the PP message by it")


@record
class SimaiLayerRow:
    """One record's line of SimAI's per-layer table (us; bandwidths in GB/s of 2^30 bytes)."""

    name: str
    fwd_compute_us: float
    wg_compute_us: float
    ig_compute_us: float
    fwd_exposed_us: float
    wg_exposed_us: float
    ig_exposed_us: float
    fwd_comm_us: float
    fwd_algbw: float
    fwd_busbw: float
    wg_comm_us: float
    wg_algbw: float
    wg_busbw: float
    ig_comm_us: float
    ig_algbw: float
    ig_busbw: float

    def as_dict(self) -> dict[str, object]:
        return dict(zip(_ROW_FIELDS, _row_values(self)))


_ROW_FIELDS: tuple[str, ...] = SimaiLayerRow.__slots__  # type: ignore[attr-defined]
_row_values = attrgetter(*_ROW_FIELDS)


@record
class SimaiAccounting:
    """What SimAI_analytical reports (us)."""

    compute_us: float
    dp_us: float
    dp_ep_us: float
    tp_us: float
    ep_us: float
    pp_us: float
    bubble_us: float
    layers: tuple[SimaiLayerRow, ...]

    @property
    def exposed_comm_us(self) -> float:
        """SimAI's "total exposed comm": DP + DP_EP + TP + EP (not PP, not bubble)."""
        return self.dp_us + self.dp_ep_us + self.tp_us + self.ep_us

    @property
    def total_us(self) -> float:
        return self.compute_us + self.exposed_comm_us + self.bubble_us + self.pp_us

    def totals_us(self) -> dict[str, float]:
        """The categories of SimAI's EndToEnd.csv, for :func:`formats.endtoend_csv.write_endtoend_csv`."""
        return {
            "dp": self.dp_us, "dp_ep": self.dp_ep_us, "tp": self.tp_us, "ep": self.ep_us, "pp": self.pp_us,
            "bubble": self.bubble_us, "compute": self.compute_us, "exposed": self.exposed_comm_us,
            "total": self.total_us,
        }


# --------------------------------------------------------------------------- ratio tables
@lru_cache(maxsize=None)
def load_ratio_table(name: str) -> tuple[tuple[float, ...], ...]:
    """One of SimAI's ratio CSVs (``nic``, ``nvlink``, ``ata``), read as SimAI reads it.

    The header row is skipped, cells are trimmed, an empty cell reads as 1; a trailing
    comma does not make an extra cell (C++ getline), which never matters because the
    column it would be is unreachable.
    """
    import csv
    from importlib import resources

    text = resources.files("engine.data.simai_ratio").joinpath(f"{name}_ratio.csv").read_text(encoding="utf-8")
    rows = list(csv.reader(text.splitlines()))[1:]
    table = []
    for row in rows:
        if not row:
            continue
        table.append(tuple(float(c.strip()) if c.strip() else 1.0 for c in row))
    return tuple(table)


_COLUMN_OF_NODES: dict[int, int] = {1: 1, 2: 2, 4: 3, 8: 4, 16: 5, 32: 6, 64: 7, 128: 8, 9: 9}
"""SimAI's getValue column per node count; 9 is its code for the "Multi 16" column; anything else -> 5 (16 nodes)."""


def ratio_value(size: float, nodes: int, table: tuple[tuple[float, ...], ...]) -> float:
    """SimAI's ``getValue``: linear interpolation over message size, normalised by the last row.

    Below the first row the first row is used. SimAI 1.7 throws "Data size out of range"
    above the last row (16 GiB); we use the last row there and document it.
    """
    col = _COLUMN_OF_NODES.get(nodes, 5)
    if size == 0:
        return F32(1.0)
    last = table[-1][col]
    if size < table[0][0]:
        return F32(table[0][col] / last)
    for lo, hi in zip(table, table[1:]):
        if lo[0] <= size <= hi[0]:
            v = lo[col] + (hi[col] - lo[col]) * (size - lo[0]) / (hi[0] - lo[0])
            return F32(v / last)
    return F32(table[-1][col] / last)


def bw_ratio(size: int, nranks: int, tp: int, gpus_per_server: int, group: SimaiGroup, coll: str, is_nvlink: bool) -> float:
    """SimAI's ``cal_ratio``: which table and column apply to a collective."""
    if coll in ("allgather", "reducescatter") and group == SimaiGroup.TP:
        table = load_ratio_table("nvlink" if is_nvlink else "nic")
        nodes = 1 if tp < gpus_per_server else tp // gpus_per_server
        return ratio_value(size, nodes, table)
    if coll == "alltoall" and group == SimaiGroup.EP:
        table = load_ratio_table("ata")
        if tp * nranks <= gpus_per_server:
            return ratio_value(size, 1, table)
        if tp >= gpus_per_server:
            return ratio_value(size, 9, table)
        return ratio_value(size, tp * nranks // gpus_per_server, table)
    if coll == "alltoall" and group == SimaiGroup.TP:
        table = load_ratio_table("ata")
        return ratio_value(size, 1 if tp <= gpus_per_server else tp // gpus_per_server, table)
    return F32(1.0)


# --------------------------------------------------------------------------- busbw
def calc_busbw(nvlink: float, nic: float, nics_per_node: float, node_count: int, gpus_per_node: int, coll: str) -> tuple[float, bool]:
    """SimAI's ``cal_busbw``/``calculateBusBw`` with ring all-reduce: (busbw GB/s, NVLink-bound)."""
    if gpus_per_node * node_count == 1:
        return F32(0.0), False  # SimAI: "requires at least two gpus", busbw 0
    if nvlink <= 0 or nic <= 0 or gpus_per_node < 1 or int(nics_per_node) < 1 or node_count < 1:
        return F32(-1.0), False
    nic_total = F32(nics_per_node * nic)
    cross_nic = nic_total > nvlink
    is_nvlink = False
    if node_count == 1:
        ring = nvlink
    elif gpus_per_node == 1:
        ring = nic_total
    else:
        if nvlink < nic_total:
            ring, is_nvlink = nvlink, True
        else:
            ring = nic_total
        if cross_nic:
            is_nvlink = False
            scaled = F32(F32(nvlink * F32(gpus_per_node)) / F32(gpus_per_node - 1))
            if scaled < nic_total:
                ring, is_nvlink = scaled, True
            else:
                ring = nic_total
    if coll == "alltoall":
        if node_count == 1:
            return nvlink, True
        nranks = node_count * gpus_per_node
        bw = F32(F32(F32(nic_total / F32(gpus_per_node)) * F32(nranks - 1)) / F32((node_count - 1) * gpus_per_node))
        return bw, is_nvlink
    return F32(ring), is_nvlink


def group_busbw(cluster: SimaiCluster, group: SimaiGroup, tp: int, ep: int, nranks: int, coll: str) -> tuple[float, bool] | None:
    """Map a group onto nodes as SimAI's ``compute_time`` does; None means SimAI charges 0.

    Integer divisions are SimAI's (its NIC counts are ``uint32 / int``).
    """
    g, nics = cluster.gpus_per_server, cluster.nics_per_server
    nv, nic = F32(cluster.nvlink_busbw), F32(cluster.nic_busbw)
    if group == SimaiGroup.TP:
        if tp <= g:
            return calc_busbw(nv, nic, F32(nics), 1, tp, coll)
        return calc_busbw(nv, nic, F32(nics), tp // g, g, coll)
    if group == SimaiGroup.EP and nranks > 1:
        if tp * nranks <= g:
            return calc_busbw(nv, nic, F32(nics), 1, g // tp, coll)
        gpn = g // tp if g // tp > 1 else 1
        nics_pn = nics // g if tp > g else nics // tp
        return calc_busbw(nv, nic, F32(nics_pn), tp * nranks // g, gpn, coll)
    if group == SimaiGroup.DP and nranks > 1:
        if tp <= g:
            return calc_busbw(nv, nic, F32(nics // tp), nranks, g // tp, coll)
        return calc_busbw(nv, nic, F32(nics // g), nranks, 1, coll)
    if group == SimaiGroup.DP_EP and nranks > 1:
        if tp * ep <= g:
            return calc_busbw(nv, nic, F32(nics // (tp * ep)), nranks, g // (tp * ep), coll)
        return calc_busbw(nv, nic, F32(nics // g), nranks, 1, coll)
    return None


def comm_time_ns(
    cluster: SimaiCluster, kind: CollKind | str | None, group: SimaiGroup | None, size: int, nranks: int, tp: int, ep: int,
    where: str = "",
) -> int:
    """SimAI's ``compute_time`` for one collective, in integer ns."""
    if kind is None or group is None:
        return 0
    if 1 < size < SHORT_MESSAGE_LIMIT:
        return SHORT_MESSAGE_LATENCY_NS.get(nranks, 0)
    if nranks <= 1:
        return 0  # SimAI computes 0/0 here (undefined); a one-rank group moves nothing
    coll = str(kind)
    if coll not in _COLLECTIVES:
        raise ConfigError("collective", coll, f"SimAI's analytical model prices {', '.join(sorted(_COLLECTIVES))}")
    mapped = group_busbw(cluster, group, tp, ep, nranks, coll)
    if mapped is None:
        return 0
    busbw, is_nvlink = mapped
    if busbw <= 0:
        raise ConfigError(
            "nics_per_server", cluster.nics_per_server,
            f"SimAI maps the {group.value} group of {nranks} ranks{where} onto fewer than one NIC per GPU group "
            f"(integer NICs/(tp*ep) or NICs/tp is 0) and its busbw is undefined; use at least tp*ep NICs per server",
        )
    ratio = bw_ratio(size, nranks, tp, cluster.gpus_per_server, group, coll, is_nvlink)
    denom = float(F32(ratio * busbw))
    t = float(size) * 1.0 / GIB / denom * 1e9
    if kind == "allreduce":
        t = t * 2
    t = t * (nranks - 1) / (nranks / 1.0)
    return int(t)


def _algbw_busbw(kind: CollKind | str | None, nranks: int, size: int, time_ns: int) -> tuple[float, float]:
    """SimAI's per-layer algbw/busbw columns; 0 where it would print inf or nan."""
    if kind is None or time_ns <= 0:
        return 0.0, 0.0
    algbw = float(F32(size / (time_ns / FREQ) * 1_000_000 / GIB))
    factor = 2 * (nranks - 1) / nranks if kind == "allreduce" else (nranks - 1) / nranks
    return algbw, float(F32(algbw * factor))


def _scale(tick: int, overlap: float) -> int:
    """``Tick *= (1 - ratio)`` in SimAI: the product is formed in float, then truncated."""
    return int(F32(F32(tick) * F32(F32(1.0) - F32(overlap))))


def simai_accounting(workload: SimaiWorkload, cluster: SimaiCluster) -> SimaiAccounting:
    """Reproduce SimAI_analytical's report for ``workload`` on ``cluster``."""
    header = workload.header
    check_runnable(header, workload.source or "<workload>")
    tp, pp, ga = header.tp, header.pp, header.ga
    assert tp and pp and ga  # guaranteed by check_runnable
    ep = header.ep or 1
    vpp = header.vpp or 1
    if cluster.gpus % (tp * pp):
        raise ConfigError(
            "gpus", cluster.gpus,
            f"SimAI needs -g divisible by tp*pp = {tp}*{pp} = {tp * pp} (the header's all_gpus is {header.all_gpus})",
        )
    dp = cluster.gpus // (tp * pp)
    if dp % ep:
        raise ConfigError("gpus", cluster.gpus, f"DP = {dp} is not divisible by ep = {ep}; SimAI's DP_EP group would be fractional")

    compute_ns = 0
    bubble_us = 0.0
    dp_us = dp_ep_us = tp_us = ep_us = 0.0
    rows: list[SimaiLayerRow] = []
    memo: dict[tuple, int] = {}
    # Records repeat ga times, and a file read from disk shares one record object per
    # distinct line (formats.simai_reader): each distinct record is costed once, and the
    # sums below add its terms in file order, exactly as the record-by-record loop did.
    per_record: dict[int, tuple] = {}
    for idx, rec in enumerate(workload.records):
        terms = per_record.get(id(rec))
        if terms is None:
            terms = per_record[id(rec)] = _record_terms(workload, rec, idx, cluster, tp, ep, dp, memo)
        bubble, wg_term, wg_dp_ep, fi_term, fi_ep, compute, row = terms
        if bubble is not None:
            bubble_us += bubble
        if wg_dp_ep:
            dp_ep_us += wg_term
        else:
            dp_us += wg_term
        if fi_ep:
            ep_us += fi_term
        else:
            tp_us += fi_term
        compute_ns += compute
        rows.append(row)
    bubble_us *= (pp - 1) / (ga * vpp)
    pp_comm = (header.pp_comm or 0) & 0xFFFFFFFF  # SimAI keeps it in a uint32
    pp_o = float(F32(cluster.pp_o))
    pp_tick = int(2 * vpp * ga * (pp_comm * 1.0 / GIB / pp_o * 1e9) / FREQ)
    pp_us = float(_scale(pp_tick, cluster.pp_o))
    # SimAI sums compute as doubles of per-record Tick/FREQ; the integer sum is the same to < 1e-6 us.
    return SimaiAccounting(
        compute_us=compute_ns / FREQ, dp_us=dp_us, dp_ep_us=dp_ep_us, tp_us=tp_us, ep_us=ep_us,
        pp_us=pp_us, bubble_us=bubble_us, layers=tuple(rows),
    )


def _record_terms(workload: SimaiWorkload, rec: SimaiRecord, idx: int, cluster: SimaiCluster, tp: int, ep: int,
                  dp: int, memo: dict[tuple, int]) -> tuple:
    """One record's share of the report: (bubble term or None, weight-grad exposed us, whether
    it is DP_EP, forward + input-grad exposed us, whether that is EP, compute ns, its row)."""
    fwd_c, ig_c, wg_c = rec.fwd_comm, rec.ig_comm, rec.wg_comm
    g_f, g_i, g_w = comm_group(fwd_c.token, "fwd"), comm_group(ig_c.token, "ig"), comm_group(wg_c.token, "wg")
    k_f, k_i, k_w = coll_name(fwd_c.token), coll_name(ig_c.token), coll_name(wg_c.token)
    s_f, s_i, s_w = (workload.effective_bytes(rec, "fwd"), workload.effective_bytes(rec, "ig"),
                     workload.effective_bytes(rec, "wg"))
    # SimAI's group sizes: fwd/ig use ep for EP groups, else tp; wg uses dp, or dp/ep for DP_EP
    n_f = ep if g_f == SimaiGroup.EP else tp
    n_i = ep if g_i == SimaiGroup.EP else tp
    n_w = dp // ep if g_w == SimaiGroup.DP_EP else dp
    where = f" (record {idx + 1}, {rec.name})"
    t = []
    for key in ((k_f, g_f, s_f, n_f), (k_i, g_i, s_i, n_i), (k_w, g_w, s_w, n_w)):
        if key not in memo:  # records repeat ga times: time each distinct collective once
            memo[key] = comm_time_ns(cluster, *key, tp, ep, where)
        t.append(memo[key])
    t_f, t_i, t_w = t
    bubble = None
    if rec.name != "embedding_layer":
        bubble = (t_f + rec.fwd_compute_ns + rec.wg_compute_ns + rec.ig_compute_ns + t_i) / FREQ
    wg_exp = _scale(t_w, cluster.dp_o)
    o = cluster.ep_o if g_f == SimaiGroup.EP else cluster.tp_o
    fwd_exp, ig_exp = _scale(t_f, o), _scale(t_i, o)
    bw_f, bw_i, bw_w = _algbw_busbw(k_f, n_f, s_f, t_f), _algbw_busbw(k_i, n_i, s_i, t_i), _algbw_busbw(k_w, n_w, s_w, t_w)
    row = SimaiLayerRow(
        name=rec.name,
        fwd_compute_us=rec.fwd_compute_ns / FREQ, wg_compute_us=rec.wg_compute_ns / FREQ,
        ig_compute_us=rec.ig_compute_ns / FREQ,
        fwd_exposed_us=fwd_exp / FREQ, wg_exposed_us=wg_exp / FREQ, ig_exposed_us=ig_exp / FREQ,
        fwd_comm_us=t_f / FREQ, fwd_algbw=bw_f[0], fwd_busbw=bw_f[1],
        wg_comm_us=t_w / FREQ, wg_algbw=bw_w[0], wg_busbw=bw_w[1],
        ig_comm_us=t_i / FREQ, ig_algbw=bw_i[0], ig_busbw=bw_i[1],
    )
    return (bubble, wg_exp / FREQ, g_w == SimaiGroup.DP_EP, (fwd_exp + ig_exp) / FREQ, g_f == SimaiGroup.EP,
            rec.fwd_compute_ns + rec.wg_compute_ns + rec.ig_compute_ns, row)
