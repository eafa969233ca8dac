"""fct.csv and links.csv: the per-flow and per-link results only the packet backend has.

Units are in the column names (seconds, bytes, bits/s). Rows are in a stable order
(flows by global id = submission order; links in fabric order, a->b then b->a), so two
runs of the same inputs write identical files.

They are added to the run directory after the shared outputs (engine.commands.run.write_outputs
replaced it as a whole and removed any earlier fct.csv/links.csv), both rendered first and
written together: each to a temporary file, renamed into place only once both are
written, so a failure leaves neither half-written nor one new beside one old.
"""
from __future__ import annotations

import io

from network.flow_files import FCT_HEADER, LINK_COLUMNS, fct_row, link_cells
from network.ns3.backend import Ns3Backend

NS3_OUTPUT_FILES = ("fct.csv", "links.csv")
"""The files run-ns3 adds to a run directory (the ns3 kind declares them as output_files; a test checks they agree)."""


def fct_csv(backend: Ns3Backend) -> str:
    """One row per flow: who sent what when, and the finish it would have had alone."""
    table = backend.net.flow_table()
    buf = io.StringIO()
    buf.write(FCT_HEADER)
    for tf in backend.transfers:
        n = len(tf.src_rank)
        rows = table[tf.first_flow:tf.first_flow + n]
        for k in range(n):
            _, _, nbytes, start, finish, fluid = rows[k]
            buf.write(fct_row(tf.first_flow + k, tf.transfer, tf.collective, tf.group, tf.src_rank[k], tf.dst_rank[k],
                              nbytes, fluid, start, finish, tf.ideal_s[k]))
    return buf.getvalue()


def links_csv(backend: Ns3Backend, duration_s: float | None = None) -> str:
    """Per link direction: bytes sent, utilisation over the run, deepest queue, drops, and
    per traffic class (data = priority 3, lossless, ECN-capable; CNPs = priority 6): PFC
    pauses sent and received and time paused (p3), ECN marks (p3), CNPs (p6), and the
    peak buffer the receiving switch held for this port (p3) and the sender's whole
    shared buffer at its peak; in the reliable mode (HPCC, lossy links) ACKs and NACKs sent
    (p6, the CNP class), and packets lost to the link's error rate."""
    t = duration_s if duration_s is not None else backend.net.now
    buf = io.StringIO()
    buf.write(LINK_COLUMNS + ",peak_queue_bytes,drops,pauses_sent_p3,pauses_received_p3,"
              "paused_s_p3,ecn_marks_p3,cnps_p6,peak_ingress_bytes_p3,peak_switch_buffer_bytes,acks_p6,nacks_p6,lost\n")
    for r in backend.net.link_reports():
        buf.write(f"{link_cells(r.src, r.dst, r.rate_bps, r.tx_bytes, t)},{r.peak_queue_bytes},{r.drops},"
                  f"{r.pauses_sent},{r.pauses_received},{r.paused_s:.9g},{r.ecn_marks},{r.cnps},"
                  f"{r.peak_ingress_bytes},{r.peak_switch_buffer_bytes},{r.acks},{r.nacks},{r.lost}\n")
    return buf.getvalue()


def render_ns3_outputs(backend: Ns3Backend, duration_s: float | None = None) -> dict[str, str]:
    """fct.csv and links.csv, rendered in memory (name -> text)."""
    return {"fct.csv": fct_csv(backend), "links.csv": links_csv(backend, duration_s)}


