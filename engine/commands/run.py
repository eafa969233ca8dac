"""``run-analytical`` and ``run-ns3``: one run command, parameterised by the network backend.

The backend is a registered kind (network.registry): it declares its own options as data
(``--busbw`` for analytical; the fabric and transport for ns-3), which this command turns
into flags and hands back to the kind as plain values; the kind builds itself from them and
writes its own extra files (fct.csv, links.csv for ns-3). Everything else is shared: the
workload (a file or model/parallel flags), the system, compute times, the outputs.

This module holds the command's argument handling, printing and writing; what the run
computes comes from the library: the simulation (engine.pipeline), the per-layer accounting
(engine.accounting), SimAI's report in our units (engine.simai_report), and the file texts
(formats.run_outputs and the other writers).

Three ways in:

* ``run-analytical WORKLOAD --system h100 --out DIR``: a native workload file
  (gen-workload's output) or a SimAI/AICB text file (detected by its policy word);
* ``run-analytical --system h100 <gen-workload's flags or -c YAML> --out DIR``:
  generate in-process and simulate (the sweep path);
* ``run-analytical --out DIR``: the built-in default configuration, end to end.

SimAI files take SimAI_analytical's cluster flags (``--gpus 9216 --gpus-per-node 8
--nvlink-busbw 360 --nic-busbw 48.5 --nics-per-node 8``, GB/s with GB = 2^30 bytes), and
``--accounting simai`` reproduces SimAI's own report instead of our event simulation.
Results go to DIR (summary.json, layers.csv, trace.json, EndToEnd.csv, run.png), all
rendered in memory first and swapped in as one directory (a failure leaves the previous
run whole; formats.atomic_directory.write_directory); a readable table (or ``--json``,
summary.json itself) goes to stdout, progress to stderr.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.commands.parser import OneLineParser, run_cli
from engine.commands.vocab import add_out, add_profile, add_quiet, inform, warn_unmodelled
from engine.simai_report import SIMAI_FILL_FLAGS
from formats.simai_reader import is_simai_file
from workload_gen.core.errors import ConfigError
from workload_gen.core.system import SYSTEMS
from workload_gen.core.units import GiB as GIB

if TYPE_CHECKING:
    from network.backend import BackendKind

DEFAULT_SYSTEM = "h100"
OUTPUT_FILES = ("summary.json", "layers.csv", "trace.json", "EndToEnd.csv", "run.png")


def known_output_files() -> tuple[str, ...]:
    """Every name a run command or a built-in backend writes into --out (run-ns3 adds
    fct.csv and links.csv). A rerun removes those it does not write; other files stay."""
    from network.registry import BUILTIN_KINDS, backend_kind

    extras = [f for name in BUILTIN_KINDS for f in backend_kind(name).output_files]
    return (*OUTPUT_FILES, *dict.fromkeys(extras))


def add_run_arguments(ap: argparse.ArgumentParser) -> None:
    """The inputs and outputs every simulating command shares (run-analytical, run-ns3)."""
    ap.add_argument("workload", nargs="?", metavar="WORKLOAD",
                    help="workload file: native (gen-workload) or SimAI/AICB text; omit to generate from flags")
    ap.add_argument("--system", default=DEFAULT_SYSTEM, metavar="NAME|YAML",
                    help=f"system preset ({', '.join(SYSTEMS)}) or YAML file; default {DEFAULT_SYSTEM}")
    add_out(ap, metavar="DIR", help="output directory (created); without it only stdout")
    ap.add_argument("--json", action="store_true", help="print summary.json to stdout instead of the table")
    add_profile(ap, help="compute profile database (compute-profile); default: estimates")
    add_quiet(ap, help="no progress lines on stderr (warnings and errors still print)")
    ap.add_argument("--strict", action="store_true",
                    help="exit with status 3 when the plan does not fit in GPU memory (it always prints a warning)")
    ap.add_argument("--gpu", metavar="NAME", help="GPU whose compute times to use; default the system's")
    ap.add_argument("--efficiency", metavar="YAML",
                    help="collective efficiency table (default network/data/efficiency.yaml); run-ns3 uses its "
                         "half_time_s as each call's fixed start cost and its NVLink peak_fraction to derate NVLink")
    ap.add_argument("--no-plot", action="store_true", help="skip run.png (saves ~0.5 s of matplotlib)")
    ap.add_argument("--no-trace", action="store_true", help="skip the timeline (trace.json, layers from the workload)")
    ap.add_argument("--trace-microbatches", default="8", metavar="N|all",
                    help="micro-batches trace.json shows: the first and last N/2 (warm-up and cool-down; "
                         "default 8), or all")


SIMAI_OVERLAP_DEFAULTS = {"dp_overlap": 0.0, "tp_overlap": 0.0, "ep_overlap": 0.0, "pp_overlap": 1.0}
"""SimAI_analytical's -dp_o -tp_o -ep_o -pp_o defaults."""


