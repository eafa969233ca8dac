"""Convert between our :class:`~workload_gen.core.records.Workload` and SimAI's record list.

Export (``workload_to_simai``): one pipeline stage per file, as SimAI expects.

* **Records from segments.** SimAI runs rank 0's records forward in file order (each:
  forward compute, then its forward collective) and backward in reverse file order
  (input-grad compute, input-grad collective, weight-grad compute, weight-grad
  collective). We cut the stage's forward ops of one micro-batch into segments
  "compute ops, then one collective", and its backward ops the same way, in execution
  order: F1..Fn and B1..Bm. With R = max(n, m) records, record i carries F_i in its
  forward slots and B_(R+1-i) in its backward slots. SimAI then meets the forward
  segments in our order and the backward segments in our order, exactly. This is done
  per layer (a segment belongs to the layer of its collective), so each layer's records
  hold that layer's forward and backward work; a record is named after the last
  compute op of its forward segment (``layer3_proj``), the first embedding segment
  ``embedding_layer`` as in AICB (SimAI leaves that name out of its bubble).
* **Slots.** Backward compute splits into input-grad (BWD_INPUT and RECOMPUTE ops) and
  weight-grad (BWD_WEIGHT). A collective goes to the column whose group SimAI can
  name: TP (and expert-TP, and the tied-embedding group, which SimAI lacks) without a
  suffix in the forward/input-grad columns, EP as ``_EP``, the expert-DP group as
  ``_DP_EP``, and DP in the weight-grad column (no suffix). PP send/recv are not records
  in SimAI; their size goes to the header's ``pp_comm``. FP8 delayed scaling's amax
  all-reduces (the ``amax`` group) have no SimAI group and are left out, as AICB leaves
  them out. Context parallelism has no
  SimAI group, so ``cp > 1`` is refused.
* **Unrolling.** The ``ga`` micro-batches are written one after another (SimAI runs
  all forwards, then all backwards). The once-per-iteration ops (gradient sync,
  optimizer, parameter gather) are written first, in reverse, so that SimAI's backward
  sweep reaches them last and in our order, which is also where AICB puts them.
* **Units.** Times in integer ns (rounded from seconds), sizes in bytes (NCCL
  convention, as in our records). SimAI needs compute times, so a workload without
  them is refused with a pointer to ``--gpu``.

Import (``simai_to_workload``): a SimAI file becomes a one-stage workload that our
engine can run. The ``ga`` identical micro-batch blocks are found and folded back into
one micro-batch; records before them (and after them) become once-per-iteration ops.
See docs/simai.md for what is approximated.
"""
from __future__ import annotations

from collections import Counter

from dataclasses import dataclass, replace

from formats.simai_reader import check_runnable
from formats.simai_text import (
    Column,
    SimaiComm,
    SimaiGroup,
    SimaiHeader,
    SimaiRecord,
    SimaiWorkload,
    comm_token,
)
from workload_gen.core.errors import ConfigError, FormatError
from workload_gen.core.limits import check_limit
from workload_gen.core.model_config import ModelConfig
from workload_gen.core.parallel_config import ParallelConfig
from workload_gen.core.records import (
    ChunkProgram,
    CollectiveOp,
    CollKind,
    ComputeOp,
    Group,
    Op,
    OpKind,
    Phase,
    StageProgram,
    TimeSource,
    Workload,
)

AICB_UPDATE_NS = 100
"""AICB writes 100 ns in the update column; SimAI waits that long after each collective (ns-3 mode)."""

_GROUP_TO_SIMAI: dict[Group, SimaiGroup] = {
    Group.TP: SimaiGroup.TP,
    Group.ETP: SimaiGroup.TP,
    Group.EMB: SimaiGroup.TP,
    Group.EP: SimaiGroup.EP,
    Group.DP: SimaiGroup.DP,
    Group.EDP: SimaiGroup.DP_EP,
}
_LEFT_OUT = frozenset({Group.PP, Group.AMAX})
"""Collectives that are not SimAI records: PP send/recv (their size goes to the header's
``pp_comm``) and FP8 delayed scaling's amax all-reduces (no SimAI group; AICB leaves them out)."""
_SIMAI_KINDS = (CollKind.ALL_REDUCE, CollKind.ALL_GATHER, CollKind.REDUCE_SCATTER, CollKind.ALL_TO_ALL)


@dataclass(slots=True)
class _Segment:
    """Compute ops followed by at most one collective (mutable only while being built)."""

    computes: list[ComputeOp]
    coll: CollectiveOp | None


