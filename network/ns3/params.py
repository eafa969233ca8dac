"""Transport and switch parameters of the packet-level backend, next to SimAI.conf's names.

DCQCN defaults are NVIDIA ConnectX's (the DCQCN of production RoCE fabrics); ECN
thresholds follow SimAI's shipped ``astra-sim-alibabacloud/inputs/config/SimAI.conf``
(CC_MODE 1); docs/ns3.md tabulates both. Units: seconds, bits/s for
rates (as SimAI.conf writes ``50Mb/s``), bytes for sizes; SimAI.conf's KMIN/KMAX maps are
in KB (x1000 bytes) and its timers in microseconds, converted here.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from workload_gen.core.errors import ConfigError

TRANSPORTS = ("rdma", "dctcp")
CONGESTION_CONTROLS = ("dcqcn", "hpcc")  # index = the C++ kCcDcqcn / kCcHpcc (tsim_common.h)

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


def ecn_thresholds(link_bps: float, ecn_map: str = "simai") -> tuple[float, float, float]:
    """(Kmin bytes, Kmax bytes, Pmax) for a link.

    ``simai`` (default): SimAI.conf's entry for the largest listed speed not above the
    link's (the slowest entry for slower links). ``scaled``: the HPCC artifact's rule (alibaba-edu/High-Precision-Congestion-
    Control, simulation/run.py, used for its DCQCN runs): Kmin 100 KB and Kmax 400 KB per
    25 Gb/s of link, Pmax 0.2 (1.6/6.4 MB at 400 Gb/s), so the queue DCQCN oscillates in
    drains in the same time at every speed."""
    if ecn_map == "scaled":
        return 100e3 * link_bps / 25e9, 400e3 * link_bps / 25e9, 0.2
    chosen = _ECN_MAP[0]
    for row in _ECN_MAP:
        if row[0] <= link_bps * 1.0001:
            chosen = row
    return chosen[1], chosen[2], chosen[3]


DEEP_INCAST_DCQCN: dict[str, float | int | str] = dict(
    rate_ai_bps=400e6, rate_hai_bps=4e9, rp_timer_s=20e-6, alpha_interval_s=20e-6, fast_recovery_times=1,
    byte_counter_bytes=1_000_000, cnp_interval_s=4e-6, rate_decrease_interval_s=4e-6, ecn_map="scaled")
"""DCQCN that holds deep incasts at 400 Gb/s by ECN alone, for :meth:`TransportParams.deep_incast`.
Each value and why (DCQCN paper: Zhu et al., SIGCOMM 2015, tuned for 40 Gb/s):