def add_simai_cluster_arguments(ap: argparse.ArgumentParser) -> argparse._ArgumentGroup:
    """SimAI's cluster flags, for SimAI workload files (run-analytical, run-ns3)."""
    s = ap.add_argument_group("SimAI cluster flags (for SimAI files; GB = 2^30 bytes)")
    s.add_argument("--gpus", type=int, metavar="N", help="SimAI -g: total GPUs (default: the file's all_gpus)")
    s.add_argument("--gpus-per-node", type=int, metavar="N", help="GPUs per node (SimAI -g_p_s; default: the system's)")
    s.add_argument("--nvlink-busbw", type=float, metavar="GB/s", help="SimAI -nv: NVLink bus bandwidth")
    s.add_argument("--nic-busbw", type=float, metavar="GB/s", help="SimAI -nic: bandwidth of one NIC")
    s.add_argument("--nics-per-node", type=int, metavar="N", help="NICs per node (SimAI -n_p_s)")
    return s


RUN_COMMANDS = {
    "analytical": ("run-analytical",
                   "Simulate one training iteration (analytical network backend): iteration time, "
                   "breakdown, memory, timeline.",
                   "Examples: run-analytical --out run | run-analytical --model gpt3-175b --tp 8 --pp 8 "
                   "--world-size 1024 --global-batch 1536 --system h100 --out run | run-analytical "
                   "workload_analytical.txt --gpus 9216 --gpus-per-node 8 --nvlink-busbw 360 --nic-busbw 48.5 "
                   "--nics-per-node 8 --out run"),
    "ns3": ("run-ns3",
            "Simulate one training iteration with every collective's flows on an ns-3 packet network "
            "(congestion, ECMP collisions, oversubscription).",
            "Example: run-ns3 --model gpt3-1.3b --num-layers 4 --tp 8 --world-size 16 --global-batch 16 "
            "--system h100 --out run"),
    "flow": ("run-flow",
             "Simulate one training iteration with every collective's flows sharing run-ns3's fabric at max-min "
             "fair rates (contention, ECMP collisions, oversubscription; no packets).",
             "Example: run-flow --model gpt3-1.3b --num-layers 4 --tp 8 --world-size 16 --global-batch 16 "
             "--system h100 --topology fat-tree --oversubscription 4 --out run"),
}
"""Backend name -> (program name, description, examples) of its run command."""

ACCOUNTING_BACKEND = "analytical"
"""``--accounting simai`` replaces the network model by SimAI's own busbw tables, so only
the analytical command offers it (a packet backend would be ignored)."""


def build_parser(backend: str = "analytical") -> argparse.ArgumentParser:
    from network.registry import backend_kind
    from engine.commands.config_flags import add_config_arguments

    prog, description, epilog = RUN_COMMANDS.get(backend, (f"run-{backend}", backend_kind(backend).description, ""))
    ap = OneLineParser(prog=prog, description=description, epilog=epilog)
    add_run_arguments(ap)
    if backend == ACCOUNTING_BACKEND:
        ap.add_argument("--accounting", choices=("event", "simai"), default="event",
                        help="event: our discrete-event simulation (default); simai: SimAI_analytical's own report "
                             "(SimAI files only)")
    add_backend_options(ap, backend_kind(backend))
    s = add_simai_cluster_arguments(ap)
    if backend == ACCOUNTING_BACKEND:
        for name, default in SIMAI_OVERLAP_DEFAULTS.items():
            flag = name.removesuffix("_overlap")
            s.add_argument(f"--{flag}-overlap", type=float, default=default, metavar="RATIO",
                           help=f"SimAI -{flag}_o, --accounting simai only (default {default})")
    add_config_arguments(ap)
    return ap


def add_backend_options(ap: argparse.ArgumentParser, kind: BackendKind) -> None:
    """The kind's options (network.backend.BackendOption data) as flags: in a group under
    the kind's title, or among the command's own when it has none."""
    target: Any = ap.add_argument_group(kind.options_title) if kind.options_title else ap
    for opt in kind.options:
        kw: dict[str, Any] = {"dest": opt.dest, "help": opt.help}
        if opt.action == "store_true":
            kw["action"] = "store_true"
        else:
            kw.update((k, v) for k, v in (("type", opt.type), ("choices", opt.choices), ("default", opt.default),
                                           ("metavar", opt.metavar)) if v is not None)
        target.add_argument(*opt.flags, **kw)


