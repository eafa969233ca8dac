"""Tables of measured training runs -> runs we can simulate, for validation and calibration.

A table is recognised by its columns (``../shared/data/real/README.md`` gives each one's
source and settings):

- Megatron-LM's 2021 weak-scaling table (``achieved_tflops_per_gpu``): GPT 1.7B-1T on A100.
  The measured step time comes from the achieved TFLOP/s with the paper's own FLOP count
  (Narayanan et al. 2021, eq. 3, recomputation included); the TP/PP split is Megatron's
  practice (TP = min(8, TP x PP)); heads per size are the paper's Table 1; the stack
  predates fused attention (FlashAttention, 2022), so attention is ``unfused``.
- SimuMax's B200 table (``real_step_time_ms``): trimmed Llama-3 70B and DeepSeek-V2 on one
  node, with step time and peak allocated/reserved memory.
- NVIDIA's dgxc-benchmarking H100 tables (``step_time_s`` with ``nemo``): Llama 3.1 8B/70B,
  BF16 and FP8, NeMo recipes (24.09 and 24.12 in ../shared/data/real; NeMo 2.0's 25.02 in
  compute_profile/data/measured, held out). ``optimizer`` ``adam`` there is Megatron-Core's
  distributed optimizer.
- NVIDIA's Megatron-Bridge performance summaries (``tokens_per_s_per_gpu``): Llama 3 8B on
  DGX-B200 and 70B on DGX-H100 in FP8, settings from the release's performance recipes
  (compute_profile/data/measured/README.md). The step time is global batch x sequence
  over (tokens/s/GPU x GPUs).

Each row becomes a :class:`MeasuredRun`: the configs, the system preset, the measured
figures, and the tags calibration groups by (model family for leave-one-model-out, GPU,
precision, and a key pairing a BF16 run with its FP8 twin).

Units: seconds, bytes.
"""
from __future__ import annotations

import csv
import os
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from workload_gen.core.errors import ConfigError, FormatError
from workload_gen.core.flops import narayanan_flops
from workload_gen.core.metrics import tokens_per_iteration
from workload_gen.core.model_config import ModelConfig
from workload_gen.core.model_presets import get_preset
from workload_gen.core.parallel_config import ParallelConfig
from workload_gen.core.record import record
from workload_gen.core.units import GiB

A100_HEADS = {"1.7B": 24, "3.6B": 32, "7.5B": 32, "18B": 48, "39B": 64, "76B": 80, "145B": 96,
              "310B": 128, "530B": 128, "1T": 160}
"""Narayanan et al. 2021, Table 1: attention heads per model size (the CSV omits them)."""


@record
class MeasuredRun:
    label: str
    dataset: str
    """"a100-megatron-2021", "b200-simumax", "h100-nemo" or "megatron-bridge"."""
    system: str
    """System preset the run maps to."""
    family: str
    """The model, for leave-one-model-out cross-validation."""
    precision: str
    pair: str
    """Runs that differ only in precision share this key (BF16 -> FP8 speed-up)."""
    model: ModelConfig
    parallel: ParallelConfig
    step_time_s: float
    mem_allocated: float | None = None
    mem_reserved: float | None = None


def _a100(r: dict[str, str]) -> MeasuredRun:
    h, layers, gpus = int(r["hidden_size"]), int(r["num_layers"]), int(r["num_gpus"])
    gbs, seq, vocab = int(r["global_batch_size"]), int(r["seq_len"]), int(r["vocab_size"])
    mp = int(r["model_parallel_size_tp_x_pp"])
    tp = min(8, mp)
    model = ModelConfig(
        name=f"gpt-{r['model_size']}", source="Narayanan et al. 2021 Table 1", num_layers=layers, hidden_size=h,
        num_attention_heads=A100_HEADS[r["model_size"]], vocab_size=vocab, max_position_embeddings=seq,
        activation="gelu", normalization="layernorm", position_embedding="learned", add_bias_linear=True,
        tied_embeddings=True)
    par = ParallelConfig(world_size=gpus, tp=tp, pp=mp // tp, micro_batch=1, global_batch=gbs, seq_length=seq,
                         dtype="fp16", recompute="full", distributed_optimizer=False, attention_backend="unfused")
    # the paper's achieved TFLOP/s count its eq. 3 FLOPs, recomputation included
    flops = narayanan_flops(gbs, seq, layers, h, vocab, recompute=True)
    step = flops / (float(r["achieved_tflops_per_gpu"]) * 1e12 * gpus)
    label = f"A100 GPT {r['model_size']} tp{tp} pp{mp // tp} {gpus}g"
    return MeasuredRun(label, "a100-megatron-2021", "a100", model.name, "fp16", label, model, par, step)


_B200_PRESETS = {"llama3-70b": "llama3-70b", "deepseekv2": "deepseek-v2"}