- AI 400 Mb/s, HAI 4 Gb/s: the paper's 40 Mb/s AI scaled x10 to 400 Gb/s NICs, HAI = 10 x AI
  (the HPCC artifact likewise scales DCQCN's rates with link speed);
- increase timer T = 20 us and alpha period K = 20 us: the paper sets K = T (55 us at
  40 Gb/s); at 400 Gb/s the queue left after a cut drains in 16-64 us, so recovery must start
  within tens of microseconds;
- byte counter B = 1 MB = line rate x T: a byte-counter stage takes as long as a timer
  stage at line rate (the paper's 10 MB is 2 ms of a 40 Gb/s link; ConnectX's 32 KB is one
  stage every 0.7 us at 400 Gb/s, which undoes each cut);
- CNP and rate-decrease periods 4 us: ConnectX's min_time_between_cnps and
  rate_reduce_monitor_period; F = 1: ConnectX's rpg_threshold;
- ECN thresholds scaled with the link (``ecn_map="scaled"``: Kmin/Kmax 1.6/6.4 MB at 400 Gb/s,
  the HPCC artifact's DCQCN setting), so the queue between the thresholds covers the rate
  dip after a cut.

Measured (tests/ns3/test_cc_incast.py, 32 MB per sender into one 400 Gb/s port): 99.8%,
97.1% and 94.7% of the link busy for 2, 8 and 16 senders, no PAUSE, nothing dropped. It
cuts within microseconds, so it also throttles short transfers (docs/ns3.md gives the
figures); that is why it is not the default."""

CONNECTX_DCQCN: dict[str, float | int] = dict(
    rate_ai_bps=5e6, rate_hai_bps=50e6, min_rate_bps=1e6, ewma_gain=5 / 1024, alpha_interval_s=1e-6,
    rate_decrease_interval_s=4e-6, rp_timer_s=300e-6, fast_recovery_times=1, byte_counter_bytes=32767,
    cnp_interval_s=4e-6)
"""NVIDIA ConnectX defaults (rpg_ai_rate, rpg_hai_rate, rpg_min_rate, dce_tcp_g, dce_tcp_rtt,
rate_reduce_monitor_period, rpg_time_reset, rpg_threshold, rpg_byte_reset,
min_time_between_cnps), for :meth:`TransportParams.connectx`."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TransportParams:
    """What the hosts and switches do with packets (see docs/ns3.md for the models)."""

    transport: Literal["rdma", "dctcp"] = "rdma"
    """``rdma``: our paced-UDP NIC with DCQCN (RoCEv2-like, lossless); ``dctcp``: ns-3's
    TCP DCTCP with ECN."""
    mtu: int = 9000
    """IP MTU in bytes (SimAI.conf PACKET_PAYLOAD_SIZE 9000). Packet count drives cost."""
    # DCQCN. Each knob names its NVIDIA ConnectX setting (MLNX_OFED roce_rp/roce_np) and
    # gives ConnectX's and SimAI.conf's defaults. The defaults keep links busy but barely
    # act on a deep incast: the 32 KB byte counter is a fast-recovery step every 0.7 us at
    # 400 Gb/s, which undoes each cut, so PFC holds such incasts. DEEP_INCAST_DCQCN
    # (:meth:`deep_incast`) is the set that holds 8- and 16-to-1 incasts by ECN alone, and
    # CONNECTX_DCQCN (:meth:`connectx`) ConnectX's own; docs/ns3.md compares the three.
    rate_ai_bps: float = 50e6
    """rpg_ai_rate: additive increase step of the target rate (ConnectX: 5 Mb/s; SimAI.conf
    RATE_AI 50 Mb/s, used here)."""
    rate_hai_bps: float = 500e6
    """rpg_hai_rate: hyper-increase step (ConnectX: 50 Mb/s; SimAI.conf RATE_HAI 100 Mb/s; here
    10 x AI as in the DCQCN paper)."""
    min_rate_bps: float = 100e6
    """rpg_min_rate: DCQCN never cuts below it (ConnectX: 1 Mb/s; SimAI.conf 100 Mb/s, used here)."""
    ewma_gain: float = 1 / 256
    """dce_tcp_g: alpha <- (1-g) alpha + g per alpha period with a CNP, (1-g) alpha without
    (ConnectX: 1019 in 10-bit fixed point, 1 - g = 1019/1024; SimAI.conf 1/256, used here)."""
    alpha_interval_s: float = 55e-6
    """dce_tcp_rtt: the alpha update period (ConnectX and SimAI.conf: 1 us; here the DCQCN
    paper's 55 us: 1 us costs an event per flow per microsecond)."""
    rate_decrease_interval_s: float = 4e-6
    """rate_reduce_monitor_period: at most one cut per period (ConnectX and SimAI.conf: 4 us)."""
    rp_timer_s: float = 55e-6
    """rpg_time_reset: period of the rate-increase timer (ConnectX: 300 us; SimAI.conf RP_TIMER
    900 us; here the DCQCN paper's 55 us)."""
    fast_recovery_times: int = 5
    """rpg_threshold: stages of fast recovery, Rc <- (Rt+Rc)/2 (ConnectX: 1; SimAI.conf
    FAST_RECOVERY_TIMES 1; here the DCQCN paper's F = 5)."""
    byte_counter_bytes: int = 32768
    """rpg_byte_reset: bytes sent per byte-counter stage (ConnectX: 32767)."""
    cnp_interval_s: float = 50e-6
    """min_time_between_cnps (notification point): at most one CNP per flow per interval
    (ConnectX: 4 us; here the classic 50 us)."""
    ecn: dict[float, tuple[float, float, float]] = field(default_factory=dict, hash=False)
    """Overrides of (Kmin bytes, Kmax bytes, Pmax) per link speed in bits/s; other speeds
    use SimAI.conf's KMIN_MAP/KMAX_MAP/PMAX_MAP (see :func:`ecn_thresholds`)."""
    ecn_map: Literal["simai", "scaled"] = "simai"
    """Default ECN thresholds per link speed (see :func:`ecn_thresholds`): ``simai``
    (SimAI.conf's KMIN_MAP/KMAX_MAP/PMAX_MAP: 800 KB/3.2 MB/0.2 at 400 Gb/s) or ``scaled``
    (Kmin/Kmax proportional to the link rate, the HPCC artifact's DCQCN setting: 1.6/6.4 MB
    at 400 Gb/s; :data:`DEEP_INCAST_DCQCN` uses it: with SimAI's thresholds instead, that set
    keeps 98.6%/88.9%/88.1% of the link busy for 2/8/16 senders of 32 MB, against
    99.8%/97.1%/94.7%)."""
    ecn_marking: bool = True
    """Switches mark CE at egress (off: DCQCN never hears of congestion; PFC alone holds)."""
    pfc: bool = True
    """Lossless class with PFC (RDMA only): ingress ports pause the upstream device hop by
    hop instead of dropping. Off: the shared buffer tail-drops (and the RDMA model, which
    has no retransmission, would leave a flow unfinished)."""
    switch_buffer_bytes: int = 32_000_000
    """Shared packet buffer per switch (32 MB: a 12.8 Tb/s Tomahawk-3 or Spectrum-2 class
    switch holds 32-64 MB)."""
    buffer_alpha: float = 8.0
    """Dynamic-threshold alpha: an ingress port may hold alpha x (free shared buffer) before
    it sends PFC XOFF (8: one port may take 8/9 of the buffer, two 8/17 each. With 1/8, a
    2-flow incast, whose DCQCN queue peaks at 6.5 MB, drew PFC pauses and lost 29% of the
    link)."""
    xon_offset_bytes: int = 2 * 9030
    """XON goes upstream once the port is this far below its XOFF threshold (two MTUs)."""
    headroom_extra_bytes: int = 0
    """Added to each port's computed PFC headroom (2 x propagation x rate + 64 B + four
    packets)."""
    tcp_buffer_bytes: int = 4 << 20
    """DCTCP socket send/receive buffers (larger ones destabilised ns-3's TCP)."""
    cc: Literal["dcqcn", "hpcc"] = "dcqcn"
    """RDMA congestion control: ``dcqcn`` (ECN marks -> CNPs -> rate cuts) or ``hpcc``
    (in-band telemetry on every data packet, returned on per-packet ACKs; Li et al.,
    SIGCOMM 2019)."""
    ecn_at_dequeue: bool = True
    """Switches CE-mark data packets as they leave the egress queue (as SimAI's and HPCC's
    ns-3 switches do); False marks them as they join it, so the mark waits behind the
    whole queue before it reaches the receiver."""
    clamp_target_rate: bool = False
    """DCQCN: every cut sets the target rate to the current rate (clamp_tgt_rate; the DCQCN
    paper). False: only the first cut and cuts after a timer increase do (ConnectX's
    default clamp_tgt_rate_after_time_inc), so back-to-back cuts recover to the rate before
    the congestion."""
    hpcc_eta: float = 0.95
    """HPCC target utilisation eta (paper: 95%)."""
    hpcc_max_stage: int = 5
    """HPCC maxStage: additive-increase steps before the window is recomputed
    multiplicatively even below eta (paper: 5)."""
    hpcc_ai_fraction: float = 4e-4
    """HPCC W_AI as a fraction of the line rate times the base RTT: the HPCC artifact's
    RATE_AI of 10 Mb/s per 25 Gb/s of NIC (160 Mb/s at 400 Gb/s)."""
    hpcc_int_bytes: int = 42
    """Bytes of each HPCC data packet taken by the INT header (2 + 8 per hop for 5 hops,
    the paper's figure), so payload per packet is MTU - 28 - 42."""
    retransmit_timeout_s: float = 4e-3
    """Reliable mode (HPCC, lossy links): go back to the last ACKed byte after this long
    without an ACK (recovers a lost last packet; RoCE's local ACK timeout, 4.096 us x 2^10)."""
    nack_interval_s: float = 100e-6
    """Reliable mode: a receiver NACKs the same missing byte at most once per interval."""

    def __post_init__(self) -> None:
        if self.transport not in TRANSPORTS:
            raise ConfigError("transport", self.transport, f"valid: {', '.join(TRANSPORTS)}")
        if not 576 <= self.mtu <= 65000:
            raise ConfigError("mtu", self.mtu, "an IP MTU in bytes between 576 and 65000 (9000 = jumbo frames)")
        for name in ("rate_ai_bps", "rate_hai_bps", "min_rate_bps", "alpha_interval_s",
                     "rate_decrease_interval_s", "rp_timer_s", "cnp_interval_s"):
            if getattr(self, name) <= 0:
                raise ConfigError(name, getattr(self, name), "must be > 0")
        if not 0 < self.buffer_alpha <= 64:
            raise ConfigError("buffer_alpha", self.buffer_alpha, "must be in (0, 64]")
        if self.switch_buffer_bytes < 4 * self.mtu:
            raise ConfigError("switch_buffer_bytes", self.switch_buffer_bytes, "must hold at least 4 MTUs")
        if not 0 < self.ewma_gain <= 1:
            raise ConfigError("ewma_gain", self.ewma_gain, "must be in (0, 1]")
        if self.ecn_map not in ("scaled", "simai"):
            raise ConfigError("ecn_map", self.ecn_map, "valid: scaled, simai")
        if self.cc not in CONGESTION_CONTROLS:
            raise ConfigError("cc", self.cc, f"valid: {', '.join(CONGESTION_CONTROLS)}")
        if self.cc == "hpcc" and self.transport != "rdma":
            raise ConfigError("cc", self.cc, "HPCC runs on the rdma transport only")
        if not 0 < self.hpcc_eta <= 1:
            raise ConfigError("hpcc_eta", self.hpcc_eta, "must be in (0, 1]")
        if self.hpcc_max_stage < 0:
            raise ConfigError("hpcc_max_stage", self.hpcc_max_stage, "must be >= 0")
        if not 0 < self.hpcc_ai_fraction < 1:
            raise ConfigError("hpcc_ai_fraction", self.hpcc_ai_fraction, "must be in (0, 1)")
        if not 0 <= self.hpcc_int_bytes <= self.mtu - 28 - 64:
            raise ConfigError("hpcc_int_bytes", self.hpcc_int_bytes, "must leave a payload of at least 64 bytes")
        if self.fast_recovery_times < 0:
            raise ConfigError("fast_recovery_times", self.fast_recovery_times, "must be >= 0")
        if self.byte_counter_bytes < 1:
            raise ConfigError("byte_counter_bytes", self.byte_counter_bytes, "must be >= 1")
        for name in ("retransmit_timeout_s", "nack_interval_s"):
            if not getattr(self, name) > 0:
                raise ConfigError(name, getattr(self, name), "must be > 0")

    def configure_cc(self, P, *, lossy: bool = False) -> None:
        """Copies the congestion-control and reliability settings into the C++ Params.

        ``lossy``: some link has a non-zero error rate, so the RDMA model runs reliably
        (per-packet ACKs, NACKs, go-back-N), as it always does under HPCC."""
        P.cc = CONGESTION_CONTROLS.index(self.cc)
        P.ecnAtDequeue = bool(self.ecn_at_dequeue)
        P.clampTargetRate = bool(self.clamp_target_rate)
        P.reliable = bool(self.transport == "rdma" and (self.cc == "hpcc" or lossy))
        P.hpccEta = float(self.hpcc_eta)
        P.hpccMaxStage = int(self.hpcc_max_stage)
        P.hpccRateAiFraction = float(self.hpcc_ai_fraction)
        P.hpccIntBytes = int(self.hpcc_int_bytes)
        P.rto = float(self.retransmit_timeout_s)
        P.nackInterval = float(self.nack_interval_s)

    @classmethod
    def deep_incast(cls, **overrides) -> TransportParams:
        """DCQCN tuned to hold deep incasts by ECN alone (see DEEP_INCAST_DCQCN)."""
        return cls(**{**DEEP_INCAST_DCQCN, **overrides})

    @classmethod
    def connectx(cls, **overrides) -> TransportParams:
        """NVIDIA ConnectX's DCQCN defaults (see CONNECTX_DCQCN)."""
        return cls(**{**CONNECTX_DCQCN, **overrides})

    def thresholds(self, link_bps: float) -> tuple[float, float, float]:
        return self.ecn.get(link_bps) or ecn_thresholds(link_bps, self.ecn_map)

    @property
    def udp_payload(self) -> int:
        """Payload bytes of one RDMA data packet (MTU minus IPv4 20 and UDP 8, and under
        HPCC minus the INT header's bytes)."""
        return self.mtu - 28 - (self.hpcc_int_bytes if self.cc == "hpcc" else 0)

    @property
    def tcp_payload(self) -> int:
        """TCP segment payload: MTU minus IPv4 20, TCP 20 and the 12-byte timestamp option."""
        return self.mtu - 52