def backend_options(kind: BackendKind, args: argparse.Namespace) -> dict[str, Any]:
    """The parsed values of the kind's options, by dest: what the kind receives."""
    return {opt.dest: getattr(args, opt.dest) for opt in kind.options}


def has_model_flags(args: argparse.Namespace, allowed: tuple[str, ...] = ()) -> bool:
    """Any model/parallel flag given (``allowed``: dests not counted, e.g. a SimAI file's fill-ins)."""
    return bool(getattr(args, "config", None) or getattr(args, "model", None)
                or getattr(args, "hf_config", None)) or any(
        v is not None for k, v in vars(args).items() if k.startswith(("m_", "p_")) and k not in allowed)


def _simai_system(args: argparse.Namespace, base: Any, all_gpus: int | None) -> tuple[Any, int]:
    """Our SystemConfig from SimAI's cluster flags over the --system preset; and the GPU count."""
    from engine.simai_report import simai_system

    system = simai_system(base, gpus_per_node=args.gpus_per_node, nics_per_node=args.nics_per_node,
                          nvlink_busbw=args.nvlink_busbw, nic_busbw=args.nic_busbw)
    gpus = args.gpus if args.gpus is not None else all_gpus
    if not gpus:
        raise ConfigError("gpus", gpus, "give --gpus N (SimAI's -g): the file's header has no all_gpus")
    return system, gpus


def _simai_accounting_outputs(args: argparse.Namespace, path: Path, system: Any) -> tuple[dict[str, Any], dict[str, str | bytes]]:
    """SimAI_analytical's report for a SimAI file: summary.json, EndToEnd.csv, layers.csv."""
    from engine.simai_report import simai_cluster, simai_report
    from formats.run_outputs import simai_summary_dict
    from formats.simai_reader import read_simai

    sw = read_simai(path)
    system, gpus = _simai_system(args, system, sw.header.all_gpus)
    cluster = simai_cluster(system, gpus, nvlink_busbw=args.nvlink_busbw, nic_busbw=args.nic_busbw,
                            dp_o=args.dp_overlap, tp_o=args.tp_overlap, ep_o=args.ep_overlap, pp_o=args.pp_overlap)
    inform(args, f"SimAI accounting of {path} ({len(sw.records)} records, {gpus} GPUs)", "run-analytical")
    report = simai_report(sw, cluster)
    totals = report.totals_us()
    summary = simai_summary_dict(iteration_time_s=report.iteration_time_s, compute_s=report.compute_s,
                                 exposed_comm_s=report.exposed_comm_s, bubble_s=report.bubble_s, totals_us=totals,
                                 workload=str(path), header=sw.header, cluster=cluster, system=system)
    files: dict[str, str | bytes] = {"summary.json": json.dumps(summary, indent=2) + "\n"}
    if not args.out:  # the per-layer files are rendered only to be written
        return summary, files
    from formats.endtoend_csv import render_endtoend_csv
    from formats.run_outputs import simai_layers_csv

    files["EndToEnd.csv"] = render_endtoend_csv(totals, report.endtoend_rows(), name=path.name, run_name="Analytical")
    files["layers.csv"] = simai_layers_csv(report.layer_lines())
    return summary, files


def load_workload(args: argparse.Namespace, path: Path, system: Any, prog: str = "run-analytical") -> tuple[Any, Any]:
    """A workload from a file (native or SimAI, formats.workload_files) and the system to run it on.

    A SimAI file gets the sequence length and micro-batch of ``--seq-length`` and
    ``--micro-batch`` when given (the file has neither; they set the tokens per
    iteration); its ``meta['placeholders']`` (JSON) names the headline figures that remain the
    file's placeholders (:func:`simai_placeholders`)."""
    from formats.workload_files import open_workload

    wf = open_workload(path)
    if wf.format == "simai":
        from engine.simai_report import simai_placeholders
        from formats.simai_convert import simai_to_workload

        assert wf.simai is not None
        system, gpus = _simai_system(args, system, wf.header_gpus)
        inform(args, f"read SimAI workload {path} ({len(wf.simai.records)} records) for {gpus} GPUs", prog)
        fill = _simai_fill(args)
        workload = simai_to_workload(wf.simai, gpus=gpus, **fill)
        meta = dict(workload.meta)
        meta["placeholders"] = json.dumps(  # meta holds strings
            simai_placeholders(wf.simai, gpus, given_gpus=args.gpus is not None, fill=fill))
        return replace(workload, meta=meta), system
    inform(args, f"read workload {path}", prog)
    return wf.to_workload(), system


