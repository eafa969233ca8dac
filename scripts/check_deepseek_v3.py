"""DeepSeek-V3 as its report describes it, against the step time its GPU-hours imply.

The report (DeepSeek-AI, arXiv 2412.19437) trains on 2048 H800 GPUs (Sec. 3.1) with 16-way
pipeline parallelism (DualPipe), 64-way expert parallelism over 8 nodes, ZeRO-1 data
parallelism and no tensor parallelism (Sec. 3.2), node-limited routing to at most 4 nodes
(Sec. 2.1.2), FP8 training with 1x128 / 128x128 block scaling (Sec. 3.3), one MTP module
(Sec. 2.2), sequence length 4096 and a batch of 15,360 sequences after the ramp-up
(Sec. 4.2), and recomputes RMSNorm and the MLA up-projections (Sec. 3.2.3). Pre-training took
2,664K H800 GPU-hours for 14.8T tokens (Table 1), i.e.

    2.664e6 h * 3600 s/h / 14.8e12 tokens * (15,360 * 4096) tokens / 2048 GPUs = 19.90 s

per step, an upper bound on the pure step time (the GPU-hours include everything else).

What the simulator is given, and where it differs from the report:
- DualPipe is not Megatron's; its closest Megatron schedule is the interleaved one with two
  chunks per rank (DualPipe's two directions) and the EP all-to-all overlap
  (--overlap-moe-expert-parallel-comm --delay-wgrad-compute), which overlaps one
  micro-batch's forward with another's backward as DualPipe does;
- the interleaved schedule needs micro-batches divisible by PP: 128 per pipeline (16,384
  sequences) are simulated and the step is scaled to 15,360 sequences by tokens;
- the layout puts the embedding with two dense layers first and the MTP module with the
  loss alone last, so that the stage holding the output head is not the bottleneck
  (DualPipe puts the shallowest and deepest layers on one rank for the same reason);
- DeepEP (flex dispatcher), group-limited routing (8 groups = 8 nodes, top 4);
- FP8 as per-tensor (tensorwise) scaling: DeepSeek's own GEMMs (DeepGEMM) apply the report's
  1x128 / 128x128 block scales at per-tensor speed (deepseek-ai/DeepGEMM README: up to 1,550
  TFLOPS on H800, 1,346 for the grouped MoE GEMMs), which Transformer Engine's blockwise
  recipe on Hopper does not (compute_profile estimator gemm.blockwise_fp8_rate); the
  tensorwise recipe's GEMM rate and casts stand in for DeepGEMM's;
- RMSNorm recompute under fp8 is not modelled: only the MLA up-projections are recomputed;
- routing: DeepSeek's auxiliary-loss-free balancing is learned routing, so the busiest EP rank
  carries the learned-routing prior (workload_gen.core.moe_routing, 1.23x the mean); a third
  row shows the run with routing as even as random routing (--moe-router-force-load-balancing),
  the best balance the bias-based scheme could reach.

Usage: python scripts/check_deepseek_v3.py [--markdown]
Units: seconds.
"""
from __future__ import annotations

import argparse
import sys

GPU_HOURS = 2.664e6
"""Pre-training H800 GPU-hours (arXiv 2412.19437, Table 1)."""
TOKENS = 14.8e12
"""Pre-training tokens (Sec. 4.2)."""
SEQUENCES, SEQ, GPUS = 15360, 4096, 2048
SIMULATED_SEQUENCES = 16384
"""128 micro-batches per pipeline (the interleaved schedule needs a multiple of PP = 16)."""

FLAGS = [
    "--model", "deepseek-v3", "--world-size", str(GPUS), "--tp", "1", "--pp", "16", "--vpp", "2", "--ep", "64",
    "--pipeline-model-parallel-layout", "Ett|(tt|)*14t|(tt|)*15mL", "--mtp-num-layers", "1",
    "--seq-length", str(SEQ), "--micro-batch-size", "1", "--global-batch-size", str(SIMULATED_SEQUENCES),
    "--bf16", "--fp8-format", "e4m3", "--fp8-recipe", "tensorwise",
    "--use-distributed-optimizer", "--overlap-grad-reduce", "--overlap-param-gather",
    "--moe-token-dispatcher-type", "flex", "--moe-flex-dispatcher-backend", "deepep",
    "--moe-router-num-groups", "8", "--moe-router-group-topk", "4",
    "--recompute-granularity", "selective", "--recompute-modules", "mla_up_proj",
]
OVERLAP = ["--overlap-moe-expert-parallel-comm", "--delay-wgrad-compute"]


def implied_step_s() -> float:
    """The step time the report's GPU-hours imply (module docstring)."""
    return GPU_HOURS * 3600 / TOKENS * SEQUENCES * SEQ / GPUS


def simulate(flags: list[str]):
    """The run's RunResult on the h800 system, as run-analytical would produce it."""
    from engine.commands.config_flags import add_config_arguments, configs_from_args
    from engine.commands.parser import OneLineParser
    from engine.pipeline import run_analytical

    parser = OneLineParser(prog="check_deepseek_v3")
    add_config_arguments(parser)
    model, par = configs_from_args(parser.parse_args(flags))
    return run_analytical(model, par, "h800", timeline=False)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--markdown", action="store_true", help="the docs table")
    args = ap.parse_args(argv)
    ref = implied_step_s()
    rows = []
    runs = (("with the EP all-to-all overlap", FLAGS + OVERLAP), ("without it", FLAGS),
            ("overlap, routing as even as random", FLAGS + OVERLAP + ["--moe-router-force-load-balancing"]))
    for label, flags in runs:
        r = simulate(flags)
        step = r.iteration_time_s * SEQUENCES / SIMULATED_SEQUENCES
        ep = r.breakdown.exposed_comm_s.get("ep", 0.0) / r.iteration_time_s
        fits = all(m.reserved_peak <= r.system.gpu_spec.memory_bytes for m in r.memory)
        rows.append((label, r.iteration_time_s, step, step / ref - 1, ep, fits))
    if args.markdown:
        print("| run | simulated s (16,384 seq) | step s (15,360 seq) | vs 19.90 s | exposed all-to-all |")
        print("|---|---|---|---|---|")
        for label, sim, step, err, ep, _ in rows:
            print(f"| {label} | {sim:.2f} | {step:.2f} | {err:+.1%} | {ep:.1%} of the step |")
        return 0
    print(f"DeepSeek-V3 report: {GPU_HOURS:.4g} H800 GPU-hours / {TOKENS:.3g} tokens -> {ref:.2f} s per step of "
          f"{SEQUENCES} x {SEQ} tokens on {GPUS} GPUs")
    for label, sim, step, err, ep, fits in rows:
        print(f"{label:32s} {sim:7.2f} s for {SIMULATED_SEQUENCES} sequences -> {step:6.2f} s per step ({err:+.1%}); "
              f"exposed all-to-all {ep:.1%} of the step{'' if fits else '; memory: does not fit (see run-analytical)'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
