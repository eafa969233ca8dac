"""The system: GPUs, nodes, the intra-node fabric and the scale-out network.

Kept orthogonal to the model and the parallel layout (DESIGN.md). Presets are frozen
instances built through the same constructor as user YAML (``--system my.yaml``,
whose keys are these field names plus ``base:`` naming a preset to start from).

Units: bytes/s for bandwidth (per direction), seconds for latency.
"""
from __future__ import annotations

import math
from dataclasses import fields, replace
from pathlib import Path
from typing import Any, Literal

from workload_gen.core.errors import ConfigError
from workload_gen.core.gpu_specs import GpuSpec, get_gpu
from workload_gen.core.record import record
from workload_gen.core.units import GB, GBIT
from workload_gen.core.yaml_file import read_yaml_mapping

GBPS = GB  # GB/s (decimal), as vendor sheets quote NVLink

HOST_OP_S = {"x86": 13.48e-6, "grace": 37.08e-6}
"""CPU seconds of one eager PyTorch op with its kernel launch, by host CPU: the CPU time of one
``torch.nn.Linear`` forward (module call, autograd, one cuBLAS launch) measured on a DGX H100 host
(Intel Xeon Platinum 8480C) and on GB200 (NVIDIA Grace) in Transformer Engine issue 2053
(2025-08, BF16, hidden 2048, 8192 tokens). engine.host_launch counts ops in these units."""
GRACE_GPUS = ("gh200", "gb200", "gb300")
"""GPU names (prefixes) whose host CPU is NVIDIA Grace; every other GPU sits in an x86 DGX/HGX host."""


def host_cpu(gpu: str) -> str:
    """"grace" for Grace-hosted GPUs (GH200, GB200, GB300), else "x86"."""
    return "grace" if gpu.lower().startswith(GRACE_GPUS) else "x86"