def _segments(ops: tuple[Op, ...] | list[Op]) -> list[_Segment]:
    out: list[_Segment] = []
    pending: list[ComputeOp] = []
    for op in ops:
        if isinstance(op, ComputeOp):
            pending.append(op)
        elif op.group in _LEFT_OUT:
            continue
        else:
            out.append(_Segment(pending, op))
            pending = []
    if pending:
        out.append(_Segment(pending, None))
    return out


def _ns(op: ComputeOp) -> int:
    assert op.time_s is not None
    return int(round(op.time_s * 1e9))


def _tag(layer: int, num_layers: int) -> str:
    if layer < 0:
        return "embedding"
    if layer >= num_layers:
        return "head"
    return f"layer{layer}"


def _is_embedding(seg: _Segment) -> bool:
    return any(op.kind == OpKind.EMBEDDING and op.phase == Phase.FWD for op in seg.computes)


def _seg_name(seg: _Segment, num_layers: int) -> str:
    if seg.computes:
        op: Op = seg.computes[-1]
    else:
        assert seg.coll is not None
        op = seg.coll
    return "_".join(f"{_tag(op.layer, num_layers)}_{op.name}".split())


def _check_collective(op: CollectiveOp) -> None:
    if op.kind not in _SIMAI_KINDS or op.group not in _GROUP_TO_SIMAI:
        raise ConfigError(
            "format", "simai",
            f"collective {op.name!r} (layer {op.layer}, {op.kind.value} on {op.group.value}) has no SimAI equivalent",
        )


def _comm(op: CollectiveOp | None, column: Column) -> SimaiComm:
    if op is None:
        return SimaiComm()
    return SimaiComm(comm_token(op.kind, _GROUP_TO_SIMAI[op.group], column), int(op.bytes))


def _backward_record_slots(seg: _Segment | None) -> dict[str, object]:
    """Input-grad / weight-grad slots of one backward (or once-per-iteration) segment."""
    if seg is None:
        return {"ig_compute_ns": 0, "ig_comm": SimaiComm(), "wg_compute_ns": 0, "wg_comm": SimaiComm()}
    ig = sum(_ns(op) for op in seg.computes if op.phase in (Phase.BWD_INPUT, Phase.RECOMPUTE, Phase.FWD))
    wg = sum(_ns(op) for op in seg.computes if op.phase in (Phase.BWD_WEIGHT, Phase.ITERATION))
    ig_comm = wg_comm = SimaiComm()
    if seg.coll is not None:
        if _GROUP_TO_SIMAI[seg.coll.group] in (SimaiGroup.DP, SimaiGroup.DP_EP):
            wg_comm = _comm(seg.coll, "wg")
        else:
            ig_comm = _comm(seg.coll, "ig")
    return {"ig_compute_ns": ig, "ig_comm": ig_comm, "wg_compute_ns": wg, "wg_comm": wg_comm}


def _seg_layer(seg: _Segment) -> int:
    """The layer a segment belongs to: its collective's, else its last compute op's."""
    if seg.coll is not None:
        return seg.coll.layer
    return seg.computes[-1].layer


def _pairs(fwd: list[_Segment], bwd: list[_Segment]) -> list[tuple[_Segment | None, _Segment | None]]:
    """(forward, backward) segment per record, in file order.

    Records list the forward segments in order and the backward ones in reverse order
    (see :func:`_align` for which two share a record): SimAI then meets the forward
    segments in our order and, sweeping back, the backward ones in our order.
    When the forward runs through layers in ascending and the backward in descending
    order (Megatron, VPP included), one group per layer keeps each layer's forward and
    backward work on that layer's records; otherwise the whole micro-batch is one group.
    """
    f_layers = [_seg_layer(x) for x in fwd]
    b_layers = [_seg_layer(x) for x in bwd]
    by_layer = (all(a <= b for a, b in zip(f_layers, f_layers[1:]))
                and all(a >= b for a, b in zip(b_layers, b_layers[1:])))
    groups: list[tuple[list[_Segment], list[_Segment]]]
    if by_layer:
        groups = [([x for x in fwd if _seg_layer(x) == layer], [x for x in bwd if _seg_layer(x) == layer])
                  for layer in sorted(set(f_layers) | set(b_layers))]
    else:
        groups = [(fwd, bwd)]
    out: list[tuple[_Segment | None, _Segment | None]] = []
    for f_group, b_group in groups:
        out += _align(f_group, list(reversed(b_group)))
    return out


