"""NCCL protocols as the expander models them: which one, its chunk, its payload efficiency.

NCCL moves data through a FIFO of ``NCCL_STEPS = 8`` slots per channel and peer; a rank
posts data in *chunks* of one or more slots. A flow of the expander carries one chunk.
Facts (NVIDIA/nccl master, src/; tuning.cc, enqueue.cc ``calcCollChunking``,
init.cc buffer sizes, transport/nvls.cc, include/collectives.h):

- ``simple``: a 4 MiB buffer (init.cc DEFAULT_BUFFSIZE) / 8 slots = 512 KiB per step. The
  ring takes ``ALLREDUCE_CHUNKSTEPS = NCCL_STEPS/2`` = 4 steps per chunk -> 2 MiB; every
  other algorithm takes one step (``chunkSteps = ... RING ? info->chunkSteps : 1``) -> the
  tree's chunk is 512 KiB. Payload 100 %.
- ``ll128``: 128-byte lines carrying 120 bytes of data and an 8-byte flag -> 120/128; one
  step of lines carries ~563 KB of data, we use 512 KiB.
- ``ll``: 8-byte lines of 4 data bytes + 4 flag bytes -> 50 % payload; one 64 KiB step of
  lines carries 32 KiB of data.
- NVLS and NVLS-tree run the Simple protocol only (tuning.cc: ``if ((a == NCCL_ALGO_NVLS
  || a == NCCL_ALGO_NVLS_TREE) && p != NCCL_PROTO_SIMPLE) continue;``) on
  ``nvlsChannels`` = 16 channels on Hopper (NVLS_NCHANNELS_SM90), whatever the size, each
  channel split over the node's ``nHeads`` heads (one per NIC across nodes). Their chunk is
  ``NCCL_NVLS_CHUNKSIZE`` = 128 KiB, capped at ``nvlsTreeMaxChunkSize`` = 64 KiB for
  NVLS-tree on >= 4 nodes, and halved for small buffers by ``concurrentOps = nChannels x
  nHeads`` rules (see :func:`nvls_chunk`).

How the protocol is chosen (``protocol="auto"``): NCCL picks (algorithm, protocol) by the
least predicted time of the *whole* buffer (enqueue.cc ``topoGetAlgoInfo`` over
tuning.cc's latency/bandwidth tables), not by a per-rank slice. The expander chooses the
algorithm first (collectives.auto), then the protocol for that algorithm:

- nvls, nvls_tree: Simple (the only one NCCL has);
- ring, tree, the broadcast/reduce chain: NCCL's own model, :func:`nccl_protocol_time`,
  with tuning.cc's caps for the system's GPU row (Volta, Ampere, Hopper, Blackwell by
  compute capability; LL across nodes by the host CPU) and the system's bus bandwidths
  (:class:`NcclTuning`; the h100 preset without a system);
- send/recv and all-to-all (NCCL's p2p path): LL when a peer's bytes are at most
  ``channels x NCCL_P2P_LL_THRESHOLD`` (16 KiB), else Simple (enqueue.cc);
- halving-doubling (not an NCCL algorithm): by the bytes per rank per channel, below
  64 KiB LL, below 1 MiB LL128, else Simple.

``expand`` calls :func:`auto_protocol` with the bytes per rank and channel only; the
protocol it returns is provisional (``auto=True``). Before any builder runs, the expander
settles it from the whole collective (CollectivePlan.settled_protocol -> :func:`resolve` ->
:func:`settle`), and expand-collective's flow bound reads the same answer.
"""
from __future__ import annotations

from dataclasses import replace

from workload_gen.core.errors import ConfigError
from workload_gen.core.gpu_specs import get_gpu
from workload_gen.core.record import record
from workload_gen.core.system import SYSTEMS, SystemConfig
from workload_gen.core.units import KiB, MiB


@record
class Protocol:
    name: str
    chunk_bytes: int
    efficiency: float
    """Fraction of the link bandwidth that carries payload."""
    auto: bool = False
    """Chosen by ``protocol="auto"`` and still to be settled by the algorithm (:func:`settle`)."""


