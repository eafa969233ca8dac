"""SimAI_analytical's report in our terms: seconds, our group names, our records.

engine.simai_accounting reproduces SimAI's arithmetic and reports as SimAI prints (us, its
category names). Two callers want that report as a result of ours: ``run-analytical
--accounting simai`` on a SimAI file (summary.json, EndToEnd.csv, layers.csv) and on any
other workload (engine.pipeline.run_workload(accounting="simai"): :func:`simai_workload_result`). The
translation lives here once, so both report the same seconds under the same groups
(``dp``, ``edp``, ``tp``, ``ep``, ``pp``); the writers in formats only lay them out.

Also here: the SimAI cluster a run describes (SimAI_analytical's flags over a system), and
which headline figures of an event-mode run of a SimAI file are the file's placeholders.

Units: seconds in our records; us where SimAI's own figures are kept (``totals_us``, the
EndToEnd rows), GB/s of 2^30 bytes for SimAI's bandwidth flags.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from formats.run_outputs import SimaiLayerLine
from workload_gen.core.record import record
from workload_gen.core.units import GiB as GIB

if TYPE_CHECKING:  # loaded where used: a SimAI file's run never needs our records (start-up, docs/simai.md)
    from engine.simai_accounting import SimaiAccounting, SimaiCluster
    from formats.simai_text import SimaiWorkload
    from workload_gen.core.records import Workload
    from workload_gen.core.run_result import Breakdown, RunResult
    from workload_gen.core.system import SystemConfig

US = 1e-6
"""Seconds per microsecond (SimAI reports us)."""


@record
class SimaiReport:
    """SimAI_analytical's report of one workload, built once from its accounting: SimAI's
    figures as it prints them, and the same in seconds under our group names."""

    accounting: SimaiAccounting
    """As SimAI prints it (us)."""

    @property
    def iteration_time_s(self) -> float:
        return self.accounting.total_us * US

    @property
    def compute_s(self) -> float:
        return self.accounting.compute_us * US

    @property
    def exposed_comm_s(self) -> dict[str, float]:
        """SimAI's DP, DP_EP, TP, EP and PP exposed communication as our dp, edp, tp, ep and
        pp, in SimAI's order (seconds)."""
        acc = self.accounting
        return {"dp": acc.dp_us * US, "edp": acc.dp_ep_us * US, "tp": acc.tp_us * US, "ep": acc.ep_us * US,
                "pp": acc.pp_us * US}

    @property
    def bubble_s(self) -> float:
        return self.accounting.bubble_us * US

    def breakdown(self) -> Breakdown:
        """The report as our Breakdown (no optimizer: SimAI has none); its parts add up to
        :attr:`iteration_time_s`."""
        from workload_gen.core.run_result import Breakdown

        return Breakdown(compute_s=self.compute_s, exposed_comm_s=self.exposed_comm_s, bubble_s=self.bubble_s,
                         optimizer_s=0.0)

    def totals_us(self) -> dict[str, float]:
        """EndToEnd.csv's header categories (us)."""
        return self.accounting.totals_us()

    def endtoend_rows(self) -> list[dict[str, object]]:
        """EndToEnd.csv's per-layer rows: one per record, SimAI's columns (us, GB/s)."""
        return [r.as_dict() for r in self.accounting.layers]

    def layer_lines(self) -> list[SimaiLayerLine]:
        """layers.csv's lines: each record's compute, communication and exposed time, seconds."""
        return [SimaiLayerLine(record=i, name=r.name, fwd_compute_s=r.fwd_compute_us * US,
                               wg_compute_s=r.wg_compute_us * US, ig_compute_s=r.ig_compute_us * US,
                               fwd_comm_s=r.fwd_comm_us * US, wg_comm_s=r.wg_comm_us * US, ig_comm_s=r.ig_comm_us * US,
                               exposed_comm_s=(r.fwd_exposed_us + r.wg_exposed_us + r.ig_exposed_us) * US)
                for i, r in enumerate(self.accounting.layers)]


def simai_report(simai: SimaiWorkload, cluster: SimaiCluster) -> SimaiReport:
    """SimAI_analytical's report of a SimAI workload on ``cluster``, in our units."""
    from engine.simai_accounting import simai_accounting

    return SimaiReport(simai_accounting(simai, cluster))


def simai_cluster(system: SystemConfig, gpus: int, *, nvlink_busbw: float | None = None,
                  nic_busbw: float | None = None, **overlaps: float) -> SimaiCluster:
    """SimAI_analytical's flags for ``gpus`` GPUs of ``system``: its per-node counts and
    bandwidths (GB/s, GB = 2^30), except a bandwidth given as SimAI's own figure
    (``nvlink_busbw``, ``nic_busbw``, GB/s) which is kept as given; ``overlaps``: SimAI's
    ``dp_o``, ``tp_o``, ``ep_o``, ``pp_o`` (default its own)."""
    from engine.simai_accounting import SimaiCluster

    return SimaiCluster(
        # SimAI's "server" is the NVLink domain (its NVLink vs NIC split)
        gpus=gpus, gpus_per_server=system.domain_gpus,
        nvlink_busbw=nvlink_busbw if nvlink_busbw is not None else system.nvlink_busbw / GIB,
        nic_busbw=nic_busbw if nic_busbw is not None else system.nic_busbw / GIB,
        nics_per_server=system.domain_nics, **overlaps,
    )


