"""Shared helpers for the SimAI tests: reference-data paths and a hand-built workload."""
from __future__ import annotations

from pathlib import Path

from workload_gen.core.model_config import ModelConfig
from workload_gen.core.parallel_config import ParallelConfig
from workload_gen.core.records import (
    ChunkProgram,
    CollectiveOp,
    CollKind,
    ComputeOp,
    Group,
    OpKind,
    Phase,
    StageProgram,
    TimeSource,
    Workload,
)

DATA = Path(__file__).resolve().parents[2] / ".." / "shared" / "data"
SIMAI_FILES = sorted((DATA / "simai").glob("*.txt"))
AICB_FILES = sorted(p for p in (DATA / "aicb").glob("*.txt") if not p.name.startswith("aiob_inputs"))
REFERENCE_FILES = SIMAI_FILES + AICB_FILES


def _c(name: str, layer: int, phase: Phase, t: float | None, kind: OpKind = OpKind.GEMM) -> ComputeOp:
    return ComputeOp(name=name, layer=layer, phase=phase, kind=kind, shape=(1,), dtype="bf16", flops=1.0, bytes=1.0,
                     time_s=t, source=TimeSource.ESTIMATED if t is not None else TimeSource.NONE)


def _k(name: str, layer: int, phase: Phase, kind: CollKind, group: Group, size: int, nbytes: int,
       overlappable: bool = False, peer: int = 0) -> CollectiveOp:
    return CollectiveOp(name=name, layer=layer, phase=phase, kind=kind, group=group, group_size=size,
                        bytes=nbytes, overlappable=overlappable, peer=peer)


def toy_workload(*, times: bool = True, cp: int = 1, ep_layer: bool = True) -> Workload:
    """Two layers, tp=2 with SP, pp=2 (one layer per stage), dp=2, ga=4, an EP all-to-all pair.

    Sizes are arbitrary but distinct, so tests can follow each collective through export.
    """
    model = ModelConfig(num_layers=2, hidden_size=64, num_attention_heads=4, vocab_size=128)
    if cp > 1:
        par = ParallelConfig(world_size=8, tp=2, sp=True, pp=1, cp=cp, micro_batch=1, global_batch=8, seq_length=64)
    else:
        par = ParallelConfig(world_size=8, tp=2, sp=True, pp=2, micro_batch=1, global_batch=8, seq_length=64)
    stages = []
    n_stages = par.pp
    for s in range(n_stages):
        layer = s
        t = (lambda x: x) if times else (lambda x: None)
        fwd = []
        bwd = []
        if s == 0:
            fwd.append(_c("embedding", -1, Phase.FWD, t(3e-6), OpKind.EMBEDDING))
        else:
            fwd.append(_k("pp_recv", layer, Phase.FWD, CollKind.SEND_RECV, Group.PP, 2, 4096, peer=-1))
        fwd += [
            _c("ln1", layer, Phase.FWD, t(1e-6), OpKind.NORM),
            _k("sp_ag_qkv", layer, Phase.FWD, CollKind.ALL_GATHER, Group.TP, 2, 8192 + layer),
            _c("qkv", layer, Phase.FWD, t(10e-6)),
            _c("core_attn", layer, Phase.FWD, t(7e-6), OpKind.ATTENTION),
            _c("proj", layer, Phase.FWD, t(5e-6)),
            _k("sp_rs_proj", layer, Phase.FWD, CollKind.REDUCE_SCATTER, Group.TP, 2, 8192 + 10 + layer),
        ]
        if ep_layer:
            fwd += [
                _c("router", layer, Phase.FWD, t(0.5e-6), OpKind.ROUTER),
                _k("dispatch", layer, Phase.FWD, CollKind.ALL_TO_ALL, Group.EP, 1, 5_000_000 + layer),
                _c("experts", layer, Phase.FWD, t(20e-6), OpKind.GROUPED_GEMM),
                _k("combine", layer, Phase.FWD, CollKind.ALL_TO_ALL, Group.EP, 1, 5_000_100 + layer),
            ]
        if s == n_stages - 1:
            fwd.append(_c("loss", 2, Phase.FWD, t(2e-6), OpKind.LOSS))
        else:
            fwd.append(_k("pp_send", layer, Phase.FWD, CollKind.SEND_RECV, Group.PP, 2, 4096, peer=1))
        if ep_layer:
            bwd += [
                _k("combine_bwd", layer, Phase.BWD_INPUT, CollKind.ALL_TO_ALL, Group.EP, 1, 5_000_200 + layer),
                _c("experts", layer, Phase.BWD_INPUT, t(20e-6), OpKind.GROUPED_GEMM),
                _c("experts", layer, Phase.BWD_WEIGHT, t(19e-6), OpKind.GROUPED_GEMM),
                _k("dispatch_bwd", layer, Phase.BWD_INPUT, CollKind.ALL_TO_ALL, Group.EP, 1, 5_000_300 + layer),
            ]
        bwd += [
            _k("sp_ag_proj_grad", layer, Phase.BWD_INPUT, CollKind.ALL_GATHER, Group.TP, 2, 8192 + 20 + layer),
            _c("proj", layer, Phase.BWD_INPUT, t(5e-6)),
            _c("proj", layer, Phase.BWD_WEIGHT, t(4e-6)),
            _c("core_attn", layer, Phase.RECOMPUTE, t(7e-6), OpKind.ATTENTION),
            _c("core_attn", layer, Phase.BWD_INPUT, t(14e-6), OpKind.ATTENTION),
            _c("qkv", layer, Phase.BWD_INPUT, t(10e-6)),
            _k("sp_rs_qkv_grad", layer, Phase.BWD_INPUT, CollKind.REDUCE_SCATTER, Group.TP, 2, 8192 + 30 + layer),
            _c("qkv", layer, Phase.BWD_WEIGHT, t(9e-6)),
            _c("ln1", layer, Phase.BWD_INPUT, t(1e-6), OpKind.NORM),
        ]
        if s > 0:
            bwd.append(_k("pp_send_grad", layer, Phase.BWD_INPUT, CollKind.SEND_RECV, Group.PP, 2, 4096, peer=-1))
        iteration = [
            _k("grad_rs_bucket0", -1, Phase.ITERATION, CollKind.REDUCE_SCATTER, Group.DP, 2, 40_000_000 + s, True),
            _k("expert_grad_rs", -1, Phase.ITERATION, CollKind.REDUCE_SCATTER, Group.EDP, 2, 30_000_000 + s, True),
            _c("optimizer", -1, Phase.ITERATION, t(50e-6), OpKind.OPTIMIZER),
            _k("param_ag_bucket0", -1, Phase.ITERATION, CollKind.ALL_GATHER, Group.DP, 2, 20_000_000 + s, True),
        ]
        chunk = ChunkProgram(stage=s, chunk=0, layers=(layer,), forward=tuple(fwd), backward=tuple(bwd))
        stages.append(StageProgram(stage=s, chunks=(chunk,), iteration=tuple(iteration), params=1000, dense_params=800))
    return Workload(model=model, parallel=par, stages=tuple(stages), params_total=2000, gpu="h100" if times else "")