def _simai_fill(args: argparse.Namespace) -> dict[str, int]:
    return {k: getattr(args, f"p_{k}") for k in SIMAI_FILL_FLAGS if getattr(args, f"p_{k}", None) is not None}


def _check_simai_flags(args: argparse.Namespace, accounting: str) -> None:
    """Flags that a SimAI file's event run can or cannot use: one line each for those it cannot."""
    fill = _simai_fill(args)
    if fill and accounting == "simai":
        k = next(iter(fill))
        raise ConfigError(SIMAI_FILL_FLAGS[k], fill[k], "--accounting simai reproduces SimAI's report, which has "
                          "no tokens or throughput; the flag fills in the tokens of the event simulation "
                          "(drop --accounting simai)")
    if args.profile:
        raise ConfigError("--profile", args.profile, "a SimAI/AICB file carries compute times but no op shapes, "
                          "so no time can be looked up in a profile; simulate from the model's flags "
                          "(--model/--hf-config ... --profile DB) to use measured times")


def event_outputs(args: argparse.Namespace, result: Any,
                  placeholders: dict[str, Any] | None = None) -> tuple[dict[str, Any], dict[str, str | bytes]]:
    """The summary and the files of a simulated run; ``placeholders``: what a SimAI file's
    figures stand in for (summary.json's ``placeholders``)."""
    from formats.run_outputs import summary_dict

    simai = result.backend == "simai-accounting"
    summary = summary_dict(result, accounting="simai" if simai else "event")
    if placeholders:
        summary["placeholders"] = placeholders
        if "memory" in placeholders:  # no model in the file: its memory figures say nothing
            summary["fits"] = None
    files: dict[str, str | bytes] = {}
    if args.out or args.json:  # rendered only for a reader
        files["summary.json"] = json.dumps(summary, indent=2) + "\n"
    if args.out:  # the file renderers load only when there are files to render
        from engine.accounting import endtoend_tables, layer_rows
        from formats.chrome_trace import trace_json
        from formats.endtoend_csv import EVENT_BUSBW_NOTE, render_endtoend_csv
        from formats.run_outputs import layers_csv

        rows = layer_rows(result)  # once, for layers.csv and EndToEnd.csv
        totals, endtoend_rows = endtoend_tables(result, rows)
        files["layers.csv"] = layers_csv(rows)
        files["EndToEnd.csv"] = render_endtoend_csv(totals, endtoend_rows, name=result.workload.model.name,
                                                    run_name="Analytical" if simai else "trainsim",
                                                    notes=() if simai else (EVENT_BUSBW_NOTE,))
        if result.intervals:
            files["trace.json"] = trace_json(result, _trace_microbatches(args))
        if not args.no_plot:
            from formats.plots import render_run_png

            files["run.png"] = render_run_png(result)
    return summary, files


def _warn_mismatches(args: argparse.Namespace, workload: Any, system: Any, prog: str) -> None:
    """Say when compute times will not be what the user thinks: a profile without rows for
    the GPU simulated (everything falls back to estimates), or a workload file timed on
    another GPU than the system's (times and MFU would mix two GPUs)."""
    from workload_gen.core.gpu_specs import get_gpu

    target = get_gpu(args.gpu or system.gpu).name
    if args.profile:
        from compute_profile.db import ProfileDB

        with ProfileDB(args.profile, create=False) as db:
            have = db.gpus()
        if target not in have:
            print(f"warning: {args.profile} has no rows for {target} (it has: {', '.join(have) or 'none'}); "
                  f"every compute time will be estimated (use --gpu NAME to pick one of its GPUs)",
                  file=sys.stderr, flush=True)
    timed_on = getattr(workload, "gpu", "") or ""
    if timed_on not in ("", "imported") and timed_on != target and any(
            getattr(op, "time_s", None) is not None for _, _, op in workload.ops()):
        print(f"warning: the workload's compute times are for {timed_on} but the system's GPU is {target}; "
              f"the times are kept as they are and MFU is against {target}'s peak", file=sys.stderr, flush=True)


def _trace_microbatches(args: argparse.Namespace) -> int | None:
    value = str(getattr(args, "trace_microbatches", "8"))
    if value == "all":
        return None
    if not value.isdigit() or int(value) < 2:
        raise ConfigError("trace-microbatches", value, "an integer >= 2, or all")
    return int(value)


