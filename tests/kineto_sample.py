"""A small PyTorch-profiler (Kineto) GPU trace that the trace-diff tests read and the Kineto
fuzzer mutates: one ProfilerStep with a labelled layer, a qkv GEMM forward and its two
backward GEMMs, flash attention, an NCCL all-reduce on its own stream, the optimizer.
Times in microseconds (Kineto's unit)."""
from __future__ import annotations


def kineto_events(rank: int = 0, *, typed: bool = False) -> dict:
    """The trace as a dict. ``typed`` adds the optional argument fields newer profilers
    write (input dtypes, SDPA's concrete inputs), which the reader must also accept."""
    cpu, gpu = {"pid": 100, "tid": 1}, {"pid": 0, "tid": 7}
    ev: list[dict] = []

    def op(name, t0, t1, cat="cpu_op", **args):
        ev.append({"ph": "X", "cat": cat, "name": name, "ts": t0, "dur": t1 - t0, **cpu, "args": args})

    def launch(corr, t0, kname, k0, k1, stream=7, **kargs):
        ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": t0, "dur": 5, **cpu,
                   "args": {"correlation": corr}})
        ev.append({"ph": "X", "cat": "kernel", "name": kname, "ts": k0, "dur": k1 - k0, "pid": gpu["pid"],
                   "tid": stream, "args": {"correlation": corr, "stream": stream, "device": 0, **kargs}})

    dtypes = {"Input type": ["c10::BFloat16"] * 3} if typed else {}
    sdpa = {"Concrete Inputs": ["", "", "", "", "0.", "True"]} if typed else {}
    op("ProfilerStep#4", 0, 10000, cat="user_annotation")
    op("layer.0.fwd", 10, 400, cat="user_annotation")
    # qkv of 512 tokens (b=2, s=256), hidden 256: y[512, 768] = x[512, 256] @ W^T.
    op("aten::linear", 20, 100, **{"Input Dims": [[2, 256, 256], [768, 256], [768]], "Sequence number": 4})
    op("aten::addmm", 25, 95, **{"Input Dims": [[768], [512, 256], [256, 768]], "Sequence number": 5, **dtypes})
    launch(1, 30, "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_32x5_tn", 1000, 2500)
    op("aten::scaled_dot_product_attention", 150, 250,
       **{"Input Dims": [[2, 4, 128, 64]] * 3, "Sequence number": 6, **sdpa})
    launch(2, 160, "void flash_fwd_kernel<Flash_fwd_kernel_traits<64>>(Flash_fwd_params)", 2500, 3000)
    op("autograd::engine::evaluate_function: AddmmBackward0", 500, 700, **{"Sequence number": 5})
    op("AddmmBackward0", 505, 695, **{"Sequence number": 5})
    op("aten::mm", 510, 550, **{"Input Dims": [[512, 768], [768, 256]]})  # dX = dY @ W
    launch(3, 520, "sm80_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x32", 3000, 4000)
    op("aten::mm", 560, 600, **{"Input Dims": [[768, 512], [512, 256]]})  # dW = dY^T @ X
    launch(4, 570, "sm80_xmma_gemm_bf16bf16_bf16f32_f32_nt_n_tilesize128x128x32", 4000, 5000)
    op("record_param_comms", 800, 850, **{"Collective name": "allreduce", "In msg nelems": 1048576,
                                          "Out msg nelems": 1048576, "dtype": "BFloat16", "Group size": 2,
                                          "Process Group Description": "TENSOR_MODEL_PARALLEL_GROUP"})
    launch(5, 810, "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", 4500, 6500,
           stream=20)
    op("Optimizer.step#AdamW.step", 900, 1000, cat="user_annotation")
    launch(6, 910, "void at::native::multi_tensor_apply_kernel<FusedAdamMathFunctor>", 6500, 7500)
    return {"schemaVersion": 1, "distributedInfo": {"rank": rank}, "traceEvents": ev}
