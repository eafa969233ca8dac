"""NCCL protocols as the expander models them: chunk size and payload efficiency.

NCCL moves data through a FIFO of ``NCCL_STEPS = 8`` slots per channel and peer, and a
rank posts data in *chunks* of several slots. We keep one number per protocol, the chunk
a flow carries at most, and one efficiency, the payload fraction of the bytes on the wire:

- ``simple``: 4 MiB buffer / 8 slots = 512 KiB per slot, 4 slots per chunk (NCCL's
  ``ALLREDUCE_CHUNKSTEPS = NCCL_STEPS/2``) -> 2 MiB chunks; payload 100 %.
- ``ll128``: 128-byte lines carrying 120 bytes of data and an 8-byte flag -> 120/128;
  we use 512 KiB chunks (NCCL's LL128 slot is ~600 KB of lines).
- ``ll``: 8-byte lines of 4 data bytes + 4 flag bytes -> 50 % payload; one 64 KiB slot
  of lines carries 32 KiB of data, our chunk.

These are our modelling constants, not NCCL's exact tuning (which also varies by version).
``auto`` picks by the bytes each rank moves per channel: below 64 KiB LL (latency-bound),
below 1 MiB LL128, else Simple.
"""
from __future__ import annotations

from dataclasses import dataclass

from workload_gen.errors import ConfigError
from workload_gen.units import KiB, MiB


@dataclass(frozen=True, slots=True)
class Protocol:
    name: str
    chunk_bytes: int
    efficiency: float
    """Fraction of the link bandwidth that carries payload."""


PROTOCOLS: dict[str, Protocol] = {
    "simple": Protocol("simple", 2 * MiB, 1.0),
    "ll128": Protocol("ll128", 512 * KiB, 120 / 128),
    "ll": Protocol("ll", 32 * KiB, 0.5),
}


def get_protocol(name: str) -> Protocol:
    key = name.lower()
    if key not in PROTOCOLS:
        raise ConfigError("protocol", name, f"valid: auto, {', '.join(PROTOCOLS)}")
    return PROTOCOLS[key]


def auto_protocol(bytes_per_rank_per_channel: float) -> Protocol:
    if bytes_per_rank_per_channel < 64 * KiB:
        return PROTOCOLS["ll"]
    if bytes_per_rank_per_channel < 1 * MiB:
        return PROTOCOLS["ll128"]
    return PROTOCOLS["simple"]