def _group_key(seg: _Segment) -> SimaiGroup | None:
    return _GROUP_TO_SIMAI[seg.coll.group] if seg.coll is not None else None


def _align(fs: list[_Segment], rbs: list[_Segment]) -> list[tuple[_Segment | None, _Segment | None]]:
    """Pair forward segments with the reversed backward ones, in order on both sides.

    A longest common subsequence on the SimAI group puts a forward collective and a
    backward one of the same group on one record where the order allows (SimAI files
    the record's backward comm under the *forward* group's category, so this keeps its
    TP/EP split right); the segments between two matches are paired up positionally.
    """
    n, m = len(fs), len(rbs)
    fk = [_group_key(x) for x in fs]
    bk = [_group_key(x) for x in rbs]
    lcs = [[0] * (m + 1) for _ in range(n + 1)]
    for i in range(n - 1, -1, -1):
        for j in range(m - 1, -1, -1):
            lcs[i][j] = lcs[i + 1][j + 1] + 1 if fk[i] == bk[j] else max(lcs[i + 1][j], lcs[i][j + 1])
    out: list[tuple[_Segment | None, _Segment | None]] = []
    gap_f: list[_Segment] = []
    gap_b: list[_Segment] = []

    def flush() -> None:
        for k in range(max(len(gap_f), len(gap_b))):
            out.append((gap_f[k] if k < len(gap_f) else None, gap_b[k] if k < len(gap_b) else None))
        gap_f.clear()
        gap_b.clear()

    i = j = 0
    while i < n or j < m:
        if i < n and j < m and fk[i] == bk[j]:
            flush()
            out.append((fs[i], rbs[j]))
            i += 1
            j += 1
        elif j >= m or (i < n and lcs[i + 1][j] >= lcs[i][j + 1]):
            gap_f.append(fs[i])
            i += 1
        else:
            gap_b.append(rbs[j])
            j += 1
    flush()
    return out


def _microbatch_records(fwd: list[_Segment], bwd: list[_Segment], num_layers: int, update_ns: int) -> list[SimaiRecord]:
    records = []
    named_embedding = False
    for f, b in _pairs(fwd, bwd):
        fwd_comm = SimaiComm()
        extra_wg: SimaiComm | None = None
        if f is not None and f.coll is not None:
            if _GROUP_TO_SIMAI[f.coll.group] == SimaiGroup.DP:
                # SimAI's forward column cannot name DP; a forward DP collective (parameter
                # all-gather overlapped with the forward) goes to this record's wg column.
                extra_wg = _comm(f.coll, "wg")
            else:
                fwd_comm = _comm(f.coll, "fwd")
        slots = _backward_record_slots(b)
        if extra_wg is not None:
            if slots["wg_comm"] != SimaiComm():
                raise ConfigError(
                    "format", "simai",
                    f"cannot place forward DP collective {f.coll.name!r} (layer {f.coll.layer}): its record's "  # type: ignore[union-attr]
                    "weight-grad column is taken",
                )
            slots["wg_comm"] = extra_wg
        seg = f if f is not None else b
        assert seg is not None
        if f is not None and not named_embedding and _is_embedding(f):
            # AICB's name for the embedding; SimAI leaves records of this name out of its bubble.
            name, named_embedding = "embedding_layer", True
        else:
            name = _seg_name(seg, num_layers)
        records.append(SimaiRecord(
            name=name,
            fwd_compute_ns=sum(_ns(op) for op in f.computes) if f is not None else 0,
            fwd_comm=fwd_comm,
            update_ns=update_ns,
            **slots,  # type: ignore[arg-type]
        ))
    return records


def _check_times(workload: Workload, stage: StageProgram) -> None:
    for ch in stage.chunks:
        for op in (*ch.forward, *ch.backward):
            if isinstance(op, ComputeOp) and op.time_s is None:
                _no_time(workload, op)
    for op in stage.iteration:
        if isinstance(op, ComputeOp) and op.time_s is None:
            _no_time(workload, op)


def _no_time(workload: Workload, op: ComputeOp) -> None:
    raise ConfigError(
        "gpu", workload.gpu or None,
        f"SimAI files need compute times, but op {op.name!r} (layer {op.layer}, {op.phase.value}) has none; "
        "pass --gpu so that compute_profile times every op",
    )


