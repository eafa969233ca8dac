"""Whole-pipeline accuracy against real measurements (shared/data/real/).

Runs build -> attach (compute estimates, no profile DB) -> simulate (analytical backend)
for every row of

* megatron_a100_2021_weak_scaling.csv: GPT 1.7B-1T on A100 80GB (Selene); the table
  gives achieved TFLOP/s per GPU, which we turn into a measured step time with the
  paper's own FLOP count (Narayanan et al. 2021, eq. 3, activation recomputation included):
  F = 96 * B * s * l * h^2 * (1 + s/(6h) + V/(16*l*h)),  t = F / (TFLOP/s * GPUs);
* b200_megatron_measured.csv: Llama-3 70B (12 layers) and DeepSeek-V2 (4 layers) on one
  8x B200 node: step time, and peak allocated / reserved memory (max over ranks);

and prints predicted vs measured with the relative error per row, then the median and
max absolute error for step time and for memory. The assumptions the sources force
(TP/PP split, heads, recompute, ...) are listed in docs/validation.md.

Usage: python scripts/validate.py [--markdown]
"""
from __future__ import annotations

import argparse
import csv
import statistics
import sys
from dataclasses import dataclass, replace
from pathlib import Path

DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "real"

# Megatron-LM 2021 (Narayanan et al., SC'21, Table 1): attention heads per model size; the CSV
# omits them. TP/PP: the paper's split, which is Megatron's practice of TP inside a node
# (TP = min(8, product)) and PP for the rest.
A100_HEADS = {"1.7B": 24, "3.6B": 32, "7.5B": 32, "18B": 48, "39B": 64, "76B": 80, "145B": 96,
              "310B": 128, "530B": 128, "1T": 160}


@dataclass(frozen=True, slots=True)
class Case:
    label: str
    system: str
    model: object
    parallel: object
    step_s: float
    mem_alloc: float | None = None
    mem_reserved: float | None = None


@dataclass(frozen=True, slots=True)
class Row:
    label: str
    metric: str
    predicted: float
    measured: float

    @property
    def error(self) -> float:
        return self.predicted / self.measured - 1


def megatron_flops(gbs: int, seq: int, layers: int, hidden: int, vocab: int) -> float:
    """Narayanan et al. 2021, eq. 3: FLOPs per iteration with full activation recomputation."""
    return 96 * gbs * seq * layers * hidden**2 * (1 + seq / (6 * hidden) + vocab / (16 * layers * hidden))


def a100_cases() -> list[Case]:
    from workload_gen.model_config import ModelConfig
    from workload_gen.parallel_config import ParallelConfig

    cases = []
    with open(DATA / "megatron_a100_2021_weak_scaling.csv", newline="") as fh:
        for r in csv.DictReader(fh):
            h, l_, gpus = int(r["hidden_size"]), int(r["num_layers"]), int(r["num_gpus"])
            gbs, seq, vocab = int(r["global_batch_size"]), int(r["seq_len"]), int(r["vocab_size"])
            mp = int(r["model_parallel_size_tp_x_pp"])
            tp = min(8, mp)
            pp = mp // tp
            model = ModelConfig(
                name=f"gpt-{r['model_size']}", source="Narayanan et al. 2021 Table 1", num_layers=l_,
                hidden_size=h, num_attention_heads=A100_HEADS[r["model_size"]], vocab_size=vocab,
                max_position_embeddings=seq, activation="gelu", normalization="layernorm",
                position_embedding="learned", add_bias_linear=True, tied_embeddings=True)
            par = ParallelConfig(world_size=gpus, tp=tp, pp=pp, micro_batch=1, global_batch=gbs, seq_length=seq,
                                 dtype="fp16", recompute="full", distributed_optimizer=False,
                                 make_vocab_size_divisible_by=128)
            step = megatron_flops(gbs, seq, l_, h, vocab) / (float(r["achieved_tflops_per_gpu"]) * 1e12 * gpus)
            cases.append(Case(f"A100 GPT {r['model_size']} tp{tp} pp{pp} {gpus}g", "a100", model, par, step))
    return cases