def simai_system(base: SystemConfig, *, gpus_per_node: int | None = None, nics_per_node: int | None = None,
                 nvlink_busbw: float | None = None, nic_busbw: float | None = None) -> SystemConfig:
    """Our SystemConfig for SimAI's cluster flags (bandwidths in GB/s, GB = 2^30) over
    ``base``; ``base`` itself when none is given. SimAI's NIC figure is an achieved
    bandwidth, so it comes with efficiency 1."""
    from workload_gen.core.system import system_from_dict

    over: dict[str, Any] = {}
    if gpus_per_node is not None or nics_per_node is not None:
        # SimAI's server is one NVLink domain: its counts replace the domain's (node = domain)
        over["gpus_per_node"] = gpus_per_node if gpus_per_node is not None else base.domain_gpus
        over["nics_per_node"] = nics_per_node if nics_per_node is not None else base.domain_nics
        over["nvlink_domain"] = 0
    if nvlink_busbw is not None:
        over["nvlink_busbw"] = nvlink_busbw * GIB
        over["nvlink_bw"] = max(base.nvlink_bw, nvlink_busbw * GIB)
    if nic_busbw is not None:
        over["nic_bw"] = nic_busbw * GIB
        over["nic_efficiency"] = 1.0
    return system_from_dict({"base": base.name, **over}, source="SimAI cluster flags") if over else base


def simai_workload_result(workload: Workload, system: SystemConfig, cluster: SimaiCluster | None = None) -> RunResult:
    """SimAI_analytical's report for our workload as a RunResult: exported to SimAI records
    (stage 0, as SimAI simulates rank 0 only) and accounted by engine.simai_accounting.

    Comm fully exposed (SimAI's default overlap ratios), SimAI's bubble formula and its
    busbw tables. ``cluster`` defaults to the system's figures for the workload's GPUs.
    Memory is still ours; there is no timeline. ``extras`` carry SimAI's EndToEnd totals
    (``simai_totals_us``) and per-record rows (``simai_layers``).
    """
    from engine.memory import estimate_memory
    from formats.simai_convert import workload_to_simai
    from workload_gen.core.run_result import RunResult

    if cluster is None:
        cluster = simai_cluster(system, workload.parallel.world_size)
    report = simai_report(workload_to_simai(workload, 0), cluster)
    bd = report.breakdown()
    return RunResult(workload=workload, system=system, backend="simai-accounting",
                     iteration_time_s=report.iteration_time_s, breakdown=bd, stage_breakdowns=(bd,),
                     memory=estimate_memory(workload), intervals=(),
                     extras={"simai_totals_us": report.totals_us(), "simai_layers": report.endtoend_rows()})


SIMAI_FILL_FLAGS = {"seq_length": "--seq-length", "micro_batch": "--micro-batch"}
"""Figures a SimAI file lacks that a flag fills in (event mode): they set the tokens per
iteration. Field -> the run command's flag, named in the placeholder notes."""


def simai_placeholders(sw: SimaiWorkload, gpus: int, *, given_gpus: bool, fill: dict[str, int]) -> dict[str, str]:
    """The headline figures of an event-mode run of a SimAI/AICB file that are not the
    job's but the file's placeholders, each with why and what would fill it in.

    A SimAI file is rank 0's records plus a header: it has no model (so no parameters,
    no memory model), no sequence length or micro-batch (so no tokens), and AICB writes
    a compute time of 1 ns (or 0) wherever it had no AIOB measurement."""
    h = sw.header
    pp = h.pp or 1
    out: dict[str, str] = {}
    if pp > 1:
        where = f"--gpus {gpus}" if given_gpus else f"the file's all_gpus {h.all_gpus}"
        out["gpus"] = (f"{gpus // pp} GPUs = one pipeline stage of {gpus} ({where}); the file holds one stage's "
                       f"records, so pp {pp} and its bubble are not simulated")
    missing = [flag for k, flag in SIMAI_FILL_FLAGS.items() if k not in fill]
    if missing:
        out["batch_tokens"] = (f"micro-batch x sequence length are placeholders (the file has neither): give "
                               f"{' and '.join(missing)}; tokens/s depends on them")
    out["memory"] = ("no model in the file: weights, gradients, optimizer state and activations are not known; "
                     "the figure holds only communication buffers")
    times = [t for r in sw.records for t in (r.fwd_compute_ns, r.ig_compute_ns, r.wg_compute_ns)]
    if times and max(times) <= 1:
        out["compute"] = ("every compute time in the file is AICB's placeholder (<= 1 ns: generated without AIOB); "
                          "regenerate it with AIOB, or simulate from the model's flags with --profile DB")
    out["flops"] = "no model in the file: TFLOP/s and MFU are not computed"
    return out