def _pp_comm_bytes(workload: Workload, stage: StageProgram) -> int:
    """PP message size for the header: the largest send/recv of the stage (0 without PP)."""
    par = workload.parallel
    if par.pp == 1:
        return 0
    sizes = [op.bytes for ch in stage.chunks for op in (*ch.forward, *ch.backward)
             if isinstance(op, CollectiveOp) and op.group == Group.PP]
    if sizes:
        return int(max(sizes))
    # Activation between stages: b * s/cp * h elements, sequence-split over tp under SP.
    tokens = par.micro_batch * par.seq_length // par.cp
    if par.sp:
        tokens //= par.tp
    return tokens * workload.model.hidden_size * par.dtype_bytes


def workload_to_simai(workload: Workload, stage: int = 0, *, update_ns: int = AICB_UPDATE_NS) -> SimaiWorkload:
    """SimAI records for one pipeline stage of ``workload`` (see the module docstring)."""
    par = workload.parallel
    stages = {st.stage: st for st in workload.stages}
    if stage not in stages:
        raise ConfigError("stage", stage, f"valid stages: 0..{par.pp - 1}")
    if par.cp > 1:
        raise ConfigError("cp", par.cp, "SimAI's format has no context-parallel group; export with cp=1")
    st = stages[stage]
    _check_times(workload, st)
    for _s, _c, op in workload.ops():
        if _s == stage and isinstance(op, CollectiveOp) and op.group not in _LEFT_OUT:
            _check_collective(op)
    num_layers = workload.model.num_layers
    fwd_ops = [op for ch in st.chunks for op in ch.forward]
    bwd_ops = [op for ch in reversed(st.chunks) for op in ch.backward]
    block = _microbatch_records(_segments(fwd_ops), _segments(bwd_ops), num_layers, update_ns)
    iteration = []
    for seg in _segments(list(st.iteration)):
        slots = _backward_record_slots(seg)
        last = seg.coll if seg.coll is not None else seg.computes[-1]
        name = "_".join(f"iter_{last.name}".split())
        iteration.append(SimaiRecord(name=name, fwd_compute_ns=0, fwd_comm=SimaiComm(), update_ns=update_ns, **slots))  # type: ignore[arg-type]
    records = tuple(reversed(iteration)) + tuple(block) * par.num_microbatches
    header = SimaiHeader(
        policy="HYBRID_TRANSFORMER_FWD_IN_BCKWD",
        tp=par.tp, ep=par.ep, pp=par.pp, vpp=par.vpp, ga=par.num_microbatches, all_gpus=par.world_size,
        checkpoints=(), checkpoint_initiates=(), pp_comm=_pp_comm_bytes(workload, st),
    )
    return SimaiWorkload(header=header, records=records)


# --------------------------------------------------------------------------- import
def _record_key(rec: SimaiRecord) -> tuple:
    """What must repeat across micro-batches: names and communication, not compute times
    (AICB's AIOB mode adds the optimizer's time to the first micro-batch's embedding)."""
    return (rec.name, rec.fwd_comm, rec.ig_comm, rec.wg_comm, rec.policy)