def _b200(r: dict[str, str]) -> MeasuredRun:
    model = get_preset(_B200_PRESETS[r["model"]])
    model = replace(model, num_layers=int(r["layer_num"]),
                    **({"num_dense_layers": int(r["dense_layers"])} if r["dense_layers"] else {}))
    tp, pp, ep = int(r["tp"]), int(r["pp"]), int(r["ep"])
    # SimuMax aligns its MoE model with its Megatron benchmark by padding every expert to a
    # capacity of 1 (its strategy-search example, examples/search/llm_search.py,
    # set_megatron_config: moe_pad_expert_input_to_capacity True, capacity 1, "just for align
    # the configuration with the benchmark"): the benchmark's experts take equal loads, so the
    # rows are read with that capacity, not with the learned-routing load prior.
    # Its Megatron launch script fuses the token permutation (simu_tools/megatron_scripts/scripts/
    # run_pretrain_deepseekv2.sh: --moe-permute-fusion).
    moe = (dict(moe_expert_capacity_factor=1.0, moe_pad_expert_input_to_capacity=True, moe_permute_fusion=True)
           if model.is_moe else {})
    par = ParallelConfig(world_size=int(r["gpus"]), tp=tp, pp=pp, ep=ep, cp=int(r["cp"]), vpp=int(r["vp"]),
                         sp=tp > 1, micro_batch=int(r["mbs"]), global_batch=int(r["gbs"]),
                         seq_length=int(r["seq_len"]), dtype="bf16", recompute="none", distributed_optimizer=True,
                         **moe)
    if par.dp != int(r["dp"]) or par.num_microbatches != int(r["micro_batch_num"]):
        raise ConfigError("dp", r["dp"], f"does not follow from the row's layout ({par.dp} x {par.num_microbatches})")
    label = f"B200 {r['model']} l{r['layer_num']} tp{tp} pp{pp} ep{ep} m{r['micro_batch_num']}"
    return MeasuredRun(label, "b200-simumax", "b200", f"{r['model']}-l{r['layer_num']}", "bf16", label, model, par,
                       float(r["real_step_time_ms"]) * 1e-3, float(r["real_mem_alloc_gib"]) * GiB,
                       float(r["real_mem_reserved_gib"]) * GiB)


_H100_PRESETS = {"llama3.1-8b": "llama3-8b", "llama3.1-70b": "llama3-70b"}
"""Llama 3.1 has Llama 3's shapes at 8B and 70B: the dgxc tables' model name -> our preset."""


def _nvidia_recipe_parallel(r: dict[str, str], fp8_recipe: str, optimizer: str) -> ParallelConfig:
    """The layout and recipe switches of a row of NVIDIA's tables (dgxc-benchmarking and
    Megatron-Bridge share these columns); both run the distributed optimizer."""
    fp8 = r["precision"] == "fp8"
    return ParallelConfig(
        world_size=int(r["gpus"]), tp=int(r["tp"]), pp=int(r["pp"]), vpp=int(r["vp"]), cp=int(r["cp"]),
        ep=int(r["ep"]), sp=r["sequence_parallel"] == "1", micro_batch=int(r["mbs"]), global_batch=int(r["gbs"]),
        seq_length=int(r["seq"]), dtype="fp8" if fp8 else "bf16", fp8_recipe=fp8_recipe if fp8 else "delayed",
        recompute=r["recompute"], distributed_optimizer=True, optimizer=optimizer,
        overlap_grad_reduce=r["overlap_grad_sync"] == "1", overlap_param_gather=r["overlap_param_sync"] == "1",
        tp_comm_overlap=r["tp_comm_overlap"] == "1", overlap_p2p_comm=r["overlap_p2p"] == "1",
        grad_reduce_in_fp32=r["grad_sync_dtype"] == "fp32",
        # Megatron-Bridge's 405B recipes put the embedding and the loss in layer slots (the
        # dgxc tables have no such column: their recipes do not)
        account_for_embedding_in_pipeline_split=r.get("embedding_in_pp_split", "0") == "1",
        account_for_loss_in_pipeline_split=r.get("loss_in_pp_split", "0") == "1")


NEMO_WGRAD_DEFERRAL_LIMIT = 22
"""NVIDIA's NeMo Llama 3.1 70B recipes defer the output layer's wgrad of 22 micro-batches
(dgxc-benchmarking llama3.1_70b.yaml at 35a9aecc8d/8f5cbb3799: defer_embedding_wgrad_compute
true, wgrad_deferral_limit 22; NeMo 2.0's llama3_70b.py performance recipe the same)."""


