"""Write one pipeline stage of a workload as a SimAI workload file.

The mapping from our records to SimAI's is in :mod:`formats.simai_convert`; this module
only renders it and writes it atomically (a failed export leaves no file behind).
"""
from __future__ import annotations

import os

from formats.atomic import write_text_atomic
from formats.simai_convert import AICB_UPDATE_NS, workload_to_simai
from formats.simai_text import render_simai
from workload_gen.core.records import Workload


def write_simai(workload: Workload, path: str | os.PathLike[str], stage: int = 0, *, update_ns: int = AICB_UPDATE_NS) -> None:
    """Export pipeline stage ``stage`` of ``workload`` as SimAI text (HYBRID_TRANSFORMER_FWD_IN_BCKWD).

    Needs compute times on every op of that stage (``ConfigError`` naming ``--gpu``
    otherwise); refuses cp > 1 (SimAI has no CP group).
    """
    write_text_atomic(path, render_simai(workload_to_simai(workload, stage, update_ns=update_ns)))