def find_microbatch_block(records: tuple[SimaiRecord, ...], ga: int) -> tuple[int, int]:
    """(start, length) of the ``ga`` consecutive micro-batch blocks.

    Blocks must agree in record names and communication (compute times may differ).
    The longest block length that repeats ``ga`` times back to back wins; records before
    and after the blocks are the once-per-iteration ones. With ga = 1 the whole file is
    one micro-batch. Raises ``ValueError`` when no such block exists.
    """
    n = len(records)
    if ga == 1:
        return 0, n
    # Each distinct key as a small int (a file read from disk shares one record object per
    # distinct line, so most records are looked up by identity): the search below then
    # compares ints, and gives the same answer as comparing the keys themselves.
    ids: dict[tuple, int] = {}
    by_obj: dict[int, int] = {}
    keys = []
    for r in records:
        k = by_obj.get(id(r))
        if k is None:
            k = by_obj[id(r)] = ids.setdefault(_record_key(r), len(ids))
        keys.append(k)
    # Every record of a block repeats ga times, so a block is at most as long as the records
    # whose key occurs ga times or more, over ga: without this bound a file with no block
    # (or a long once-per-iteration part) costs O(n^2 / ga) comparisons.
    counts = Counter(keys)
    repeated = sum(1 for k in keys if counts[k] >= ga)
    longest = min(n // ga, repeated // ga)
    if n * longest > 4_000_000:  # a long search: one vectorised pass per length (numpy only here)
        return _find_block_vectorised(keys, ga, longest)
    for length in range(longest, 0, -1):
        need = length * (ga - 1)
        run = 0
        for i in range(n - length):
            run = run + 1 if keys[i] == keys[i + length] else 0
            if run >= need:
                return i - need + 1, length
    raise ValueError(f"no {ga} identical consecutive micro-batch blocks")


def _find_block_vectorised(keys: list[int], ga: int, longest: int) -> tuple[int, int]:
    """find_microbatch_block's search for long files: for each length, the first window of
    ``length * (ga - 1)`` consecutive positions where a record equals the one ``length``
    later, from a running sum (the same answer as the loop, in C). The loop stays for short
    searches: most files match at the first length tried, and importing numpy costs more
    than that whole loop."""
    import numpy as np

    arr = np.asarray(keys, dtype=np.int64)  # keys are already small ints (record ids)
    for length in range(longest, 0, -1):
        need = length * (ga - 1)
        eq = arr[:-length] == arr[length:]
        if need > eq.size:
            continue
        run = np.concatenate(([0], np.cumsum(eq, dtype=np.int64)))
        hit = np.flatnonzero(run[need:] - run[:-need] == need)
        if hit.size:
            return int(hit[0]), length
    raise ValueError(f"no {ga} identical consecutive micro-batch blocks")


def _mean_times(records: tuple[SimaiRecord, ...], start: int, length: int, ga: int) -> list[SimaiRecord]:
    """One micro-batch block whose compute times are the mean over the ``ga`` blocks.

    Our workload holds one micro-batch program, so per-micro-batch differences (AIOB's
    first micro-batch) cannot be kept; the mean keeps the total compute exact.
    """
    out = []
    for k in range(length):
        copies = [records[start + b * length + k] for b in range(ga)]
        rec = copies[0]
        if any(c is not rec and c != rec for c in copies[1:]):
            rec = replace(
                rec,
                fwd_compute_ns=sum(c.fwd_compute_ns for c in copies) / ga,  # type: ignore[arg-type]
                ig_compute_ns=sum(c.ig_compute_ns for c in copies) / ga,  # type: ignore[arg-type]
                wg_compute_ns=sum(c.wg_compute_ns for c in copies) / ga,  # type: ignore[arg-type]
            )
        out.append(rec)
    return out


def _op_kind(name: str) -> OpKind:
    low = name.lower()
    if "embedding" in low and "grad" not in low:
        return OpKind.EMBEDDING
    if "optimizer" in low or "param_compute" in low:
        return OpKind.OPTIMIZER
    if "cross_entropy" in low:
        return OpKind.LOSS
    if "norm" in low:
        return OpKind.NORM
    return OpKind.GEMM


_IMPORT_GROUP: dict[SimaiGroup, Group] = {
    SimaiGroup.TP: Group.TP, SimaiGroup.EP: Group.EP, SimaiGroup.DP: Group.DP, SimaiGroup.DP_EP: Group.EDP,
}


def _record_ops(sw: SimaiWorkload, rec: SimaiRecord, layer: int, phases: dict[Column, Phase],
                sizes: dict[SimaiGroup, int], dtype: str) -> dict[Column, list[Op]]:
    out: dict[Column, list[Op]] = {}
    compute_ns = {"fwd": rec.fwd_compute_ns, "ig": rec.ig_compute_ns, "wg": rec.wg_compute_ns}
    for col in ("fwd", "ig", "wg"):
        ops: list[Op] = []
        ns = compute_ns[col]
        if ns > 0:
            ops.append(ComputeOp(
                name=rec.name, layer=layer, phase=phases[col], kind=_op_kind(rec.name), shape=(), dtype=dtype,
                flops=0.0, bytes=0.0, time_s=ns * 1e-9, source=TimeSource.IMPORTED,
            ))
        comm = rec.comm(col)  # type: ignore[arg-type]
        group = rec.group(col)  # type: ignore[arg-type]
        size = sw.effective_bytes(rec, col)  # type: ignore[arg-type]
        if comm.kind is not None and group in _IMPORT_GROUP and size > 0:
            ours = _IMPORT_GROUP[group]
            ops.append(CollectiveOp(
                name=f"{rec.name}.{col}", layer=layer, phase=phases[col], kind=comm.kind, group=ours,
                group_size=sizes[group], bytes=size, overlappable=(col == "wg"),
            ))
        out[col] = ops  # type: ignore[index]
    return out


def simai_to_workload(
    sw: SimaiWorkload,
    *,
    gpus: int | None = None,
    seq_length: int = 2048,
    micro_batch: int = 1,
    dtype: str = "bf16",
    model: ModelConfig | None = None,
) -> Workload:
    """A one-stage :class:`Workload` that runs a SimAI file on our engine.

    ``gpus`` is SimAI's ``-g`` (default: the header's ``all_gpus``). The pipeline is not
    simulated: the workload covers one stage's ranks (world size gpus / pp) with DP, TP
    and EP groups of SimAI's sizes; ``meta['simai_pp']`` keeps the header's pp.
    ``seq_length``, ``micro_batch`` and ``model`` are unknown to a SimAI file and only
    matter for throughput figures; the default model is a placeholder.
    """
    path = sw.source or "<simai>"
    h = sw.header
    check_runnable(h, path)
    tp, pp, ga = h.tp, h.pp, h.ga
    assert tp and pp and ga
    ep = h.ep or 1
    g = gpus if gpus is not None else h.all_gpus
    if g is None:
        raise ConfigError("gpus", None, f"{path} has no all_gpus in its header; pass the GPU count (SimAI's -g)")
    if not isinstance(g, int) or isinstance(g, bool):
        raise ConfigError("gpus", g, "must be a whole number of GPUs")
    check_limit("gpus", g, "MAX_RANKS", "ranks")
    check_limit("ga", ga, "MAX_MICROBATCHES", "micro-batches")
    if g < 1 or g % (tp * pp):
        raise ConfigError("gpus", g, f"SimAI needs the GPU count divisible by tp*pp = {tp}*{pp} = {tp * pp}")
    dp = g // (tp * pp)
    if dp % ep:
        raise ConfigError("gpus", g, f"DP = {dp} is not divisible by ep = {ep}")
    try:
        start, length = find_microbatch_block(sw.records, ga)
    except ValueError:
        raise FormatError(path, None, f"the header says ga: {ga} but the file has no {ga} consecutive micro-batch "
                                      "blocks with the same record names and communication") from None
    par = ParallelConfig(
        world_size=g // pp, tp=tp, pp=1, ep=ep, micro_batch=micro_batch, global_batch=ga * dp * micro_batch,
        seq_length=seq_length, dtype=dtype,  # type: ignore[arg-type]
    )
    sizes = {SimaiGroup.TP: tp, SimaiGroup.EP: ep, SimaiGroup.DP: dp, SimaiGroup.DP_EP: dp // ep}
    block = tuple(_mean_times(sw.records, start, length, ga))
    mb_phases: dict[Column, Phase] = {"fwd": Phase.FWD, "ig": Phase.BWD_INPUT, "wg": Phase.BWD_WEIGHT}
    forward: list[Op] = []
    backward: list[Op] = []
    per_record = [_record_ops(sw, rec, i, mb_phases, sizes, dtype) for i, rec in enumerate(block)]
    for ops in per_record:
        forward += ops["fwd"]
    for ops in reversed(per_record):
        backward += ops["ig"] + ops["wg"]
    it_phases: dict[Column, Phase] = {"fwd": Phase.ITERATION, "ig": Phase.ITERATION, "wg": Phase.ITERATION}
    iteration: list[Op] = []
    once = list(sw.records[start + length * ga:]) + list(reversed(sw.records[:start]))
    for rec in once:
        ops = _record_ops(sw, rec, -1, it_phases, sizes, dtype)
        iteration += ops["fwd"] + ops["ig"] + ops["wg"]
    chunk = ChunkProgram(stage=0, chunk=0, layers=tuple(range(length)), forward=tuple(forward), backward=tuple(backward))
    stage = StageProgram(stage=0, chunks=(chunk,), iteration=tuple(iteration), params=0, dense_params=0)
    if model is None:
        model = ModelConfig(name="simai-import", source=f"SimAI workload {path}; architecture unknown",
                            num_layers=1, hidden_size=1, num_attention_heads=1, vocab_size=1)
    meta = {
        "source": path, "simai_policy": h.policy, "simai_pp": str(pp), "simai_vpp": str(h.vpp or 1),
        "simai_pp_comm_bytes": str(h.pp_comm or 0), "simai_gpus": str(g),
        "note": "imported from SimAI: one pipeline stage, compute times as written, model unknown",
    }
    return Workload(model=model, parallel=par, stages=(stage,), params_total=0, gpu="imported", meta=meta)