def write_outputs(out: Path, files: dict[str, str | bytes]) -> None:
    """Replace the run directory ``out`` as a whole with ``files`` (rendered in memory by the caller).

    Everything is written into a sibling temporary directory that is then swapped in
    (formats.atomic_directory.write_directory), so a failure part-way (disk full, file-size limit,
    Ctrl-C, SIGTERM) leaves the previous run directory whole. Rule for what was there:
    every name in :func:`known_output_files` (this command's files and every backend's
    extras, e.g. run-ns3's fct.csv/links.csv) belongs to trainsim, and those this run does
    not write disappear with the old directory; any other entry is the user's and is
    moved over untouched. An entry with one of our names that is not a regular file (a
    symlink, FIFO, device) is refused, not replaced. ``--out`` existing as anything but a
    directory is a one-line ConfigError; a symlink to a directory is kept and the
    directory it points to is replaced. The backend's extras (``kind.render_outputs``)
    are part of ``files``, so they land in the same swap.
    """
    from formats.atomic_directory import write_directory

    known = known_output_files()
    unknown = sorted(set(files) - set(known))
    if unknown:
        raise ValueError(f"write_outputs: {unknown} not in known_output_files()")
    write_directory(out, {name: files[name] for name in known if name in files}, owned=known, field="out")


def _fmt_s(x: float) -> str:
    return f"{x * 1e3:10.3f} ms" if x < 1 else f"{x:10.4f} s "


def summary_table(summary: dict[str, Any]) -> str:
    """The readable stdout table (every figure is also in summary.json)."""
    t = summary["iteration_time_s"]
    lines = []
    cfg = summary.get("config", {})
    par, model = cfg.get("parallel"), cfg.get("model")
    if par and model:
        d = cfg.get("derived", {})
        experts = ""
        if par["ep"] > 1 or par.get("etp") not in (None, par["tp"]):
            # expert layout (folded: its own decomposition of the same ranks): etp x ep x edp x pp
            experts = f" (etp {par.get('etp') or par['tp']} edp {d.get('edp')})"  # edp: ParallelConfig.edp
        lines.append(f"{model.get('name')} on {cfg['system']['name']} ({d.get('gpu') or cfg['system']['gpu']}): "
                     f"{par['world_size']} GPUs, "
                     f"tp {par['tp']} pp {par['pp']} vpp {par['vpp']} cp {par['cp']} ep {par['ep']}{experts} "
                     f"dp {d.get('dp')}, "
                     f"{d.get('num_microbatches')} micro-batches of {par['micro_batch']} x {par['seq_length']} tokens")
    else:
        lines.append(f"{cfg.get('workload', '')} ({summary.get('accounting')} accounting)")
    ph = summary.get("placeholders") or {}
    if ph:
        lines.append("PLACEHOLDERS: figures below that come from the SimAI file's placeholders, not from your job:")
        lines += [f"  {k}: {v}" for k, v in ph.items()]
    lines.append(f"iteration time   {_fmt_s(t)}" + ("  (compute times are placeholders)" if "compute" in ph else ""))
    if "tokens_per_s" in summary:
        mfu, tf = summary.get("mfu"), summary.get("tflops_per_gpu")
        lines.append(f"throughput       {summary['tokens_per_s']:,.0f} tokens/s"
                     + (f", {tf:.1f} TFLOP/s per GPU" if tf is not None else "")
                     + (f", MFU {mfu:.1%}" if mfu is not None else "")
                     + ("  (placeholder: batch tokens)" if "batch_tokens" in ph else ""))
    lines.append("breakdown (critical stage)        share")
    for k, v in summary["breakdown_s"].items():
        if v:
            lines.append(f"  {k:<15s}{_fmt_s(v)}  {v / t:6.1%}" if t else f"  {k:<15s}{_fmt_s(v)}")
    if any(summary.get("peak_memory_bytes") or ()):
        cap = summary.get("gpu_memory_bytes") or 0
        lines.append("peak memory per stage: allocated / reserved (GiB)" + (f", GPU has {cap / GIB:.1f}" if cap else "")
                     + ("  (placeholder: no model in the file)" if "memory" in ph else ""))
        margins = summary.get("memory_margin_bytes") or ()
        outside = summary.get("memory_outside_allocator_bytes") or 0
        for i, (a, r) in enumerate(zip(summary["peak_memory_bytes"], summary["reserved_memory_bytes"])):
            lines.append(f"  stage {i:<3d} {a / GIB:8.2f} / {r / GIB:8.2f}"
                         + (_fit_mark(margins[i], r + outside) if i < len(margins) else ""))
    cov = summary.get("compute_coverage")
    if isinstance(cov, dict):
        shares = [f"{k} {cov[k]:.0%}" for k in ("measured", "scaled", "estimated", "imported")
                  if isinstance(cov.get(k), float) and cov[k] > 0]
        if shares:
            hint = "" if cov.get("measured") or summary.get("config", {}).get("profile") else \
                " (give --profile DB for measured times)"
            lines.append("compute times: " + ", ".join(shares) + hint)
            carry = throughput_note(summary)
            if carry:
                lines.append(carry)
    return "\n".join(lines) + "\n"


