"""Unit constants, one home for each (bytes, FLOP/s).

Binary sizes (KiB, MiB, GiB) are what memory and NCCL message sizes are quoted in; the
decimal ones (GB, TFLOPS) are what vendor sheets quote. SimAI's cluster flags are GB/s
with GB = 2^30 bytes (GiB), as its source treats them.
"""
from __future__ import annotations

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB
GB = 1e9
"""Decimal gigabyte (vendor sheets: HBM size and bandwidth, NVLink GB/s)."""
GBIT = 1e9 / 8
"""Bytes in a gigabit (NIC line rates are quoted in Gb/s)."""
TFLOPS = 1e12