def b200_cases() -> list[Case]:
    from workload_gen.model_presets import get_preset
    from workload_gen.parallel_config import ParallelConfig

    presets = {"llama3-70b": "llama3-70b", "deepseekv2": "deepseek-v2"}
    cases = []
    with open(DATA / "b200_megatron_measured.csv", newline="") as fh:
        for r in csv.DictReader(fh):
            model = get_preset(presets[r["model"]])
            model = replace(model, num_layers=int(r["layer_num"]),
                            **({"num_dense_layers": int(r["dense_layers"])} if r["dense_layers"] else {}))
            tp, pp, ep = int(r["tp"]), int(r["pp"]), int(r["ep"])
            par = ParallelConfig(world_size=int(r["gpus"]), tp=tp, pp=pp, ep=ep, cp=int(r["cp"]), vpp=int(r["vp"]),
                                 sp=tp > 1, micro_batch=int(r["mbs"]), global_batch=int(r["gbs"]),
                                 seq_length=int(r["seq_len"]), dtype="bf16", recompute="none",
                                 distributed_optimizer=True)
            assert par.dp == int(r["dp"]) and par.num_microbatches == int(r["micro_batch_num"]), r
            gib = 2**30
            cases.append(Case(
                f"B200 {r['model']} l{r['layer_num']} tp{tp} pp{pp} ep{ep} m{r['micro_batch_num']}", "b200", model, par,
                float(r["real_step_time_ms"]) * 1e-3, float(r["real_mem_alloc_gib"]) * gib,
                float(r["real_mem_reserved_gib"]) * gib))
    return cases


def run_cases(cases: list[Case]) -> list[Row]:
    from engine.pipeline import run_analytical

    rows = []
    for c in cases:
        res = run_analytical(c.model, c.parallel, c.system, timeline=False)
        rows.append(Row(c.label, "step_time_s", res.iteration_time_s, c.step_s))
        if c.mem_alloc is not None:
            rows.append(Row(c.label, "mem_alloc_bytes", max(m.allocated_peak for m in res.memory), c.mem_alloc))
        if c.mem_reserved is not None:
            rows.append(Row(c.label, "mem_reserved_bytes", max(m.reserved_peak for m in res.memory), c.mem_reserved))
    return rows


def stats(rows: list[Row]) -> tuple[float, float]:
    errs = [abs(r.error) for r in rows]
    return (statistics.median(errs), max(errs)) if errs else (float("nan"), float("nan"))


def validate() -> dict[str, list[Row]]:
    rows = run_cases(a100_cases() + b200_cases())
    return {
        "step_time": [r for r in rows if r.metric == "step_time_s"],
        "memory": [r for r in rows if r.metric.startswith("mem_")],
        "a100_step_time": [r for r in rows if r.metric == "step_time_s" and r.label.startswith("A100")],
        "b200_step_time": [r for r in rows if r.metric == "step_time_s" and r.label.startswith("B200")],
    }


def _fmt(metric: str, v: float) -> str:
    return f"{v:.4f} s" if metric.endswith("_s") else f"{v / 2**30:.2f} GiB"


def render(groups: dict[str, list[Row]], markdown: bool = False) -> str:
    out = []
    if markdown:
        out.append("| case | metric | predicted | measured | error |")
        out.append("|---|---|---|---|---|")
    for key in ("step_time", "memory"):
        for r in groups[key]:
            if markdown:
                out.append(f"| {r.label} | {r.metric} | {_fmt(r.metric, r.predicted)} | {_fmt(r.metric, r.measured)} "
                           f"| {r.error:+.1%} |")
            else:
                out.append(f"{r.label:44s} {r.metric:18s} predicted {_fmt(r.metric, r.predicted):>12s}  measured "
                           f"{_fmt(r.metric, r.measured):>12s}  error {r.error:+7.1%}")
    out.append("")
    for key in ("step_time", "a100_step_time", "b200_step_time", "memory"):
        med, mx = stats(groups[key])
        line = f"{key}: median |error| {med:.1%}, max |error| {mx:.1%} over {len(groups[key])} rows"
        out.append(f"- {line}" if markdown else line)
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--markdown", action="store_true", help="print a Markdown table (for docs/validation.md)")
    args = ap.parse_args(argv)
    sys.stdout.write(render(validate(), args.markdown))
    return 0


if __name__ == "__main__":
    sys.exit(main())