def throughput_note(summary: dict) -> str:
    """One line when the estimated times ran on a GPU whose tensor rate is carried from a
    sibling's fit by the power law (:func:`carry_line`); empty otherwise."""
    cov = summary.get("compute_coverage")
    gpu = ((summary.get("config") or {}).get("system") or {}).get("gpu")
    if not isinstance(cov, dict) or not cov.get("estimated") or not isinstance(gpu, str):
        return ""
    return carry_line(gpu)


def carry_line(gpu: str) -> str:
    """What ``gpu``'s estimated tensor rate rests on when it is a sibling's fit carried by the
    power law (compute_profile.estimator.throughput_carry), so a comparison across parts is
    read with it; empty for a GPU with its own fit or at its sibling's board power."""
    from compute_profile.estimator import throughput_carry

    carry = throughput_carry(gpu)
    if carry is None:
        return ""
    return (f"tensor rate: {carry.sibling}'s fit x{carry.rate_ratio:.2f}, carried from its {carry.sibling_power_w:,} W "
            f"board to this GPU's {carry.power_w:,} W by the power law (an extrapolation, not a fit: "
            "docs/validation.md, 'One recipe on two systems', sets it against NVIDIA's recipes run unchanged on both)")


_SIMAI_FLAGS = {"gpus": None, "gpus_per_node": None, "nvlink_busbw": None, "nic_busbw": None, "nics_per_node": None,
                **SIMAI_OVERLAP_DEFAULTS}


def reject_simai_flags(args: argparse.Namespace) -> None:
    """SimAI's cluster flags only describe SimAI files; elsewhere they would be silently
    ignored, so refuse them and point at the way to describe a cluster."""
    for name, default in _SIMAI_FLAGS.items():
        value = getattr(args, name, default)
        if value != default:
            flag = "--" + name.replace("_", "-")
            raise ConfigError(flag, value, "only applies to SimAI workload files; describe the cluster with "
                              "--system NAME|YAML (and --world-size) instead")


