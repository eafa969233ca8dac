"""Profile rows from a measured kernel table (formats/kernel_table.py).

A kernel table holds the workload generator's own op shapes with measured seconds, so
each row becomes a profile row under the key attach looks up (compute_profile.keys):
a workload whose shapes the table measured runs on those times (source ``imported``).

Weight gradients are stored per gradient dtype in a table (SimuMax measures fp32 and
bf16 main gradients) but share one profile key; the import keeps the rows of one
gradient width (``grad_bytes``, default 4: Megatron accumulates bf16 training's
gradients in fp32) and reports how many it left out.

Units: seconds.
"""
from __future__ import annotations

import datetime as _dt
import statistics
from collections.abc import Sequence

from compute_profile.db import ProfileRow, stored_gpu_name
from compute_profile.keys import profile_phase, shape_key
from formats.kernel_table import MeasuredKernel
from workload_gen.core.records import Phase


def rows_from_kernel_table(kernels: Sequence[MeasuredKernel], gpu: str, note: str,
                           grad_bytes: int = 4) -> tuple[list[ProfileRow], int]:
    """(profile rows, rows left out for another gradient width). ``note`` says where the
    table came from (kept on every row)."""
    name = stored_gpu_name(gpu)
    date = _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")
    groups: dict[tuple[str, str, str, str], list[MeasuredKernel]] = {}
    skipped = 0
    for k in kernels:
        if Phase(k.op.phase) is Phase.BWD_WEIGHT and k.grad_bytes != grad_bytes:
            skipped += 1
            continue
        key = (k.op.kind.value, shape_key(k.op), k.op.dtype, profile_phase(k.op.phase).value)
        groups.setdefault(key, []).append(k)
    rows: list[ProfileRow] = []
    for (kind, skey, dtype, phase), ks in groups.items():
        # one profile key, several measurements (a table may time one kernel twice, or two
        # kernels the key does not tell apart, e.g. attention with other KV-head counts)
        times = sorted(k.time_s for k in ks)
        extra = f"; median of {len(ks)}" if len(ks) > 1 else ""
        rows.append(ProfileRow(gpu=name, kind=kind, shape_key=skey, dtype=dtype, phase=phase,
                               time_s=statistics.median(times), source="imported", flops=ks[0].op.flops,
                               bytes=ks[0].op.bytes, min_s=times[0], max_s=times[-1], repeats=len(ks),
                               date=date, note=note + extra))
    return rows, skipped