PROTOCOLS: dict[str, Protocol] = {
    "simple": Protocol("simple", 2 * MiB, 1.0),
    "ll128": Protocol("ll128", 512 * KiB, 120 / 128),
    "ll": Protocol("ll", 32 * KiB, 0.5),
}

SIMPLE_STEP_BYTES = 512 * KiB
"""NCCL's Simple step: 4 MiB buffer / NCCL_STEPS; the chunk of every non-ring algorithm."""
NVLS_CHANNELS = 16
"""NCCL's NVLS channel count on Hopper (transport/nvls.cc NVLS_NCHANNELS_SM90)."""
NVLS_CHUNK_BYTES = 128 * KiB
"""NCCL_NVLS_CHUNKSIZE's default."""
NVLS_TREE_MAX_CHUNK_BYTES = 64 * KiB
"""nvlsTreeMaxChunkSize when the communicator spans >= 4 nodes (transport/nvls.cc)."""
P2P_LL_THRESHOLD = 16 * KiB
"""NCCL_P2P_LL_THRESHOLD: a send/recv uses LL up to this many bytes per channel."""


def get_protocol(name: str) -> Protocol:
    key = name.lower()
    if key not in PROTOCOLS:
        raise ConfigError("protocol", name, f"valid: auto, {', '.join(PROTOCOLS)}")
    return PROTOCOLS[key]


def _per_rank_rule(bytes_per_rank_per_channel: float) -> Protocol:
    if bytes_per_rank_per_channel < 64 * KiB:
        return PROTOCOLS["ll"]
    if bytes_per_rank_per_channel < 1 * MiB:
        return PROTOCOLS["ll128"]
    return PROTOCOLS["simple"]


def auto_protocol(bytes_per_rank_per_channel: float) -> Protocol:
    """Provisional ``auto`` choice from the bytes per rank and channel; the algorithm settles
    it (:func:`settle`)."""
    return replace(_per_rank_rule(bytes_per_rank_per_channel), auto=True)


# --- NCCL's tuning model (tuning.cc ncclTopoTuneModel) -------------------------------------
# Latencies in microseconds, bandwidths in GB/s, index by protocol.
_PROTOS = ("ll", "ll128", "simple")
_BASE_LAT = {"tree": (6.8, 14.0, 8.4), "ring": (6.6, 14.0, 8.4)}
_HW_LAT_NVLINK = {"tree": (0.6, 1.25, 4.0), "ring": (0.6, 1.9, 3.4)}
_HW_LAT_NET = {"tree": (5.0, 8.5, 14.0), "ring": (2.7, 4.0, 14.0)}
_NET_OVERHEAD_US = 1.0                   # getNetOverhead on Intel x86; x3 for Simple

ARCHES = ("volta", "ampere", "hopper", "blackwell")
"""NCCL's compute-capability rows (tuning.cc: >= 10.0 Blackwell, >= 9.0 Hopper, >= 8.0
Ampere, else Volta)."""
# Per-row caps, GB/s, by scale: one node, two nodes, more (tuning.cc llMaxBws,
# perChMaxRingLL128Bws, perChMaxTreeBws, perChMaxTreeLL128Bws; NVIDIA/nccl
# src/graph/tuning.cc, the four-row tables of NCCL 2.25 and later).
_LL_MAX_BW = ((39.0, 39.0, 20.4), (87.7, 22.5, 19.0), (141.0, 45.0, 35.0), (282.0, 90.0, 70.0))
_PER_CH_RING_LL128 = ((20.0, 20.0, 20.0), (20.0, 20.0, 20.0), (36.7, 36.7, 36.7), (40.0, 40.0, 40.0))
_PER_CH_TREE = ((26.5, 18.5, 10.0), (24.0, 23.6, 17.8), (38.7, 41.4, 36.0), (70.0, 42.8, 24.0))
_PER_CH_TREE_LL128 = ((20.0, 20.0, 20.0), (20.0, 20.0, 20.0), (36.7, 36.7, 29.0), (55.6, 31.67, 20.0))


