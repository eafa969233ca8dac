"""fct.csv and links.csv: the per-flow and per-link results only the packet backend has.

Units are in the column names (seconds, bytes, bits/s). Rows are in a stable order
(flows by global id = submission order; links in fabric order, a->b then b->a), so two
runs of the same inputs write identical files.
"""
from __future__ import annotations

import io
from pathlib import Path

import numpy as np

from formats.atomic import write_text_atomic
from network.ns3.backend import Ns3Backend


def fct_csv(backend: Ns3Backend) -> str:
    """One row per flow: who sent what when, and the finish it would have had alone."""
    table = backend.net.flow_table()
    buf = io.StringIO()
    buf.write("flow,transfer,collective,group,src_rank,dst_rank,bytes,fabric,start_s,finish_s,ideal_finish_s,slowdown\n")
    for tf in backend.transfers:
        n = len(tf.src_rank)
        rows = table[tf.first_flow:tf.first_flow + n]
        for k in range(n):
            _, _, nbytes, start, finish, fluid = rows[k]
            ideal = start + tf.ideal_s[k]
            dur = finish - start
            slow = dur / tf.ideal_s[k] if tf.ideal_s[k] > 0 and finish >= 0 else float("nan")
            buf.write(f"{tf.first_flow + k},{tf.transfer},{tf.name},{tf.group},{tf.src_rank[k]},{tf.dst_rank[k]},"
                      f"{int(nbytes)},{'nvlink' if fluid else 'network'},{start:.9g},{finish:.9g},{ideal:.9g},{slow:.4f}\n")
    return buf.getvalue()


def links_csv(backend: Ns3Backend, duration_s: float | None = None) -> str:
    """Per link direction: bytes sent, utilisation over the run, deepest queue, drops."""
    t = duration_s if duration_s is not None else backend.net.now
    buf = io.StringIO()
    buf.write("src,dst,rate_bps,tx_bytes,utilisation,peak_queue_bytes,drops\n")
    for r in backend.net.link_reports():
        util = r.tx_bytes * 8 / (r.rate_bps * t) if t > 0 else 0.0
        buf.write(f"{r.src},{r.dst},{r.rate_bps:.6g},{r.tx_bytes},{util:.6f},{r.peak_queue_bytes},{r.drops}\n")
    return buf.getvalue()


def write_ns3_outputs(backend: Ns3Backend, out: str | Path, duration_s: float | None = None) -> list[str]:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out / "fct.csv", fct_csv(backend))
    write_text_atomic(out / "links.csv", links_csv(backend, duration_s))
    return ["fct.csv", "links.csv"]


def slowdowns(backend: Ns3Backend) -> np.ndarray:
    """Per network flow: actual / ideal duration (1 = as if alone on the fabric)."""
    table = backend.net.flow_table()
    out = []
    for tf in backend.transfers:
        rows = table[tf.first_flow:tf.first_flow + len(tf.src_rank)]
        ok = (rows[:, 5] == 0) & (rows[:, 4] >= 0) & (tf.ideal_s > 0)
        out.append((rows[ok, 4] - rows[ok, 3]) / tf.ideal_s[ok])
    return np.concatenate(out) if out else np.zeros(0)
