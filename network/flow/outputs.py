"""fct.csv and links.csv for run-flow: run-ns3's per-flow and per-link files, minus the packets.

The columns that exist at flow level keep run-ns3's names and meanings (docs/ns3.md), so a
script that reads run-ns3's files reads these, and the two backends' files of one run can
be joined on ``flow`` (both number flows in submission order from the same expansion):

- fct.csv: ``flow, transfer, collective, group, src_rank, dst_rank`` (-1: the node's
  NVSwitch), ``bytes``, ``fabric`` (network or nvlink), ``start_s, finish_s,
  ideal_finish_s`` (the finish it would have had alone on an idle path) and ``slowdown``
  (actual / ideal duration): what contention cost each flow;
- links.csv: per fabric link direction, ``src, dst, rate_bps, tx_bytes`` (wire bytes,
  headers included) and ``utilisation`` (tx bits / rate / iteration time). The queue, PFC,
  ECN and loss columns of run-ns3 are absent: a max-min model has none of them.

Rows are in a stable order (flows by id, links in fabric order, a->b then b->a), so two runs
of the same inputs write identical files. Written like run-ns3's (engine.commands.run):
rendered in memory, then put in place together.

Units: seconds, bytes, bits/s.
"""
from __future__ import annotations

import io

from network.flow_files import FCT_HEADER, LINK_COLUMNS, fct_row, link_cells

FLOW_OUTPUT_FILES = ("fct.csv", "links.csv")
"""The files run-flow adds to a run directory (the flow kind declares them as output_files)."""



def fct_csv(backend) -> str:
    """One row per flow of every collective the backend ran (see the module docstring)."""
    f = backend.net.flows
    buf = io.StringIO()
    buf.write(FCT_HEADER)
    for rec in backend.records:
        n = len(rec.src_rank)
        sl = slice(rec.first_flow, rec.first_flow + n)
        nbytes, fluid = f["bytes"][sl], f["fluid"][sl]
        start, done, ideal = f["start"][sl], f["done"][sl], f["ideal"][sl]
        for k in range(n):
            buf.write(fct_row(rec.first_flow + k, rec.transfer, rec.collective, rec.group, rec.src_rank[k],
                              rec.dst_rank[k], nbytes[k], fluid[k], start[k], done[k], ideal[k]))
    return buf.getvalue()


def links_csv(backend, duration_s: float | None = None) -> str:
    """Per fabric link direction: wire bytes carried and utilisation over ``duration_s``
    (the iteration; the network's clock when not given)."""
    net, fabric = backend.net, backend.fabric
    t = duration_s if duration_s is not None else net.now
    buf = io.StringIO()
    buf.write(LINK_COLUMNS + "\n")
    for i, ln in enumerate(fabric.links):
        for side, (a, b) in enumerate(((ln.a, ln.b), (ln.b, ln.a))):
            tx = int(round(net.link_bytes[2 * i + side]))
            buf.write(link_cells(fabric.node_name(a), fabric.node_name(b), ln.rate_bps, tx, t) + "\n")
    return buf.getvalue()


def render_flow_outputs(backend, duration_s: float | None = None) -> dict[str, str]:
    """fct.csv and links.csv, rendered in memory (name -> text)."""
    return {"fct.csv": fct_csv(backend), "links.csv": links_csv(backend, duration_s)}