def arch_of(compute_capability: tuple[int, int]) -> str:
    """NCCL's row for a GPU's compute capability (tuning.cc ``compCapIndex``)."""
    cc = compute_capability[0] * 10 + compute_capability[1]
    return "blackwell" if cc >= 100 else "hopper" if cc >= 90 else "ampere" if cc >= 80 else "volta"


@record
class NcclTuning:
    """What NCCL's protocol model knows of the machine: the GPUs' architecture row, the bus
    bandwidths it divides by, and the host CPU's vendor (across nodes NCCL caps LL by the
    CPU, not the GPU: row Volta for Intel and other x86, row Ampere for AMD; tuning.cc
    ``index1``). Without a system, the h100 preset's (:data:`DEFAULT_TUNING`)."""

    arch: str
    """A row of :data:`ARCHES` (:func:`arch_of` the GPU's compute capability)."""
    nvlink_busbw: float
    """bytes/s: NVLink bus bandwidth inside a node."""
    nic_busbw: float
    """bytes/s: achievable bandwidth of one NIC (rail)."""
    cpu_vendor: str = "intel"
    """The hosts' CPU vendor: ``amd`` takes NCCL's AMD row for LL across nodes; any other
    value its Intel/other row (DGX H100 and B200 have Intel hosts)."""

    @classmethod
    def for_system(cls, system: SystemConfig) -> NcclTuning:
        """The system's GPU row (its compute capability) and bus bandwidths; Intel hosts."""
        return cls(arch_of(get_gpu(system.gpu).compute_capability), system.nvlink_busbw, system.nic_busbw)

    def caps(self, nodes: int) -> tuple[float, float, float, float]:
        """(llMaxBw, perChMaxRingLL128Bw, perChMaxTreeBw, perChMaxTreeLL128Bw) in GB/s for a
        communicator over ``nodes`` nodes."""
        row = ARCHES.index(self.arch)
        scale = 0 if nodes <= 1 else 1 if nodes == 2 else 2
        ll_row = row if nodes <= 1 else (1 if self.cpu_vendor == "amd" else 0)
        return (_LL_MAX_BW[ll_row][scale], _PER_CH_RING_LL128[row][scale], _PER_CH_TREE[row][scale],
                _PER_CH_TREE_LL128[row][scale])


DEFAULT_TUNING = NcclTuning.for_system(SYSTEMS["h100"])
"""The model's machine when the expander is given no system: the h100 preset."""


def _log2i(x: int) -> int:
    return max(int(x), 1).bit_length() - 1


def nccl_protocol_time(algorithm: str, op: str, nbytes: float, n: int, nodes: int, per_node: int,
                       busbw: float, protocol: str, channels: int = 1,
                       tuning: NcclTuning = DEFAULT_TUNING) -> float:
    """NCCL's predicted time (s) of one collective by ring or tree with ``protocol``.

    ``busbw`` (bytes/s) is the collective's large-message bus bandwidth (the analytical
    backend's path busbw); NCCL's refinements: LL runs at half of it capped at llMaxBw, LL128
    at 92% (ring) or 120/128 (tree; 7/9 in one node), the tree's all-reduce at 92%, each
    capped per channel (the GPU row's perChMax tables, times our ``channels``; ``tuning``);
    the algorithm
    bandwidth is busbw x n/nsteps for the ring and busbw/2 for the tree. Latency: base + per
    step hardware latency (NVLink inside a node, the network across nodes, at least the
    network post overhead per intra-node step of a multi-node ring).
    """
    a = "tree" if algorithm == "tree" else "ring"
    p = _PROTOS.index(protocol)
    bw = busbw / 1e9
    ll_max, ring_ll128, tree_simple, tree_ll128 = tuning.caps(nodes)
    ch = max(1, channels)
    if a == "ring":
        if protocol == "ll":
            bw = min(ll_max, bw * 0.5)
        elif protocol == "ll128":
            bw = min(bw * 0.92, ch * ring_ll128)
    else:
        if op == "allreduce":
            bw = min(bw * 0.92, ch * tree_simple)
        if protocol == "ll":
            bw = min(bw / 3.8, ll_max)
        elif protocol == "ll128":
            bw = min(bw * (7.0 / 9.0 if nodes <= 1 else 120.0 / 128.0), ch * tree_ll128)
    nsteps = 2 * (n - 1) if op == "allreduce" else (n - 1 if op in ("allgather", "reducescatter") else n)
    algbw = bw * (n / nsteps if a == "ring" else 0.5)
    lat = _BASE_LAT[a][p]
    intra = _HW_LAT_NVLINK[a][p]
    inter = _HW_LAT_NET["tree" if per_node == 1 else a][p]
    if a == "ring":
        if nodes > 1:
            intra = max(intra, _NET_OVERHEAD_US * (3 if protocol == "simple" else 1))
        hw = intra if nodes <= 1 else inter
        if op in ("broadcast", "reduce"):
            lat += nsteps * hw
        else:
            n_inter = 0 if nodes <= 1 else (2 * (nodes - 1) if op == "allreduce" else nodes - 1)
            lat += (nsteps - n_inter) * intra + n_inter * inter
    elif op == "allreduce":
        lat += 2 * ((per_node - 1) * intra + _log2i(nodes) * inter)
    return lat * 1e-6 + nbytes / (algbw * 1e9)


