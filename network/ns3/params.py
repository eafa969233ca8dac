"""Transport and switch parameters of the packet-level backend, next to SimAI.conf's names.

Defaults follow SimAI's shipped ``astra-sim-alibabacloud/inputs/config/SimAI.conf`` (DCQCN,
CC_MODE 1) so that results line up with SimAI's ns-3 runs. Units: seconds, bits/s for
rates (as SimAI.conf writes ``50Mb/s``), bytes for sizes; SimAI.conf's KMIN/KMAX maps are
in KB (x1000 bytes) and its timers in microseconds, converted here.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from workload_gen.errors import ConfigError

TRANSPORTS = ("rdma", "dctcp")

# SimAI.conf: KMIN_MAP / KMAX_MAP (KB) and PMAX_MAP, keyed by link speed (bits/s).
_ECN_MAP: tuple[tuple[float, float, float, float], ...] = (
    # speed_bps, kmin_bytes, kmax_bytes, pmax
    (25e9, 100e3, 400e3, 0.2),
    (50e9, 200e3, 800e3, 0.2),
    (100e9, 400e3, 1600e3, 0.2),
    (200e9, 300e3, 1200e3, 0.8),
    (400e9, 800e3, 3200e3, 0.2),
    (1600e9, 600e3, 2400e3, 0.2),
)


def ecn_thresholds(link_bps: float) -> tuple[float, float, float]:
    """(Kmin bytes, Kmax bytes, Pmax) for a link: SimAI.conf's entry for the largest listed
    speed not above the link's (the slowest entry for slower links)."""
    chosen = _ECN_MAP[0]
    for row in _ECN_MAP:
        if row[0] <= link_bps * 1.0001:
            chosen = row
    return chosen[1], chosen[2], chosen[3]


@dataclass(frozen=True, slots=True, kw_only=True)
class TransportParams:
    """What the hosts and switches do with packets (see docs/ns3.md for the models)."""

    transport: Literal["rdma", "dctcp"] = "rdma"
    """``rdma``: our paced-UDP NIC with DCQCN (RoCEv2-like, lossless); ``dctcp``: ns-3's
    TCP DCTCP with ECN."""
    mtu: int = 9000
    """IP MTU in bytes (SimAI.conf PACKET_PAYLOAD_SIZE 9000). Packet count drives cost."""
    rate_ai_bps: float = 50e6
    """RATE_AI: additive increase step of the target rate (SimAI.conf: 50 Mb/s)."""
    rate_hai_bps: float = 500e6
    """RATE_HAI: hyper-increase step (SimAI.conf: 100 Mb/s; DCQCN paper: 10 x RATE_AI,
    used here so that 400 Gb/s links recover within about a millisecond)."""
    min_rate_bps: float = 100e6
    """SimAI.conf MIN_RATE: DCQCN never cuts below it."""
    ewma_gain: float = 1 / 256
    """SimAI.conf EWMA_GAIN (DCQCN's g): alpha <- (1-g) alpha + g on congestion."""
    alpha_interval_s: float = 55e-6
    """ALPHA_RESUME_INTERVAL: alpha decays by (1-g) per quiet interval (DCQCN paper and
    Mellanox: 55 us; SimAI.conf: 1 us, which costs one event per flow per microsecond)."""
    rate_decrease_interval_s: float = 4e-6
    """SimAI.conf RATE_DECREASE_INTERVAL (4 us): at most one cut per interval."""
    rp_timer_s: float = 55e-6
    """RP_TIMER: period of the rate-increase timer (DCQCN paper: 55 us; SimAI.conf: 900 us,
    which SimAI pairs with a byte counter this model lacks: timer-only recovery at 900 us
    left a 2-flow incast at 3% of line rate)."""
    fast_recovery_times: int = 5
    """FAST_RECOVERY_TIMES: timer stages of fast recovery, Rc <- (Rt+Rc)/2 (DCQCN paper's F
    = 5; SimAI.conf: 1)."""
    byte_counter_bytes: int = 32768
    """Bytes sent per byte-counter stage (DCQCN's B; Mellanox rpg_byte_reset 32767). Rate
    increases come from this counter and from the RP_TIMER, whichever fires."""
    cnp_interval_s: float = 50e-6
    """Receiver (notification point): at most one CNP per flow per interval (Mellanox NICs'
    classic 50 us; with 4 us a 2-flow incast at 400 Gb/s was cut to a few % of line rate)."""
    ecn: dict[float, tuple[float, float, float]] = field(default_factory=dict, hash=False)
    """Overrides of (Kmin bytes, Kmax bytes, Pmax) per link speed in bits/s; other speeds
    use SimAI.conf's KMIN_MAP/KMAX_MAP/PMAX_MAP (see :func:`ecn_thresholds`)."""
    switch_buffer_bytes: int = 1 << 34
    """Per-port queue limit: deep enough that no packet is ever dropped (a lossless fabric,
    what PFC gives RoCE). Drops would show in links.csv."""
    tcp_buffer_bytes: int = 4 << 20
    """DCTCP socket send/receive buffers (larger ones destabilised ns-3's TCP)."""

    def __post_init__(self) -> None:
        if self.transport not in TRANSPORTS:
            raise ConfigError("transport", self.transport, f"valid: {', '.join(TRANSPORTS)}")
        if not 576 <= self.mtu <= 65000:
            raise ConfigError("mtu", self.mtu, "an IP MTU in bytes between 576 and 65000 (9000 = jumbo frames)")
        for name in ("rate_ai_bps", "rate_hai_bps", "min_rate_bps", "alpha_interval_s",
                     "rate_decrease_interval_s", "rp_timer_s", "cnp_interval_s"):
            if getattr(self, name) <= 0:
                raise ConfigError(name, getattr(self, name), "must be > 0")
        if not 0 < self.ewma_gain <= 1:
            raise ConfigError("ewma_gain", self.ewma_gain, "must be in (0, 1]")

    def thresholds(self, link_bps: float) -> tuple[float, float, float]:
        return self.ecn.get(link_bps) or ecn_thresholds(link_bps)

    @property
    def udp_payload(self) -> int:
        """Payload bytes of one RDMA data packet (MTU minus IPv4 20 and UDP 8)."""
        return self.mtu - 28

    @property
    def tcp_payload(self) -> int:
        """TCP segment payload: MTU minus IPv4 20, TCP 20 and the 12-byte timestamp option."""
        return self.mtu - 52