def _h100(r: dict[str, str]) -> MeasuredRun:
    model = replace(get_preset(_H100_PRESETS[r["model"]]), name=r["model"])
    par = _nvidia_recipe_parallel(r, "delayed", r["optimizer"])
    if par.pp > 1:
        par = replace(par, defer_embedding_wgrad_compute=True, wgrad_deferral_limit=NEMO_WGRAD_DEFERRAL_LIMIT)
    if par.dp != int(r["dp"]):
        raise ConfigError("dp", r["dp"], f"does not follow from the row's layout ({par.dp})")
    label = f"H100 {r['model']} {r['precision']} nemo{r['nemo']} tp{par.tp}pp{par.pp}vp{par.vpp}cp{par.cp} {r['gpus']}g"
    # NeMo 2.0 releases (25.x) are a table of their own (held out: compute_profile/data/measured)
    dataset = "h100-nemo" if r["nemo"].startswith("24.") else f"dgxc-nemo{r['nemo']}"
    return MeasuredRun(label, dataset, "h100", r["model"], r["precision"],
                       f"{r['model']} nemo{r['nemo']} {r['gpus']}g", model, par, float(r["step_time_s"]))


BRIDGE_SYSTEMS = {"DGX-B200": "b200", "DGX-H100": "h100"}
"""Megatron-Bridge tables' system column -> our system preset (8 GPUs per node, the DGX's NICs);
scripts/check_recipes.py reads the MoE table's with it too."""
_BRIDGE_FAMILIES = {preset: family for family, preset in _H100_PRESETS.items()}
"""Megatron-Bridge's Llama 3 rows join the dgxc tables' Llama 3.1 families (same shapes): one
family each for leave-one-model-out, so leaving a model out removes it from every source."""


def _bridge(r: dict[str, str]) -> MeasuredRun:
    model = replace(get_preset(r["model"]), name=r["model"])
    par = _nvidia_recipe_parallel(r, r["fp8_recipe"], "adam")
    step = tokens_per_iteration(par) / (float(r["tokens_per_s_per_gpu"]) * par.world_size)
    system = BRIDGE_SYSTEMS[r["gpu"]]
    precision = f"fp8-{par.fp8_recipe}" if par.dtype == "fp8" else "bf16"
    label = (f"{system.upper()} {r['model']} {precision} bridge{r['release']} "
             f"tp{par.tp}pp{par.pp}vp{par.vpp}cp{par.cp} {par.world_size}g")
    return MeasuredRun(label, "megatron-bridge", system, _BRIDGE_FAMILIES.get(r["model"], r["model"]),
                       par.dtype, label, model, par, step)


_READERS = (("achieved_tflops_per_gpu", _a100), ("real_step_time_ms", _b200), ("nemo", _h100),
            ("tokens_per_s_per_gpu", _bridge))


def read_measured_runs(path: str | os.PathLike[str]) -> list[MeasuredRun]:
    """The runs of one table (its kind recognised by its columns)."""
    p = Path(path)
    try:
        with p.open(newline="", encoding="utf-8") as fh:
            reader = csv.DictReader(fh)
            cols = set(reader.fieldnames or ())
            make = next((fn for col, fn in _READERS if col in cols), None)
            if make is None:
                raise FormatError(str(p), 1, "not a measured-run table this reader knows (Megatron 2021 A100, "
                                  "SimuMax B200, dgxc-benchmarking H100, Megatron-Bridge columns)")
            runs = []
            for i, row in enumerate(reader, start=2):
                try:
                    runs.append(make(row))
                except (KeyError, ValueError) as exc:
                    raise FormatError(str(p), i, f"bad row: {exc}") from None
            return runs
    except UnicodeDecodeError:
        raise FormatError(str(p), None, "not UTF-8 text") from None


KNOWN_TABLES = ("megatron_a100_2021_weak_scaling.csv", "b200_megatron_measured.csv",
                "h100_nemo_llama31_measured.csv", "h100_nemo2502_llama31_measured.csv",
                "megatron_bridge_llama3_measured.csv")


def read_measured_dir(directory: str | os.PathLike[str], field: str = "data") -> list[MeasuredRun]:
    """Every run of the known tables in ``directory`` (../shared/data/real); ``field`` names
    the option it came from in the error when there is none."""
    d = Path(directory)
    found = [d / name for name in KNOWN_TABLES if (d / name).is_file()]
    if not found:
        raise ConfigError(field, str(d), f"holds none of {', '.join(KNOWN_TABLES)}")
    return [run for p in found for run in read_measured_runs(p)]


def read_measured_dirs(directories: Sequence[str | os.PathLike[str]], field: str = "data") -> list[MeasuredRun]:
    """Every run of the known tables in each of ``directories``, in order; a run (label)
    found twice is refused, since it would weigh double in a fit."""
    runs = [run for d in directories for run in read_measured_dir(d, field)]
    seen: set[str] = set()
    for run in runs:
        if run.label in seen:
            raise ConfigError(field, run.label, "appears twice: give each table's directory once")
        seen.add(run.label)
    return runs