def nccl_protocol(algorithm: str, op: str, nbytes: float, n: int, nodes: int, per_node: int,
                  busbw: float, channels: int = 1, tuning: NcclTuning = DEFAULT_TUNING) -> Protocol:
    """The protocol NCCL's model predicts fastest for the whole buffer (ring, tree, chain)."""
    best = min(_PROTOS, key=lambda p: (nccl_protocol_time(algorithm, op, nbytes, n, nodes, per_node, busbw, p,
                                                          channels, tuning), -_PROTOS.index(p)))
    return PROTOCOLS[best]


def nvls_chunk(nbytes: float, heads: int, nodes: int, channels: int = NVLS_CHANNELS) -> int:
    """NCCL's NVLS / NVLS-tree chunk (bytes) for a buffer of ``nbytes`` (enqueue.cc
    calcCollChunking), with ``concurrentOps = channels x heads``."""
    ops = max(1, channels) * max(1, heads)
    if nodes <= 1:
        c = min(SIMPLE_STEP_BYTES, NVLS_CHUNK_BYTES)
        if nbytes < 64 * ops * c and c > 64 * KiB:
            c = 64 * KiB
        if nbytes < 8 * ops * c and c > 32 * KiB:
            c = 32 * KiB
        if nbytes < 2 * ops * c and c > 16 * KiB:
            c = 16 * KiB
        return c
    c = min(NVLS_CHUNK_BYTES, NVLS_TREE_MAX_CHUNK_BYTES if nodes >= 4 else NVLS_CHUNK_BYTES)
    for factor, cap in ((32, 256 * KiB), (16, 128 * KiB), (4, 64 * KiB), (1, 32 * KiB)):
        if nbytes < factor * ops * c and c > cap:
            c = cap
    return c


