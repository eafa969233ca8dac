"""Built-in GPU specifications, each with its source.

Peak figures are DENSE tensor-core throughput (no 2:4 sparsity), in FLOP/s; HBM
bandwidth in bytes/s; memory in bytes. A dtype a GPU lacks (fp8 before Hopper) is
absent from ``peak_flops``; asking for it raises a ConfigError.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from workload_gen.errors import ConfigError
from workload_gen.units import GB, TFLOPS, GiB

T = TFLOPS


@dataclass(frozen=True, slots=True, kw_only=True)
class GpuSpec:
    name: str
    source: str
    peak_flops: dict[str, float] = field(hash=False)
    """Dense peak per dtype: bf16, fp16, fp8, tf32, fp32."""
    hbm_bw: float
    """Bytes/s."""
    memory_bytes: int
    sm_count: int

    def peak(self, dtype: str) -> float:
        try:
            return self.peak_flops[dtype]
        except KeyError:
            raise ConfigError("dtype", dtype, f"{self.name} supports {', '.join(sorted(self.peak_flops))}") from None


GPUS: dict[str, GpuSpec] = {
    "a100-sxm-80gb": GpuSpec(
        name="a100-sxm-80gb",
        # NVIDIA A100 Tensor Core GPU datasheet (2021), SXM column; dense figures.
        source="NVIDIA A100 datasheet, SXM 80GB",
        peak_flops={"bf16": 312 * T, "fp16": 312 * T, "tf32": 156 * T, "fp32": 19.5 * T},
        hbm_bw=2039 * GB, memory_bytes=80 * GB, sm_count=108,
    ),
    "a100-pcie": GpuSpec(
        name="a100-pcie",
        # NVIDIA A100 datasheet, PCIe 80GB column.
        source="NVIDIA A100 datasheet, PCIe 80GB",
        peak_flops={"bf16": 312 * T, "fp16": 312 * T, "tf32": 156 * T, "fp32": 19.5 * T},
        hbm_bw=1935 * GB, memory_bytes=80 * GB, sm_count=108,
    ),
    "h100-sxm": GpuSpec(
        name="h100-sxm",
        # NVIDIA H100 Tensor Core GPU datasheet, SXM5 column; sparsity figures halved.
        source="NVIDIA H100 datasheet, SXM",
        peak_flops={"bf16": 989.4 * T, "fp16": 989.4 * T, "fp8": 1978.9 * T, "tf32": 494.7 * T, "fp32": 66.9 * T},
        hbm_bw=3350 * GB, memory_bytes=80 * GB, sm_count=132,
    ),
    "h200": GpuSpec(
        name="h200",
        # NVIDIA H200 datasheet, SXM column: H100 compute, HBM3e 141 GB at 4.8 TB/s.
        source="NVIDIA H200 datasheet, SXM",
        peak_flops={"bf16": 989.4 * T, "fp16": 989.4 * T, "fp8": 1978.9 * T, "tf32": 494.7 * T, "fp32": 66.9 * T},
        hbm_bw=4800 * GB, memory_bytes=141 * GB, sm_count=132,
    ),
    "h20": GpuSpec(
        name="h20",
        # NVIDIA HGX H20 product brief (2024): 148 TF bf16 dense, 96 GB HBM3 at 4.0 TB/s.
        source="NVIDIA HGX H20 product brief",
        peak_flops={"bf16": 148 * T, "fp16": 148 * T, "fp8": 296 * T, "tf32": 74 * T, "fp32": 44 * T},
        hbm_bw=4000 * GB, memory_bytes=96 * GB, sm_count=78,
    ),
    "b200": GpuSpec(
        name="b200",
        # NVIDIA HGX B200 datasheet (per GPU, dense): 2.25 PF bf16, 4.5 PF fp8, HBM3e 8 TB/s;
        # 180 GB usable per GPU in DGX B200 (1,440 GB per 8 GPUs).
        source="NVIDIA HGX/DGX B200 datasheets",
        peak_flops={"bf16": 2250 * T, "fp16": 2250 * T, "fp8": 4500 * T, "tf32": 1100 * T, "fp32": 75 * T},
        hbm_bw=8000 * GB, memory_bytes=180 * GB, sm_count=148,
    ),
    "cpu": GpuSpec(
        name="cpu",
        # Pseudo-GPU for CPU runs in CI: `compute-profile measure` on a machine without CUDA
        # labels its rows "cpu" (and runs torch with ONE thread by default: on a shared 2-core
        # runner a second thread makes small kernels 50x slower and noisy), and attach falls
        # back to the estimator with these figures. Nominal, not a datasheet: torch 2.13 CPU
        # kernels, one thread of an AVX-512 (bf16) x86 core, measured 2026-11-30: bf16 matmul
        # ~200 GF/s, fp32 ~80 GF/s, stream add ~20 GB/s.
        source="nominal single-thread AVX-512 x86 CI core (measured torch CPU kernels), not a datasheet",
        peak_flops={"bf16": 220 * 1e9, "fp32": 90 * 1e9, "tf32": 90 * 1e9},
        hbm_bw=20 * GB, memory_bytes=8 * GiB, sm_count=1,
    ),
}

ALIASES: dict[str, str] = {
    "a100": "a100-sxm-80gb", "a100-sxm": "a100-sxm-80gb", "h100": "h100-sxm", "h200-sxm": "h200",
}


def get_gpu(name: str) -> GpuSpec:
    key = ALIASES.get(name.lower(), name.lower())
    if key not in GPUS:
        raise ConfigError("gpu", name, f"valid: {', '.join(sorted(GPUS) + sorted(ALIASES))}")
    return GPUS[key]
