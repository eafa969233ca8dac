"""``gen-workload``: model + Megatron-style settings -> a workload file.

A thin layer: parse flags (shared with the other commands through
:func:`engine.commands.config_flags.add_config_arguments`), build, optionally attach
compute times, write. Progress and the summary go to stderr.
"""
from __future__ import annotations

import argparse
import sys
from collections import defaultdict

from engine.commands.parser import OneLineParser, run_cli
from engine.commands.vocab import add_out, add_profile, add_quiet, warn_unmodelled
from engine.commands.config_flags import add_config_arguments, configs_from_args
from workload_gen.core.errors import ConfigError
from workload_gen.core.records import CollectiveOp, ComputeOp, Workload


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(
        prog="gen-workload",
        description="Generate the per-stage workload (compute ops and collectives) of one Megatron-LM "
                    "training iteration. Give a YAML run file (-c), short flags, or Megatron-LM's own flags.",
        epilog="Example: gen-workload --model gpt3-175b --tp 8 --pp 8 --world-size 1024 --global-batch 1536 "
               "--micro-batch 1 --seq-length 2048 --sp -o w.txt",
    )
    add_config_arguments(p)
    out = p.add_argument_group("output")
    add_out(out, metavar="FILE", default="workload.txt", help="workload file to write (default: workload.txt)")
    out.add_argument("--format", choices=("native", "simai"), default="native",
                     help="native (trainsim text, all stages) or simai (SimAI/AICB text, one stage)")
    out.add_argument("--stage", type=int, default=0, metavar="N", help="pipeline stage for --format simai (default 0)")
    out.add_argument("--gpu", metavar="NAME",
                     help=f"attach compute times for this GPU (--format simai needs times: default {SIMAI_DEFAULT_GPU})")
    add_profile(out, help="kernel-time SQLite database for --gpu (default: roofline estimates only)")
    add_quiet(out, help="no summary on stderr (warnings and errors still print)")
    return p


def summary(w: Workload) -> str:
    """A few lines: parameters, ops per stage, collective bytes per group and phase."""
    par = w.parallel
    mtp = ""
    if w.model.mtp_num_layers:  # counted apart, as DeepSeek-V3 reports 671B + the MTP module
        from workload_gen.core.params import mtp_params

        mtp = f" + {w.model.mtp_num_layers} MTP module(s) {mtp_params(w.model) / 1e9:.3f}B"
    lines = [
        f"{w.model.name}: {w.params_total / 1e9:.3f}B params{mtp}; tp={par.tp} sp={int(par.sp)} pp={par.pp} vpp={par.vpp} "
        f"cp={par.cp} ep={par.ep} etp={par.expert_tp} dp={par.dp} world={par.world_size} "
        f"micro-batches={par.num_microbatches} x {par.micro_batch} x {par.seq_length} tokens",
    ]
    for st in w.stages:
        n_comp = n_coll = 0
        coll: dict[str, float] = defaultdict(float)
        for ch in st.chunks:
            for op in (*ch.forward, *ch.backward):
                if type(op) is ComputeOp:
                    n_comp += 1
                else:
                    n_coll += 1
                    coll[op.group.value] += op.bytes
        it = defaultdict(float)
        for op in st.iteration:
            if isinstance(op, CollectiveOp):
                it[op.group.value] += op.bytes
        per_mb = " ".join(f"{g}={b / 2**20:.1f}MiB" for g, b in sorted(coll.items())) or "none"
        per_it = " ".join(f"{g}={b / 2**20:.1f}MiB" for g, b in sorted(it.items())) or "none"
        lines.append(
            f"  stage {st.stage}: {st.params / 1e9:.3f}B params/rank ({st.dense_params / 1e9:.3f}B dense); "
            f"{n_comp} compute + {n_coll} collective ops per micro-batch; comm per micro-batch: {per_mb}; "
            f"per iteration: {per_it}"
        )
    return "\n".join(lines)


SIMAI_DEFAULT_GPU = "h100"


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)

    def body() -> int:
        from formats.output_paths import check_not_an_input
        from workload_gen.builder import build

        check_not_an_input(args.out, "-o", (("-c", getattr(args, "config", None)),
                                            ("--hf-config", getattr(args, "hf_config", None)),
                                            ("--profile", getattr(args, "profile", None))))
        model, par = configs_from_args(args)
        if not 0 <= args.stage < par.pp:
            raise ConfigError("stage", args.stage, f"valid: 0..{par.pp - 1} (pp={par.pp})")
        workload = build(model, par)
        warn_unmodelled(par, "gen-workload")
        coverage = None
        if args.format == "simai" and not args.gpu:
            # SimAI's format carries compute times; without --gpu use the estimator's default GPU.
            args.gpu = SIMAI_DEFAULT_GPU
            if not args.quiet:
                print(f"--format simai: compute times for --gpu {SIMAI_DEFAULT_GPU} (pass --gpu to choose)",
                      file=sys.stderr)
        if args.gpu:
            from compute_profile import attach  # lazy: only with --gpu

            workload, coverage = attach(workload, args.gpu, args.profile)
        elif args.profile:
            raise ConfigError("profile", args.profile, "needs --gpu NAME")
        if args.format == "simai":
            from formats.simai_writer import write_simai  # lazy: SimAI export only

            write_simai(workload, args.out, stage=args.stage)
        else:
            from formats.native import write_native

            write_native(workload, args.out)
        if not args.quiet:
            print(summary(workload), file=sys.stderr)
            if coverage is not None:
                shares = " ".join(f"{k}={coverage.share(k):.0%}" for k in ("measured", "scaled", "imported", "estimated"))
                print(f"compute times for {args.gpu}: {shares} of {coverage.total_s:.3f} s per iteration", file=sys.stderr)
            print(f"wrote {args.out} ({args.format})", file=sys.stderr)
        return 0

    return run_cli(body)


if __name__ == "__main__":
    sys.exit(main())
