"""The columns and number formats fct.csv and links.csv have in run-ns3 and run-flow alike.

Why one home: the two backends' files of one run are joined on ``flow`` and read by the same
scripts (docs/ns3.md), so a shared column must be named, ordered and printed the same way by
both; each backend only decides the values (and run-ns3 appends its packet-only link
columns after :data:`LINK_COLUMNS`).

Units: seconds, bytes, bits/s.
"""
from __future__ import annotations

FCT_HEADER = "flow,transfer,collective,group,src_rank,dst_rank,bytes,fabric,start_s,finish_s,ideal_finish_s,slowdown\n"

LINK_COLUMNS = "src,dst,rate_bps,tx_bytes,utilisation"
"""The links.csv columns both backends have, first on every row."""


def fct_row(flow: int, transfer: int, collective: str, group: str, src_rank: int, dst_rank: int, nbytes: float,
            fluid: bool, start_s: float, finish_s: float, ideal_s: float) -> str:
    """One fct.csv line (``fluid``: the flow went over NVLink, not the network fabric;
    ``ideal_s``: its duration alone on an idle path). ``slowdown`` is the actual over the ideal
    duration; a flow with no duration of its own (zero bytes, or a NIC to itself) took its
    ideal, 1; one that never finished (a run cut short, ``finish_s`` < 0) has an empty cell,
    never NaN."""
    if finish_s < 0:
        slowdown = ""
    else:
        slowdown = f"{(finish_s - start_s) / ideal_s if ideal_s > 0 else 1.0:.4f}"
    return (f"{flow},{transfer},{collective},{group},{src_rank},{dst_rank},{int(nbytes)},"
            f"{'nvlink' if fluid else 'network'},{start_s:.9g},{finish_s:.9g},{start_s + ideal_s:.9g},{slowdown}\n")


def link_cells(src: str, dst: str, rate_bps: float, tx_bytes: int, duration_s: float) -> str:
    """The :data:`LINK_COLUMNS` cells of one link direction (no line end): utilisation is the
    bits it sent over its rate times ``duration_s`` (0 for an empty run)."""
    util = tx_bytes * 8 / (rate_bps * duration_s) if duration_s > 0 else 0.0
    return f"{src},{dst},{rate_bps:.6g},{tx_bytes},{util:.6f}"