def _body(argv: list[str] | None, backend_name: str) -> int:
    from network.registry import backend_kind
    from workload_gen.core.system import load_system

    kind = backend_kind(backend_name)
    prog = RUN_COMMANDS.get(backend_name, (f"run-{backend_name}",))[0]
    args = build_parser(backend_name).parse_args(argv)
    accounting = getattr(args, "accounting", "event")
    t0 = time.perf_counter()
    options = backend_options(kind, args)
    system = kind.configure(options, load_system(args.system))
    wpath = Path(args.workload) if args.workload else None
    if wpath is not None and not wpath.is_file():
        raise ConfigError("workload", str(wpath), "no such file")
    simai_file = wpath is not None and is_simai_file(wpath)
    fills = tuple(f"p_{k}" for k in SIMAI_FILL_FLAGS) if simai_file else ()
    if wpath is not None and has_model_flags(args, fills):
        raise ConfigError("workload", str(wpath), "give a workload file or model/parallel flags (-c, --model, --tp, ...), "
                          "not both" + (" (a SimAI file takes only --seq-length and --micro-batch)" if simai_file else ""))
    if simai_file:
        _check_simai_flags(args, accounting)
    else:
        reject_simai_flags(args)
    net = None
    if accounting == "simai" and simai_file:
        summary, files = _simai_accounting_outputs(args, wpath, system)
    else:
        from engine.pipeline import run_workload

        if wpath is not None:
            workload, system = load_workload(args, wpath, system, prog)
        else:
            from workload_gen import build
            from engine.commands.config_flags import configs_from_args

            model, par = configs_from_args(args)
            inform(args, f"building workload: {model.name}, {par.world_size} GPUs", prog)
            workload = build(model, par)
        _warn_mismatches(args, workload, system, prog)
        warn_unmodelled(workload.parallel, prog)
        if accounting == "simai":
            inform(args, f"SimAI accounting on {system.name}", prog)
            result = run_workload(workload, system, profile=args.profile, gpu=args.gpu, accounting="simai")
        else:
            net = kind.from_options(options, system, workload.parallel.world_size, efficiency=args.efficiency,
                                    progress=None if args.quiet else sys.stderr)
            inform(args, f"simulating on {system.name} ({kind.name} backend)", prog)
            # the timeline is built only for the files that read it (trace.json, layers.csv);
            # without the PNG (which draws every pass) it may hold only the trace's window
            window = _trace_microbatches(args) if args.out and args.no_plot else None
            result = run_workload(workload, system, profile=args.profile, gpu=args.gpu,
                                  timeline=bool(args.out) and not args.no_trace, backend=net, trace_window=window)
            result.extras.update(kind.report(net))
        if args.out:
            t_sim = time.perf_counter()
            inform(args, f"simulated in {t_sim - t0:.2f} s; rendering the output files "
                      f"({'summary, layers, trace.json' if result.intervals else 'summary, layers'}"
                      f"{'' if args.no_plot else ', run.png'})", prog)
        summary, files = event_outputs(args, result, json.loads(workload.meta.get("placeholders") or "{}"))
        if args.profile:  # the table's hint to give a profile would be wrong
            summary.setdefault("config", {})["profile"] = args.profile
        if summary.get("memory_verdict") in ("does not fit", "edge"):
            warn_memory(result, prog)
        # a packet-level backend would run the whole simulation again: its line gives no figure
        rerun = (None if net is None or not net.contention_free else lambda s: kind.from_options(
            options, s, workload.parallel.world_size, efficiency=args.efficiency, progress=None))
        host = host_warning(result, prog, rerun)
        if host:
            print(host, file=sys.stderr, flush=True)
    try:
        if args.out:
            out = Path(args.out)
            if net is not None:
                files.update(kind.render_outputs(net, result.iteration_time_s))
            write_outputs(out, files)
            inform(args, f"wrote {', '.join(n for n in known_output_files() if n in files)} to {out}/", prog)
        if args.json:
            sys.stdout.write(files["summary.json"] if isinstance(files["summary.json"], str) else "")
        else:
            sys.stdout.write(summary_table(summary))
    finally:
        if net is not None:
            kind.finish(net, None if args.quiet else sys.stderr)
    inform(args, f"done in {time.perf_counter() - t0:.2f} s", prog)
    if args.strict and summary.get("fits") is False:
        return EXIT_DOES_NOT_FIT
    return 0


def _fit_mark(margin: int, need: int) -> str:
    """The table's mark for a stage (workload_gen.core.memory_fit.stage_verdict): DOES NOT
    FIT, AT THE EDGE (within the memory model's error, short or spare), or nothing."""
    from workload_gen.core.memory_fit import stage_verdict

    verdict = stage_verdict(margin, need)
    if verdict == "does not fit":
        return f"  DOES NOT FIT (short by {-margin / GIB:.2f})"
    if verdict == "edge":
        what = f"short by {-margin / GIB:.2f}" if margin < 0 else f"{margin / GIB:.2f} spare"
        return f"  AT THE EDGE ({what}, within the model's error)"
    return ""


EXIT_DOES_NOT_FIT = 3
"""Exit status of a run whose plan does not fit in GPU memory, with --strict (2 is bad input)."""


def warn_memory(result: Any, prog: str) -> None:
    """One warning line on stderr (never silenced by -q) for a plan that does not fit or is at
    the edge of memory (:func:`memory_warning`)."""
    print(memory_warning(result, prog), file=sys.stderr, flush=True)


def memory_warning(result: Any, prog: str) -> str:
    """:func:`warn_memory`'s line (serve-web shows it on the page): the worst stage, what it
    needs against the GPU's capacity and, for a plan short of memory, the changes verified to
    fit (engine.memory_fixes). Short by more than the memory model's error it does not fit;
    within that error, short or not, it is at the edge (workload_gen.core.memory_fit)."""
    from engine.memory_fixes import verified_fixes
    from workload_gen.core.memory_fit import MEMORY_MODEL_ERROR, memory_fit

    cap = result.system.gpu_spec.memory_bytes
    fit = memory_fit(result.memory, cap)
    s = fit.worst_stage()
    need = fit.needs[s]
    margin = fit.margins[s]
    what = (f"stage {s} needs {need / GIB:.2f} GiB ({(need - fit.outside_allocator) / GIB:.2f} reserved "
            f"by the allocator + {fit.outside_allocator / GIB:.2f} CUDA context) of the GPU's {cap / GIB:.2f} GiB "
            + (f"(short by {-margin / GIB:.2f} GiB)" if margin < 0 else f"({margin / GIB:.2f} GiB spare)"))
    if fit.verdict == "edge":
        msg = (f"at the edge of memory: {what}, within the memory model's error ({MEMORY_MODEL_ERROR:.1%} of "
               f"the need at most on measured runs): it may or may not fit; measure a step before relying on it")
    else:
        msg = f"does not fit: {what}"
    model = result.workload.model
    fixes = verified_fixes(model, result.workload.parallel, cap) if model is not None and margin < 0 else []
    if fixes:
        msg += "; fits with " + " or ".join(f"{flags} ({n / GIB:.1f} GiB)" for flags, n in fixes)
    if margin < 0:
        msg += "; `search` ranks the layouts that fit"
    return f"warning: {prog}: {msg}"


