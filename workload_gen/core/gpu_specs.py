"""Built-in GPU specifications, each with its source.

Peak figures are DENSE tensor-core throughput (no 2:4 sparsity), in FLOP/s; HBM
bandwidth in bytes/s; memory in bytes. A dtype a GPU lacks (fp8 before Hopper) is
absent from ``peak_flops``; asking for it raises a ConfigError.

``memory_bytes`` is the capacity CUDA reports (``cudaGetDeviceProperties().totalGlobalMem``,
which ``torch.cuda.get_device_properties().total_memory`` returns): the ceiling of what
PyTorch's caching allocator can reserve, and what a peak-memory estimate has to fit in.
It is below the marketing figure in GB (an "80 GB" H100 is not 80e9 bytes of usable
memory, nor 80 GiB) and below nvidia-smi's total, which also counts memory the driver
keeps; it varies by a few MiB between driver versions. Each value cites a public printout.
"""
from __future__ import annotations

from dataclasses import field

from workload_gen.core.errors import ConfigError
from workload_gen.core.record import record
from workload_gen.core.units import GB, TFLOPS, GiB, MiB

T = TFLOPS


@record(kw_only=True)
class GpuSpec:
    """Datasheet figures of one GPU model: peaks, HBM bandwidth and capacity, SM count. Fitted or
    measured efficiencies live in compute_profile's parameter file, not here."""
    name: str
    source: str
    peak_flops: dict[str, float] = field(hash=False)
    """Dense peak per dtype: bf16, fp16, fp8, fp4 (Blackwell's NVFP4, on the parts that list it), tf32, fp32."""
    hbm_bw: float
    """Bytes/s."""
    memory_bytes: int
    sm_count: int
    compute_capability: tuple[int, int]
    """CUDA compute capability (major, minor), from NVIDIA's CUDA GPUs table: A100 8.0,
    H100/H800/H200/H20 9.0, B200/GB200 10.0, B300/GB300 10.3. NCCL picks its tuning tables by it (collectives.protocol)."""
    board_power_w: float = 0.0
    """The GPU's default board power limit (TDP), W; 0 (not given) on GPUs that neither take
    another's fitted throughput nor give theirs (compute_profile's ``sustains_like``). A GEMM-heavy training step runs power-limited on these parts, so a
    sibling at another limit sustains a different fraction of its peak
    (compute_profile.estimator.power_scaled_throughput)."""

    @property
    def fp8_gemm_any_layout(self) -> bool:
        """cuBLAS runs FP8 GEMMs in non-TN layouts on this GPU (compute capability 10.x or 13+;
        Hopper takes TN only), so Transformer Engine keeps a per-tensor fp8 tensor as its data
        alone, which serves the transposed use too (TE ``is_non_tn_fp8_gemm_supported``,
        pytorch/utils.py, v2.14; quantizer.cpp: ``with_transpose = columnwise_usage &&
        !is_non_tn_fp8_gemm_supported``): no transpose copy is written or kept."""
        cc = self.compute_capability
        return (10, 0) <= cc < (12, 0) or cc >= (13, 0)

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
        hbm_bw=2039 * GB, sm_count=108, compute_capability=(8, 0),
        # CUDA totalGlobalMem of an A100 80GB: 81,049 MiB (mixbench output, github.com/ekondis/
        # mixbench/issues/47, "Total global mem: 81049 MB", A100 80GB PCIe; the SXM4 module has the
        # same 80 GB HBM2e). nvidia-smi shows 81,920 MiB (github.com/modal-labs/modal-client/pull/2797).
        memory_bytes=81_049 * MiB,
    ),
    "a100-pcie": GpuSpec(
        name="a100-pcie",
        # NVIDIA A100 datasheet, PCIe 80GB column.
        source="NVIDIA A100 datasheet, PCIe 80GB",
        peak_flops={"bf16": 312 * T, "fp16": 312 * T, "tf32": 156 * T, "fp32": 19.5 * T},
        hbm_bw=1935 * GB, sm_count=108, compute_capability=(8, 0),
        # CUDA totalGlobalMem 81,049 MiB: mixbench on an "NVIDIA A100 80GB PCIe"
        # (github.com/ekondis/mixbench/issues/47).
        memory_bytes=81_049 * MiB,
    ),
    "h100-sxm": GpuSpec(
        name="h100-sxm",
        # NVIDIA H100 Tensor Core GPU datasheet, SXM5 column; sparsity figures halved.
        source="NVIDIA H100 datasheet, SXM",
        peak_flops={"bf16": 989.4 * T, "fp16": 989.4 * T, "fp8": 1978.9 * T, "tf32": 494.7 * T, "fp32": 66.9 * T},
        hbm_bw=3350 * GB, sm_count=132, compute_capability=(9, 0),
        board_power_w=700,  # H100 datasheet, SXM: max TDP up to 700 W
        # torch.cuda.get_device_properties: "NVIDIA H100 80GB HBM3 ... total_memory=81090MB" (MiB;
        # 8 GPUs printed in Stanford CS336 spring 2025 lecture 6 notes); other public printouts give
        # 81,082-81,106 MiB by driver (deviceQuery 85,045,477,376 bytes: github.com/thamada/
        # nvidia-smi nvsim/H100SXMx8_deviceQuery.py). nvidia-smi shows 81,559 MiB
        # (github.com/NVIDIA/nccl/issues/1264; modal-labs/modal-client#2797: 85,520,809,984 bytes).
        # 81,090 MiB = 79.2 GiB (80e9 bytes would be 74.5 GiB).
        memory_bytes=81_090 * MiB,
    ),
    "h800": GpuSpec(
        name="h800",
        # NVIDIA H800 SXM5 datasheet: the H100 SXM's compute (BF16 1,979 / FP8 3,958 TFLOPS with
        # sparsity, halved here), 80 GB HBM3 at 3.35 TB/s, 132 SMs; only the NVLink is cut
        # (400 GB/s instead of 900, see core.system's h800). DeepGEMM's README runs its FP8
        # GEMMs on "H800 SXM5" at up to 1,550 TFLOPS, consistent with the H100's 1,979 dense.
        # Capacity: the same 80 GB HBM3 stack as the H100 SXM, so the H100's CUDA
        # totalGlobalMem (81,090 MiB) is taken; no H800 printout was found.
        source="NVIDIA H800 SXM5 datasheet (H100 SXM compute, 400 GB/s NVLink)",
        peak_flops={"bf16": 989.4 * T, "fp16": 989.4 * T, "fp8": 1978.9 * T, "tf32": 494.7 * T, "fp32": 66.9 * T},
        hbm_bw=3350 * GB, sm_count=132, compute_capability=(9, 0),
        board_power_w=700,  # H800 SXM5: the H100 SXM's 700 W board
        memory_bytes=81_090 * MiB,
    ),
    "h200": GpuSpec(
        name="h200",
        # NVIDIA H200 datasheet, SXM column: H100 compute, HBM3e 141 GB at 4.8 TB/s.
        source="NVIDIA H200 datasheet, SXM",
        peak_flops={"bf16": 989.4 * T, "fp16": 989.4 * T, "fp8": 1978.9 * T, "tf32": 494.7 * T, "fp32": 66.9 * T},
        hbm_bw=4800 * GB, sm_count=132, compute_capability=(9, 0),
        board_power_w=700,  # H200 datasheet, SXM: max TDP up to 700 W
        # torch: "NVIDIA H200 ... total_memory=143156MB" (MiB; a public Modal vLLM example's
        # printout, found by code search); nvidia-smi shows 143,771 MiB.
        memory_bytes=143_156 * MiB,
    ),
    "h20": GpuSpec(
        name="h20",
        # NVIDIA HGX H20 product brief (2024): 148 TF bf16 dense, 96 GB HBM3 at 4.0 TB/s.
        source="NVIDIA HGX H20 product brief",
        peak_flops={"bf16": 148 * T, "fp16": 148 * T, "fp8": 296 * T, "tf32": 74 * T, "fp32": 44 * T},
        hbm_bw=4000 * GB, sm_count=78, compute_capability=(9, 0),
        # torch: "NVIDIA H20 ... total_memory=97285MB" (MiB; printed in the comments of public
        # Triton attention kernels, found by code search); nvidia-smi shows 97,871 MiB
        # (github.com/NVIDIA/nvtrust/issues/128).
        memory_bytes=97_285 * MiB,
    ),
    "b200": GpuSpec(
        name="b200",
        # NVIDIA HGX B200 datasheet (per GPU, dense): 2.25 PF bf16, 4.5 PF fp8, HBM3e 8 TB/s;
        # 180 GB usable per GPU in DGX B200 (1,440 GB per 8 GPUs). FP4 (NVFP4) tensor core:
        # the DGX B200 datasheet's 144 PFLOPS per 8 GPUs is with 2:4 sparsity (its fp8 line,
        # 72 PF, is the sparse twin of the 4.5 PF dense above), so 144 / 8 / 2 = 9 PF dense.
        source="NVIDIA HGX/DGX B200 datasheets",
        peak_flops={"bf16": 2250 * T, "fp16": 2250 * T, "fp8": 4500 * T, "fp4": 9000 * T, "tf32": 1100 * T,
                    "fp32": 75 * T},
        hbm_bw=8000 * GB, sm_count=148, compute_capability=(10, 0),
        board_power_w=1000,  # HGX B200 / DGX B200 datasheets: 1,000 W per GPU (the B200 rows fitted were DGX B200)
        # torch: "NVIDIA B200 ... total_memory=182631MB" (MiB; public printouts give 182,631 and
        # 182,642); CUDA "Total Global Memory: 178.35 GB" (GiB, = 182,630 MiB:
        # github.com/pytorch/ao/pull/4002); nvidia-smi shows 183,359 MiB
        # (github.com/NVIDIA/TensorRT-LLM/issues/10278).
        memory_bytes=182_631 * MiB,
    ),
    "gb200": GpuSpec(
        name="gb200",
        # The B200 of GB200 NVL72, a 1,200 W part. NVIDIA GB200 NVL72 datasheet / product page, per
        # GB200 superchip (1 Grace + 2 GPUs) WITH sparsity: FP4 40 PF, FP8 20 PF, FP16/BF16 10 PF,
        # TF32 5 PF; halved for dense and per GPU: FP4 10 PF, FP8 5 PF, BF16 2.5 PF, TF32 1.25 PF.
        # FP32 90 TF (glennklockwood.com/garden/processors/B200 tabulates the same datasheet per GPU
        # at 1,200 W). HBM3e: 186 GB per GPU in the NVL72's 13.4 TB, at 8 TB/s (576 TB/s per 72).
        # SMs: 152 (public run logs on "NVIDIA GB200 (152 SMs)", CUDA 13.0, 2026-08). Compute
        # capability 10.0 (NVIDIA CUDA GPUs table: B200 and GB200 10.0; sm_100).
        source="NVIDIA GB200 NVL72 datasheet (per superchip, sparse, halved per GPU); CUDA GPUs table",
        peak_flops={"bf16": 2500 * T, "fp16": 2500 * T, "fp8": 5000 * T, "fp4": 10_000 * T, "tf32": 1250 * T,
                    "fp32": 90 * T},
        hbm_bw=8000 * GB, sm_count=152, compute_capability=(10, 0),
        board_power_w=1200,  # GB200 NVL72: 1,200 W per GPU (glennklockwood.com/garden/processors/B200 tabulates NVIDIA's GB200 figures "when configured to 1,200 W"; Verda's Blackwell table)
        # No public CUDA totalGlobalMem printout was found. nvidia-smi shows 189,471 MiB ("NVIDIA
        # GB200, 189471 MiB", TACC Vista run metadata and other public logs, drivers 580/590);
        # the B200's driver reserve (nvidia-smi 183,359 - totalGlobalMem 182,631 = 728 MiB, see
        # b200 above) is taken off: DERIVED, not a printout.
        memory_bytes=(189_471 - 728) * MiB,
    ),
    "gb300": GpuSpec(
        name="gb300",
        # Blackwell Ultra in GB300 NVL72, 1,400 W. NVIDIA GB300 NVL72 datasheet / product page, per
        # 72-GPU rack: FP4 1,440 PF sparse / 1,080 PF dense -> 15 PF dense per GPU; FP8 720 PF
        # sparse -> 5 PF dense per GPU; FP16/BF16 360 PF sparse -> 2.5 PF; TF32 180 PF sparse ->
        # 1.25 PF (each: the sparse figure halved, / 72). FP32 80 TF per GPU (the datasheet's
        # 6 PF rack figure / 72 rounds to 83; Verda's per-GPU GB300 table gives 80). HBM3e 288 GB
        # per GPU (20 TB per rack) at 8 TB/s (576 TB/s / 72). SMs: 152 (public kernel benchmarks
        # "GB300, 152 SMs", sm_103a, 2026). Compute capability 10.3 (NVIDIA CUDA GPUs table:
        # GB300 and B300 10.3; sm_103).
        source="NVIDIA GB300 NVL72 datasheet (rack figures, sparse halved, / 72); CUDA GPUs table",
        peak_flops={"bf16": 2500 * T, "fp16": 2500 * T, "fp8": 5000 * T, "fp4": 15_000 * T, "tf32": 1250 * T,
                    "fp32": 80 * T},
        hbm_bw=8000 * GB, sm_count=152, compute_capability=(10, 3),
        # 1,400 W: Verda's per-GPU Blackwell table (max TDP GB300 1.4 kW); nvidia-smi on GB300
        # reports default_limit == max_limit == 1,400 W (facebookexperimental/triton PR 2023).
        board_power_w=1400,
        # No public CUDA totalGlobalMem printout found; nvidia-smi shows 284,208 MiB ("NVIDIA
        # GB300, 284208 MiB, 580.95.05" in public test data) less the B200's 728 MiB driver
        # reserve: DERIVED.
        memory_bytes=(284_208 - 728) * MiB,
    ),
    "b300": GpuSpec(
        name="b300",
        # Blackwell Ultra in HGX/DGX B300 ("NVIDIA B300 SXM6 AC"). NVIDIA HGX B300 datasheet, per
        # 8 GPUs: FP4 144 PF sparse / 108 PF dense -> 13.5 PF dense per GPU; FP8 72 PF sparse ->
        # 4.5 PF dense; FP16/BF16 36 PF sparse -> 2.25 PF; TF32 18 PF sparse -> 1.125 PF (sparse
        # halved, / 8); FP32 75 TF per GPU. HBM3e 2.3 TB per 8 GPUs (288 GB each) at up to 8 TB/s.
        # SMs: 148 (public audits on "NVIDIA B300 SXM6 AC (148 SMs, sm_103a)", CUDA 13, 2026).
        # Compute capability 10.3 (NVIDIA CUDA GPUs table; a public torch profile prints
        # "NVIDIA B300 SXM6 AC cc=(10, 3)").
        source="NVIDIA HGX B300 / DGX B300 datasheets (per 8 GPUs, sparse halved); CUDA GPUs table",
        peak_flops={"bf16": 2250 * T, "fp16": 2250 * T, "fp8": 4500 * T, "fp4": 13_500 * T, "tf32": 1125 * T,
                    "fp32": 75 * T},
        hbm_bw=8000 * GB, sm_count=148, compute_capability=(10, 3),
        board_power_w=1100,  # Verda's per-GPU Blackwell table: B300 max TDP 1.1 kW
        # No public CUDA totalGlobalMem printout found; nvidia-smi shows 275,040 MiB ("NVIDIA B300
        # SXM6 AC, 275040 MiB, 580.95.05" in public test data) less the B200's 728 MiB driver
        # reserve: DERIVED.
        memory_bytes=(275_040 - 728) * MiB,
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
        hbm_bw=20 * GB, memory_bytes=8 * GiB, sm_count=1, compute_capability=(0, 0),
    ),
}

ALIASES: dict[str, str] = {
    "a100": "a100-sxm-80gb", "a100-sxm": "a100-sxm-80gb", "h100": "h100-sxm", "h200-sxm": "h200",
}


def find_gpu(name: str) -> GpuSpec | None:
    """The preset named ``name`` (or an alias), or None for an empty or unknown name: for terms
    that fall back to a default where a workload names no GPU, or a user's own one."""
    key = ALIASES.get(name.lower(), name.lower()) if isinstance(name, str) else None
    return GPUS.get(key) if key else None


def get_gpu(name: str) -> GpuSpec:
    """The preset named ``name`` (or an alias); one clear error naming the valid ones otherwise."""
    spec = find_gpu(name)
    if spec is None:
        valid = f"valid: {', '.join(sorted(GPUS) + sorted(ALIASES))}"
        raise ConfigError("gpu", name, valid if isinstance(name, str) else f"a GPU name; {valid}")
    return spec