def nvls_pipeline(nbytes: int, channels: int, heads: int, nodes: int) -> tuple[int, int]:
    """(chunks per channel K, bytes per flow) of an NVLS or NVLS-tree all-reduce.

    NCCL runs ``NVLS_CHANNELS`` channels, each cut over ``heads`` heads, and every (channel,
    head) lane pipelines its share in chunks of :func:`nvls_chunk`: ``K = nbytes /
    (NVLS_CHANNELS x heads x chunk)`` chunks per lane. Our channel stands for
    ``NVLS_CHANNELS x heads / channels`` of NCCL's lanes, which move their chunks in lock
    step, so one of our flows carries that many NCCL chunks and the pipeline keeps NCCL's
    depth K (what sets its fill and drain). With more channels than NCCL's lanes a flow
    still carries at least one NCCL chunk per head.
    """
    chunk = nvls_chunk(nbytes, heads, nodes)
    lanes = NVLS_CHANNELS * max(1, heads)
    flow = max(chunk * max(1, heads), chunk * lanes // max(1, channels))
    per_channel = -(-int(nbytes) // max(1, channels))
    return max(1, -(-per_channel // flow)), flow


def ring_busbw(nodes: int, per_node: int, nvlink_busbw: float, net_busbw: float) -> float:
    """Large-message bus bandwidth (bytes/s) of a ring over ``nodes`` nodes with up to
    ``per_node`` of its ranks in each: the one home of the rule, which the expander's
    protocol choice (:func:`model_busbw`) and the analytical backend (network.busbw) both
    apply. In one node the ring runs on NVLink. Across nodes each ring crosses every node
    boundary once, so a node's egress equals one rank's bus traffic, carried by the
    ``net_busbw`` of the rails the group owns there; with several ranks per node the hops
    inside the node ride NVLink too, so the slower of the two bounds it."""
    if nodes <= 1:
        return nvlink_busbw
    return min(nvlink_busbw, net_busbw) if per_node > 1 else net_busbw


def model_busbw(nodes: int, per_node: int, rails: int, tuning: NcclTuning = DEFAULT_TUNING) -> float:
    """Bus bandwidth (bytes/s) NCCL's model sees: :func:`ring_busbw` on the tuning's NVLink
    and the group's rails (at least one) of NIC bandwidth."""
    return ring_busbw(nodes, per_node, tuning.nvlink_busbw, max(1, rails) * tuning.nic_busbw)


def settle(protocol: Protocol, algorithm: str, op: str, nbytes: int, n: int, nodes: int, per_node: int,
           channels: int, rails: int = 1, tuning: NcclTuning = DEFAULT_TUNING) -> Protocol:
    """The final protocol of a collective: ``protocol`` itself unless it is a provisional
    ``auto`` choice, which is replaced by NCCL's rule for ``algorithm`` (module docstring).
    ``rails``: NICs the group uses per node (the bus bandwidth of NCCL's model); ``tuning``:
    the machine NCCL's model sees (the system's GPU row and bandwidths)."""
    if not protocol.auto:
        return protocol
    if algorithm in ("nvls", "nvls_tree"):
        return PROTOCOLS["simple"]
    if algorithm in ("ring", "tree", "chain"):
        return nccl_protocol(algorithm, op, nbytes, n, nodes, per_node, model_busbw(nodes, per_node, rails, tuning),
                             channels, tuning)
    if algorithm in ("p2p", "alltoall", "pairwise"):
        per_peer = nbytes if algorithm == "p2p" else nbytes / max(n, 1)
        return PROTOCOLS["ll" if per_peer <= channels * P2P_LL_THRESHOLD else "simple"]
    return replace(protocol, auto=False)


def resolve(protocol: Protocol, algorithm: str, op: str, nbytes: int, n: int, nodes: int, per_node: int,
            channels: int, rails: int = 1, tuning: NcclTuning = DEFAULT_TUNING) -> Protocol:
    """The protocol a collective's flows use, with the chunk one flow carries: :func:`settle`,
    then NCCL's chunk for the algorithm where it is not the protocol's own: the tree's Simple
    chunk is one 512 KiB step; NVLS and NVLS-tree pipelines follow :func:`nvls_pipeline`
    (``heads``: the group's NICs per node across nodes, its GPUs in one node).
    ``expand`` and ``expand-collective``'s flow bound should both ask this."""
    p = settle(protocol, algorithm, op, nbytes, n, nodes, per_node, channels, rails, tuning)
    chunk = p.chunk_bytes
    if p.name == "simple" and algorithm == "tree":
        chunk = SIMPLE_STEP_BYTES
    elif p.name == "simple" and algorithm in ("nvls", "nvls_tree"):
        chunk = nvls_pipeline(nbytes, channels, rails if nodes > 1 else per_node, nodes)[1]
    return p if chunk == p.chunk_bytes else replace(p, chunk_bytes=int(chunk))


__all__ = [
    "ARCHES",
    "DEFAULT_TUNING",
    "NcclTuning",
    "PROTOCOLS",
    "Protocol",
    "arch_of",
    "auto_protocol",
    "get_protocol",
    "model_busbw",
    "nccl_protocol",
    "nccl_protocol_time",
    "nvls_chunk",
    "nvls_pipeline",
    "resolve",
    "ring_busbw",
    "settle",
]
