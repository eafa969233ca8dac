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
- DualPipe is run as DualPipeV (``--pipeline-schedule dualpipev``; deepseek-ai/DualPipe,
  dualpipev.py), the V-shape cut of DualPipe with the same bubble formula for the same number
  of stages ((S/2 - 1)(F&B + B - 3W), the DualPipe README's table): each of the 16 ranks runs
  two of 32 virtual stages, rank r the r-th from the start and from the end, so rank 0 holds
  the embedding and the loss, as DualPipe puts "the shallowest layers (including the embedding
  layer) and deepest layers (including the output head) of the model on the same PP rank"
  (report Sec. 3.2.1). Its steady state runs each forward beside another micro-batch's
  backward with the EP all-to-alls hidden under the other's compute, as DualPipe does, and its
  warm-up and cool-down split some backwards into input and weight gradients (zero bubble,
  engine/zero_bubble.py). Not modelled: DualPipe's two parameter copies (DualPipeV holds one);
- the layout: the 61 layers (the first 3 dense) and the MTP module over the 32 virtual
  stages so that no rank does more work than a rank of four MoE layers: rank 0 holds the
  embedding, one dense layer, the MTP module and the loss (its compute per micro-batch is
  printed beside the middle ranks'); DualPipe runs 15,360 sequences as 120 micro-batches per
  pipeline exactly;
- beside it, Megatron's interleaved schedule (two chunks per rank) with and without its EP
  all-to-all overlap (--overlap-moe-expert-parallel-comm --delay-wgrad-compute): it needs
  micro-batches divisible by PP, so 128 per pipeline (16,384 sequences) are simulated and the
  step scaled to 15,360 sequences by tokens; its layout keeps the loss on the last rank;
- DeepEP (flex dispatcher), group-limited routing (8 groups = 8 nodes, top 4), fused token
  permutation (DeepSeek's own kernels; --moe-permute-fusion);
- FP8 as per-tensor (tensorwise) scaling: DeepSeek's own GEMMs (DeepGEMM) apply the report's
  1x128 / 128x128 block scales at per-tensor speed (deepseek-ai/DeepGEMM README: up to 1,550
  TFLOPS on H800, 1,346 for the grouped MoE GEMMs), which Transformer Engine's blockwise
  recipe on Hopper does not (compute_profile estimator gemm.blockwise_fp8_rate); the
  tensorwise recipe's GEMM rate and casts stand in for DeepGEMM's;
- RMSNorm recompute under fp8 is not modelled: only the MLA up-projections are recomputed;
- routing: DeepSeek's auxiliary-loss-free balancing is learned routing, so the busiest EP rank
  carries the learned-routing prior (workload_gen.core.moe_routing, 1.23x the mean); a row
  shows the run with routing as even as random routing (--moe-router-force-load-balancing),
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
INTERLEAVED_SEQUENCES = 16384
"""Megatron's interleaved schedule: 128 micro-batches per pipeline (a multiple of PP = 16)."""

COMMON = [
    "--model", "deepseek-v3", "--world-size", str(GPUS), "--tp", "1", "--pp", "16", "--vpp", "2", "--ep", "64",
    "--mtp-num-layers", "1", "--seq-length", str(SEQ), "--micro-batch-size", "1",
    "--bf16", "--fp8-format", "e4m3", "--fp8-recipe", "tensorwise",
    "--use-distributed-optimizer", "--overlap-grad-reduce", "--overlap-param-gather",
    "--moe-token-dispatcher-type", "flex", "--moe-flex-dispatcher-backend", "deepep",
    "--moe-router-num-groups", "8", "--moe-router-group-topk", "4", "--moe-permute-fusion",
    "--recompute-granularity", "selective", "--recompute-modules", "mla_up_proj",
]
DUALPIPE_LAYOUT = "Et|tt|(tt|)*28tt|mL"
"""The 32 virtual stages in data-flow order; under DualPipeV rank r runs stages r and 31 - r,
so rank 0 runs 'Et' and 'mL' (the embedding, the first dense layer, the MTP module, the
loss), rank 1 'tt' (dense) and 'tt' (MoE), every other rank four MoE layers."""
DUALPIPE = COMMON + ["--pipeline-schedule", "dualpipev", "--pipeline-model-parallel-layout", DUALPIPE_LAYOUT,
                     "--global-batch-size", str(SEQUENCES)]
FLAGS = COMMON + ["--pipeline-model-parallel-layout", "Ett|(tt|)*14t|(tt|)*15mL",
                  "--global-batch-size", str(INTERLEAVED_SEQUENCES)]
"""Megatron's interleaved schedule with its last rank holding the MTP module and the loss."""
OVERLAP = ["--overlap-moe-expert-parallel-comm", "--delay-wgrad-compute"]
BALANCED = ["--moe-router-force-load-balancing"]


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
    runs = (("DualPipeV", DUALPIPE, SEQUENCES),
            ("DualPipeV, routing as even as random", DUALPIPE + BALANCED, SEQUENCES),
            ("Megatron interleaved + EP overlap", FLAGS + OVERLAP, INTERLEAVED_SEQUENCES),
            ("Megatron interleaved, no overlap", FLAGS, INTERLEAVED_SEQUENCES))
    for label, flags, simulated in runs:
        r = simulate(flags)
        step = r.iteration_time_s * SEQUENCES / simulated
        ep = r.breakdown.exposed_comm_s.get("ep", 0.0) / r.iteration_time_s
        fits = all(m.reserved_peak <= r.system.gpu_spec.memory_bytes for m in r.memory)
        rows.append((label, r.iteration_time_s, step, step / ref - 1, ep, fits, r))
    if args.markdown:
        print("| run | step s (15,360 seq) | vs 19.90 s | exposed all-to-all | pipeline bubble |")
        print("|---|---|---|---|---|")
        for label, _, step, err, ep, _, r in rows:
            print(f"| {label} | {step:.2f} | {err:+.1%} | {ep:.1%} of the step | "
                  f"{r.breakdown.bubble_s / r.iteration_time_s:.1%} |")
        return 0
    print(f"DeepSeek-V3 report: {GPU_HOURS:.4g} H800 GPU-hours / {TOKENS:.3g} tokens -> {ref:.2f} s per step of "
          f"{SEQUENCES} x {SEQ} tokens on {GPUS} GPUs")
    for label, _, step, err, ep, fits, r in rows:
        print(f"{label:38s} {step:6.2f} s per step ({err:+.1%}); exposed all-to-all {ep:.1%}, bubble "
              f"{r.breakdown.bubble_s / r.iteration_time_s:.1%} of the step"
              f"{'' if fits else '; memory: does not fit (see run-analytical)'}")
    compute = [b.compute_s for b in rows[0][6].stage_breakdowns]
    print(f"DualPipeV compute per rank: rank 0 {compute[0]:.2f} s, rank 1 {compute[1]:.2f} s, the others "
          f"{min(compute[2:]):.2f}-{max(compute[2:]):.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