@record(kw_only=True)
class SystemConfig:
    """One node type and its fabric: which GPU, how many per node, NVLink and NIC bandwidths and
    the scale-out topology. Everything a network backend needs besides the workload."""
    name: str
    source: str = ""
    gpu: str
    """Key into workload_gen.core.gpu_specs (e.g. h100-sxm)."""
    gpus_per_node: int = 8
    """GPUs of one host node (what one OS image, its CPUs and its launcher own). On NVL72 racks
    a compute tray: 4 GPUs, 2 Grace CPUs."""
    nvlink_domain: int = 0
    """GPUs reachable from each other over NVLink (one NVSwitch domain), a multiple of
    ``gpus_per_node``; 0: the node (:attr:`domain_gpus`). 72 on GB200/GB300 NVL72, where 18
    trays of 4 GPUs share the rack's NVLink switch trays. Every collective's "inside vs
    across" question is asked of this domain, not of the host node."""
    nvlink_bw: float
    """Per-GPU NVLink bandwidth, one direction, bytes/s (vendor figure / 2)."""
    nvlink_busbw: float
    """NCCL ring bus bandwidth achieved inside one NVLink domain for large messages, bytes/s."""
    nvls: bool = False
    """NVLink SHARP in the NVSwitch (Hopper and later): NCCL's NVLS algorithm."""
    nvls_busbw: float = 0.0
    """NVLS all-reduce bus bandwidth inside one NVLink domain, bytes/s (0 when no NVLS)."""
    nics_per_node: int = 8
    nic_bw: float
    """Line rate of one NIC, one direction, bytes/s."""
    nic_efficiency: float = 0.92
    """Achievable fraction of the NIC line rate for large messages (headers, protocol)."""
    topology: Literal["rail", "fat-tree"] = "rail"
    oversubscription: float = 1.0
    """Leaf uplink oversubscription ratio (1 = non-blocking)."""
    nvlink_latency_s: float = 2e-6
    """Per-step latency of an NCCL transfer over NVLink."""
    network_latency_s: float = 5e-6
    """Per-step latency of an NCCL transfer across nodes (NIC + switches + propagation)."""
    link_latency_s: float = 1e-6
    """Propagation + switching delay of one network link (packet backends)."""
    host_op_s: float | None = None
    """CPU seconds the host spends on one eager PyTorch op and its launch (engine.host_launch);
    None: the measured figure for the GPU's usual host CPU (:data:`HOST_OP_S`); 0: a host
    that never delays the GPU."""

    def __post_init__(self) -> None:
        get_gpu(self.gpu)  # validates the name
        for name in ("gpus_per_node", "nics_per_node"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < 1:
                raise ConfigError(name, v, "must be a positive integer")
        d = self.nvlink_domain
        if isinstance(d, bool) or not isinstance(d, int) or d < 0 or (d and d % self.gpus_per_node):
            raise ConfigError("nvlink_domain", d, f"must be 0 (= the node) or a positive multiple of "
                                                  f"gpus_per_node ({self.gpus_per_node}), e.g. 72 on NVL72")
        for name in ("nvlink_bw", "nvlink_busbw", "nvls_busbw", "nic_bw", "nic_efficiency", "oversubscription",
                     "nvlink_latency_s", "network_latency_s", "link_latency_s"):
            v = getattr(self, name)
            # NaN passes every comparison below and ends as NaN in summary.json; inf is no rate
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                raise ConfigError(name, v, "must be a finite number")
        from workload_gen.core.limits import MAX_BANDWIDTH, MAX_SECONDS, MIN_BANDWIDTH

        for name in ("nvlink_bw", "nvlink_busbw", "nic_bw"):
            if getattr(self, name) <= 0:
                raise ConfigError(name, getattr(self, name), "must be > 0 (bytes/s)")
        for name in ("nvlink_bw", "nvlink_busbw", "nic_bw", "nvls_busbw"):
            v = getattr(self, name)
            if (v or name != "nvls_busbw") and not MIN_BANDWIDTH <= v <= MAX_BANDWIDTH:
                raise ConfigError(name, v, f"must be between {MIN_BANDWIDTH:.0e} and {MAX_BANDWIDTH:.0e} bytes/s "
                                  "(workload_gen/core/limits.py)")
        for name in ("nvlink_latency_s", "network_latency_s", "link_latency_s"):
            if getattr(self, name) > MAX_SECONDS:
                raise ConfigError(name, getattr(self, name), f"must be at most {MAX_SECONDS:.0e} seconds")
        if 0 < self.nic_efficiency <= 1 and self.oversubscription >= 1 \
                and self.nic_bw * self.nic_efficiency / self.oversubscription < MIN_BANDWIDTH:
            raise ConfigError("nic_efficiency" if self.oversubscription <= 1 else "oversubscription",
                              self.nic_efficiency if self.oversubscription <= 1 else self.oversubscription,
                              f"leaves a NIC nic_bw x nic_efficiency / oversubscription = "
                              f"{self.nic_bw * self.nic_efficiency / self.oversubscription:.3g} bytes/s, under the "
                              f"{MIN_BANDWIDTH:.0e} bytes/s limit (workload_gen/core/limits.py)")
        if self.host_op_s is not None and (isinstance(self.host_op_s, bool) or not isinstance(self.host_op_s, (int, float))
                                           or not math.isfinite(self.host_op_s) or self.host_op_s < 0):
            raise ConfigError("host_op_s", self.host_op_s, "must be a finite number >= 0 (seconds), or null")
        if self.nvls_busbw < 0:
            raise ConfigError("nvls_busbw", self.nvls_busbw, "must be >= 0 (bytes/s; 0 = no NVLS)")
        for name in ("nvlink_latency_s", "network_latency_s", "link_latency_s"):
            if getattr(self, name) < 0:
                raise ConfigError(name, getattr(self, name), "must be >= 0 (seconds)")
        if not 0 < self.nic_efficiency <= 1:
            raise ConfigError("nic_efficiency", self.nic_efficiency, "must be in (0, 1]")
        if self.oversubscription < 1:
            raise ConfigError("oversubscription", self.oversubscription, "must be >= 1")
        if self.topology not in ("rail", "fat-tree"):
            raise ConfigError("topology", self.topology, "valid: rail, fat-tree")

    @property
    def gpu_spec(self) -> GpuSpec:
        return get_gpu(self.gpu)

    @property
    def launch_op_s(self) -> float:
        """Seconds of one eager op on this system's host: host_op_s, else by host CPU."""
        return self.host_op_s if self.host_op_s is not None else HOST_OP_S[host_cpu(self.gpu)]

    @property
    def domain_gpus(self) -> int:
        """GPUs per NVLink domain: the unit that network backends, placement shapes and the
        collective algorithms call a "node" (``nvlink_domain``, or ``gpus_per_node`` when 0)."""
        return self.nvlink_domain or self.gpus_per_node

    def for_job(self, world_size: int) -> SystemConfig:
        """This system as a job of ``world_size`` GPUs sees it: on a rack-scale system (an NVLink
        domain of several host nodes) the scheduler gives each domain a whole number of nodes of
        the job, and that block is the job's NVLink domain. NVIDIA's launcher asks Slurm for
        ``--segment`` = the job's nodes when they fit one domain, else the largest divisor of
        the node count that does (Megatron-Bridge scripts/performance/utils/executors.py at
        v0.4.0, for 4-GPU GB200/GB300 nodes): 256 GPUs on NVL72 run as 4 racks of 64, 144 as 2
        of 72, 96 as 2 of 48. Elsewhere (the domain is one node) nothing changes."""
        per = self.gpus_per_node
        if self.domain_gpus <= per or world_size <= 0 or world_size % per:
            return self
        nodes, fit = world_size // per, self.domain_gpus // per
        segment = nodes if nodes <= fit else max(d for d in range(1, fit + 1) if nodes % d == 0)
        domain = segment * per
        return self if domain == self.domain_gpus else replace(self, nvlink_domain=domain)

    @property
    def domain_nics(self) -> int:
        """Scale-out NICs per NVLink domain: every host node of the domain brings its own
        (``nics_per_node`` x nodes per domain); 72 on NVL72 with one NIC per GPU."""
        return self.nics_per_node * (self.domain_gpus // self.gpus_per_node)

    @property
    def nic_busbw(self) -> float:
        """Achievable bytes/s of one NIC."""
        return self.nic_bw * self.nic_efficiency

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


SYSTEMS: dict[str, SystemConfig] = {
    "a100": SystemConfig(
        name="a100",
        # NVIDIA DGX A100 user guide / datasheet: 8x A100 SXM 80GB, NVLink3 600 GB/s
        # bidirectional per GPU through 6 NVSwitches, 8x ConnectX-6 HDR 200 Gb/s.
        # nccl-tests all-reduce on DGX A100 reaches ~230 GB/s busbw.
        source="NVIDIA DGX A100 datasheet; nccl-tests on DGX A100",
        gpu="a100-sxm-80gb", nvlink_bw=300 * GBPS, nvlink_busbw=230 * GBPS,
        nics_per_node=8, nic_bw=200 * GBIT,
    ),
    "h100": SystemConfig(
        name="h100",
        # NVIDIA DGX H100 datasheet: 8x H100 SXM, NVLink4 900 GB/s bidirectional per GPU,
        # 4 NVSwitch with NVLink SHARP, 8x ConnectX-7 NDR 400 Gb/s. SimAI's documented
        # examples use 360 GB/s NVLink busbw for this node.
        source="NVIDIA DGX H100 datasheet; SimAI README (-nv 360)",
        gpu="h100-sxm", nvlink_bw=450 * GBPS, nvlink_busbw=360 * GBPS, nvls=True, nvls_busbw=480 * GBPS,
        nics_per_node=8, nic_bw=400 * GBIT,
    ),
    "h800": SystemConfig(
        name="h800",
        # DeepSeek-V3's cluster (arXiv 2412.19437, Sec. 3.1): 8 H800 per node over NVLink and
        # NVSwitch, InfiniBand across nodes; Sec. 3.2.2: "NVLink offers a bandwidth of
        # 160 GB/s, roughly 3.2 times that of IB (50 GB/s)", i.e. one 400 Gb/s NIC per GPU.
        # NVIDIA's H800 SXM5 datasheet: NVLink 400 GB/s bidirectional per GPU (H100: 900),
        # so 200 GB/s one way; the 160 GB/s achieved is DeepSeek's and DeepEP's measured
        # NVLink figure (deepseek-ai/DeepEP README, intranode "NVLink ~160 GB/s"), the
        # same 80% of the link as the h100 preset's 360 of 450. NVLS: no H800 figure found,
        # so NCCL's NVLS algorithm is not assumed.
        source="NVIDIA H800 SXM5 datasheet; DeepSeek-V3 (arXiv 2412.19437) Sec. 3.1, 3.2.2; DeepEP README",
        gpu="h800", nvlink_bw=200 * GBPS, nvlink_busbw=160 * GBPS,
        nics_per_node=8, nic_bw=400 * GBIT,
    ),
    "h200": SystemConfig(
        name="h200",
        # NVIDIA DGX H200 datasheet: same NVLink4/NVSwitch fabric and 8x 400 Gb/s NICs as DGX H100.
        source="NVIDIA DGX H200 datasheet",
        gpu="h200", nvlink_bw=450 * GBPS, nvlink_busbw=360 * GBPS, nvls=True, nvls_busbw=480 * GBPS,
        nics_per_node=8, nic_bw=400 * GBIT,
    ),
    "h20": SystemConfig(
        name="h20",
        # NVIDIA HGX H20 product brief: NVLink 900 GB/s bidirectional; servers ship with
        # 8x 400 Gb/s NICs in the common configuration.
        source="NVIDIA HGX H20 product brief",
        gpu="h20", nvlink_bw=450 * GBPS, nvlink_busbw=360 * GBPS, nvls=True, nvls_busbw=480 * GBPS,
        nics_per_node=8, nic_bw=400 * GBIT,
    ),
    "b200": SystemConfig(
        name="b200",
        # NVIDIA DGX B200 datasheet: 8x B200, NVLink5 1.8 TB/s bidirectional per GPU via
        # 2 NVSwitch chips, 8x ConnectX-7 400 Gb/s for the compute fabric.
        source="NVIDIA DGX B200 datasheet",
        gpu="b200", nvlink_bw=900 * GBPS, nvlink_busbw=720 * GBPS, nvls=True, nvls_busbw=960 * GBPS,
        nics_per_node=8, nic_bw=400 * GBIT,
    ),
    "b300": SystemConfig(
        name="b300",
        # NVIDIA DGX B300 datasheet: 8x B300 (Blackwell Ultra), NVLink5 1.8 TB/s bidirectional per
        # GPU (14.4 TB/s per system) through 2 NVSwitch chips; compute fabric 8x OSFP ports on
        # ConnectX-8 VPI, up to 800 Gb/s each (one per GPU). Same NVLink 5 switch as DGX B200, so
        # the b200 preset's busbw figures are taken (80% of 900 GB/s ring; NVLS 960 GB/s), no
        # B300 nccl-tests figure having been found.
        source="NVIDIA DGX B300 datasheet (8x B300, NVLink 5, 8x ConnectX-8 800 Gb/s); b200 preset's busbw",
        gpu="b300", nvlink_bw=900 * GBPS, nvlink_busbw=720 * GBPS, nvls=True, nvls_busbw=960 * GBPS,
        nics_per_node=8, nic_bw=800 * GBIT,
    ),
    "gb200-nvl72": SystemConfig(
        name="gb200-nvl72",
        # NVIDIA GB200 NVL72 datasheet: 72 B200 GPUs and 36 Grace CPUs in one NVLink domain, NVLink 5
        # at 1.8 TB/s bidirectional per GPU (130 TB/s per rack) through 9 NVLink switch trays with
        # NVLink SHARP; 18 compute trays of 2 GB200 superchips (4 GPUs, 2 Grace). Scale-out: NVIDIA
        # DGX GB200 SuperPOD reference architecture, compute tray: four ConnectX-7 NDR 400 Gb/s NICs
        # per 4-GPU tray (one per GPU). nvls_busbw: nccl-tests all_reduce_perf on one full NVL72
        # rack (72 ranks, NVLS) reaches 839 GB/s busbw at 4 GiB and 835-847 GB/s at 4-8 GiB
        # (coreweave/nccl-tests pull 43, 2025-02). nvlink_busbw (ring): 720 GB/s, the b200 and h100
        # presets' 80% of the 900 GB/s link; nvbandwidth GPU-to-GPU copies on GB200 measure
        # ~770 GB/s (Azure/AI-benchmarking-guide issue 7), so a ring cannot exceed that.
        source="NVIDIA GB200 NVL72 datasheet; DGX GB200 SuperPOD RA (4x CX-7 400G per tray); "
               "coreweave/nccl-tests#43 (72-GPU NVLS all-reduce 839 GB/s busbw)",
        gpu="gb200", gpus_per_node=4, nvlink_domain=72, nvlink_bw=900 * GBPS, nvlink_busbw=720 * GBPS,
        nvls=True, nvls_busbw=840 * GBPS, nics_per_node=4, nic_bw=400 * GBIT,
    ),
    "gb300-nvl72": SystemConfig(
        name="gb300-nvl72",
        # NVIDIA GB300 NVL72 datasheet: 72 Blackwell Ultra GPUs and 36 Grace CPUs, NVLink 5 at
        # 1.8 TB/s bidirectional per GPU (130 TB/s per rack), the same NVLink switch trays as GB200
        # NVL72; 18 compute trays of 4 GPUs and 2 Grace; 72 ConnectX-8 SuperNICs, 800 Gb/s each
        # (one per GPU). No GB300 72-GPU nccl-tests figure was found: the NVLink domain's busbw
        # figures are gb200-nvl72's (same NVLink 5 switch fabric).
        source="NVIDIA GB300 NVL72 datasheet (72x ConnectX-8 800 Gb/s); NVLink busbw as gb200-nvl72",
        gpu="gb300", gpus_per_node=4, nvlink_domain=72, nvlink_bw=900 * GBPS, nvlink_busbw=720 * GBPS,
        nvls=True, nvls_busbw=840 * GBPS, nics_per_node=4, nic_bw=800 * GBIT,
    ),
}


def get_system(name: str) -> SystemConfig:
    if name not in SYSTEMS:
        raise ConfigError("system", name, f"valid presets: {', '.join(SYSTEMS)}, or a YAML file")
    return SYSTEMS[name]


_FIELD_NAMES = {f.name for f in fields(SystemConfig)}


def system_from_dict(data: dict[str, Any], source: str | None = None) -> SystemConfig:
    """Build a system from YAML-like data: optional ``base`` preset, then field overrides."""
    data = dict(data)
    base_name = data.pop("base", None)
    unknown = sorted(set(data) - _FIELD_NAMES, key=str)
    if unknown:
        raise ConfigError(unknown[0], data[unknown[0]], f"unknown system field; valid: {', '.join(sorted(_FIELD_NAMES))}", source)
    try:
        if base_name is not None:
            return replace(get_system(str(base_name)), **data)
        return SystemConfig(**data)
    except ConfigError as exc:
        if source and exc.source is None:
            raise ConfigError(exc.field, exc.value, exc.valid, source) from None
        raise
    except TypeError as exc:
        raise ConfigError("system", source or "<dict>", f"incomplete system: {exc}; or give base: <preset>") from None


def load_system(spec: str) -> SystemConfig:
    """A preset name, or a YAML file path."""
    if spec in SYSTEMS:
        return SYSTEMS[spec]
    path = Path(spec)
    if path.suffix in (".yaml", ".yml") or path.exists():
        return system_from_dict(read_yaml_mapping(path, "system fields (and base: <preset>)"), source=spec)
    return get_system(spec)