def slow_host_step(result: Any, backend: Callable[[Any], Any]) -> float:
    """The step predicted again with every host launch engine.host_launch.HOST_COST_SPREAD times as
    costly (the same workload, compute times and network, ``backend(system)`` building the
    network for the slower system): the other end of the range a host-sensitive prediction
    spans, which the warning states. Seconds."""
    from engine.host_launch import HOST_COST_SPREAD
    from engine.pipeline import run_workload

    system = result.system
    slow = replace(system, host_op_s=HOST_COST_SPREAD * system.launch_op_s)
    return run_workload(result.workload, slow, timeline=False, backend=backend(slow)).iteration_time_s


def host_warning(result: Any, prog: str, rerun: Callable[[Any], Any] | None = None) -> str:
    """One warning line (never silenced by -q; serve-web shows it too) when the run's busiest
    stage and direction has host launch work within engine.host_launch.HOST_COST_SPREAD of its
    GPU work: the predicted step then hangs on a per-op host cost taken from one public
    measurement. With ``rerun`` (a network backend for a system, :func:`slow_host_step`) the
    line adds the step at that spread. Empty otherwise."""
    from engine.host_launch import HOST_COST_SPREAD

    h = result.extras.get("host_load")
    if not h or not h["sensitive"]:
        return ""
    slow_step_s = slow_host_step(result, rerun) if rerun is not None else None
    waits = f" ({h['host_waits']} waits for the GPU)" if h["host_waits"] else ""
    pace = ("the host sets its pace, so the step scales with that cost" if h["load"] >= 1 else
            f"on a CPU {HOST_COST_SPREAD:g}x slower per op the host would set its pace")
    if slow_step_s is not None:
        step = result.iteration_time_s
        pace += (f" (the step {slow_step_s:.4g} s at {HOST_COST_SPREAD:g}x the per-op cost against "
                 f"{step:.4g} s, {slow_step_s / step - 1:+.0%})")
    if result.system.host_op_s is None:
        whose = "one public figure: HOST_OP_S in workload_gen/core/system.py"
        advice = ": give your CPU's figure as host_op_s in a system YAML (docs/engine.md, the host)"
    else:
        whose, advice = "the system's host_op_s", ""
    return (f"warning: {prog}: host-sensitive: a micro-batch's {h['direction']} on stage {h['stage']} needs "
            f"{h['load']:.0%} of its GPU time in CPU launch work{waits}, at {h['host_op_s'] * 1e6:.2f} us per eager op ({whose}); "
            f"{pace}{advice}")


def analytical_main(argv: list[str] | None = None) -> int:
    """``run-analytical``."""
    return run_cli(lambda: _body(argv, "analytical"))


def ns3_main(argv: list[str] | None = None, *, exit_on_interrupt: bool = False) -> int:
    """``run-ns3``."""
    return run_cli(lambda: _body(argv, "ns3"), exit_on_interrupt=exit_on_interrupt)


def ns3_entry() -> None:
    """The ``run-ns3`` console script: after Ctrl-C the process ends at once (see run_cli)."""
    sys.exit(ns3_main(exit_on_interrupt=True))


def flow_main(argv: list[str] | None = None, *, exit_on_interrupt: bool = False) -> int:
    """``run-flow``."""
    return run_cli(lambda: _body(argv, "flow"), exit_on_interrupt=exit_on_interrupt)


def flow_entry() -> None:
    """The ``run-flow`` console script: after Ctrl-C the process ends at once (see run_cli)."""
    sys.exit(flow_main(exit_on_interrupt=True))


main: Callable[[list[str] | None], int] = analytical_main

if __name__ == "__main__":
    sys.exit(analytical_main())
