"""Known causes of differences between two workloads' collectives, AICB's mistakes first.

WHY a table: ``diff-workload`` must not just say "these differ"; a user comparing an
AICB file with ours needs to know which side is right and why. Each rule recognises one
documented cause (shared/data/aicb/README.md, shared/SIMAI_NOTES.md) from what it can
see: record names, group, type, sizes and which side has the calls. A rule explains the
differing sizes it recognises; sizes no rule recognises are reported as unexplained.

Notation as in SIMAI_NOTES.md: b micro-batch, s sequence, h hidden, V vocabulary, P
AICB's per-rank parameter count, tp_comm = 2*b*s*h bytes.
"""
from __future__ import annotations

import re
from collections.abc import Callable
from workload_gen.core.record import record

_DP_SYNC = re.compile(r"^(grad_norm|grad_gather|grad_param_comm|moe_grad_norm\d?)$")


@record
class Entry:
    """One size of one (phase, group, type) row, seen from the AICB side (x) and ours (y)."""

    phase: str
    group: str
    kind: str
    bytes: int
    x_calls: int
    y_calls: int
    x_names: tuple[str, ...]
    y_names: tuple[str, ...]


@record
class Ctx:
    x: object
    """The AICB/SimAI summary (or side A when both are native)."""
    y: object
    rows: list
    """Every row of the diff (some rules look at a neighbouring row)."""
    row: object
    x_is_a: bool

    def x_side(self, row: object) -> tuple:
        return row.a if self.x_is_a else row.b

    def y_side(self, row: object) -> tuple:
        return row.b if self.x_is_a else row.a


def _any(names: tuple[str, ...], pattern: str) -> bool:
    return any(re.search(pattern, n) for n in names)


def _tp1(e: Entry, c: Ctx) -> str | None:
    if e.phase in ("fwd", "bwd") and e.group == "tp" and c.x.sizes.get("tp") == 1 and e.x_calls > e.y_calls:
        return ("AICB writes TP collectives even at tp=1 (its default mode, no SP: an all-reduce of "
                "tp_comm = 2*b*s*h bytes per attention/MLP forward and input-grad); a group of one rank "
                "moves nothing, so trainsim emits none")
    return None


def _embedding_norm(e: Entry, c: Ctx) -> str | None:
    if "embedding_norm" in e.x_names:
        return ("AICB all-reduces the whole embedding gradient (2*V*h bytes) over TP once per micro-batch "
                "(record embedding_norm); Megatron reduces tied-embedding gradients once per iteration over the "
                "embedding group (first and last pipeline stage), which exists only with pp > 1")
    return None


def _layernorm(e: Entry, c: Ctx) -> str | None:
    if "layernorm" in e.x_names:
        return ("without sequence parallelism AICB writes an input-grad all-reduce of 2P bytes (the whole "
                "model's parameters) at a 'layernorm' record; Megatron all-reduces only the layer-norm "
                "gradients, and only under SP (trainsim's sp_grads_ar)")
    return None


def _grad_norm_under_tp(e: Entry, c: Ctx) -> str | None:
    if e.group == "tp" and e.kind == "allgather" and _any(e.x_names, r"^grad_norm$"):
        return ("AICB writes grad_norm's parameter all-gather (2P bytes) in the forward column, which SimAI "
                "reads as the TP group; it is the distributed optimizer's DP all-gather "
                "(trainsim: iter/dp/allgather)")
    return None


def _dp_ag_filed_under_tp(e: Entry, c: Ctx) -> str | None:
    if e.group != "dp" or e.kind != "allgather" or e.x_calls >= e.y_calls:
        return None
    for r in c.rows:
        if (r.phase, r.group, r.kind) == ("iter", "tp", "allgather"):
            if any("grad_norm" in n for col in c.x_side(r) for n in col.names):
                return ("AICB's counterpart of this parameter all-gather is grad_norm's, which SimAI files under "
                        "TP (row iter/tp/allgather)")
    return None


def _dp_sizes(e: Entry, c: Ctx) -> str | None:
    if e.group not in ("dp", "edp") or e.phase != "iter":
        return None
    if not (_any(e.x_names, _DP_SYNC.pattern) or _any(e.y_names, r"grad_rs|param_ag|grad_ar")
            or _row_has(c, _DP_SYNC.pattern)):
        return None
    x_total = sum(col.bytes * col.count for col in c.x_side(c.row))
    y_total = sum(col.bytes * col.count for col in c.y_side(c.row))
    if not x_total or not y_total:
        return None  # a side without this sync at all is another rule's case
    ratio = x_total / y_total if y_total else float("inf")
    per = 4 if e.kind == "reducescatter" else 2
    swiglu = c.y.config.get("model.activation") == "swiglu" if c.y.fmt == "native" else True
    text = (f"AICB sizes gradient sync from its own per-rank parameter count P (reduce-scatter 4P, all-gather 2P "
            f"bytes): P = {x_total // per} from this file vs {y_total // per} parameters here (ratio {ratio:.3f}). "
            "AICB's P multiplies the embedding by 4" + (" and ignores SwiGLU's doubled first MLP weight" if swiglu
                                                         else "") + " (shared/data/aicb/README.md)")
    if sum(col.count for col in c.y_side(c.row)) > 1:
        text += "; trainsim also splits the sync into DDP buckets"
    if e.group == "dp":
        moe = [r for r in c.rows if (r.phase, r.group, r.kind) == ("iter", "edp", e.kind)]
        p_moe = sum(col.bytes * col.count for r in moe for col in c.x_side(r)) // per
        if p_moe:
            text += (f"; AICB's DP P also includes the {p_moe} expert parameters it syncs again on DP_EP "
                     f"(moe_grad_norm), P = {x_total // per - p_moe} without them")
    if e.group == "edp" and abs(ratio - 2 / 3) < 0.01:
        text += "; the ratio 2/3 is exactly the missing SwiGLU doubling of the experts' fc1"
    return text


def _moe_zero(e: Entry, c: Ctx) -> str | None:
    if e.bytes == 0 and _any(e.x_names, r"^moe_grad_norm"):
        return "AICB writes moe_grad_norm collectives on DP_EP for every model; for a dense model they carry 0 bytes"
    return None


def _cross_entropy(e: Entry, c: Ctx) -> str | None:
    if _any(e.x_names, r"^cross_entropy\d") or _any(e.y_names, r"^loss_.*_ar$"):
        return ("vocab-parallel cross-entropy: three all-reduces of 4*b*s bytes (max logit, sum of exponentials, "
                "target logit). AICB writes them once per iteration after the micro-batches; Megatron runs them in "
                "every micro-batch's forward when tp > 1 (the vocabulary is split), as trainsim does")
    return None


def _optimizer_scalars(e: Entry, c: Ctx) -> str | None:
    if e.bytes <= 8 and _any(e.x_names, r"^optimizer\d"):
        return ("AICB's optimizer bookkeeping: 4-byte all-reduces (gradient norm, found-inf, ...). trainsim "
                "leaves scalar all-reduces out: each costs only a latency (~10-20 us) per iteration")
    return None


def _sp_no_backward(e: Entry, c: Ctx) -> str | None:
    if e.phase == "bwd" and e.group == "tp" and c.x.default_mode and c.x.sp and e.y_calls > e.x_calls:
        return ("AICB's default mode with SP writes no backward TP communication; Megatron's backward mirrors "
                "the forward (all-gather before and reduce-scatter after each column/row linear, and re-gathers "
                "the layer input for the weight gradient), as trainsim does")
    return None


def _aiob_zero_rs(e: Entry, c: Ctx) -> str | None:
    if e.phase != "bwd" or e.kind != "reducescatter" or c.x.default_mode:
        return None
    if (e.bytes == 0 and e.x_calls) or (e.y_calls > e.x_calls and _row_has(c, r"_column$", zero=True)):
        return ("AICB's AIOB mode writes the column layers' input-grad reduce-scatter with 0 bytes; Megatron "
                "reduce-scatters the full activation gradient (tp_comm bytes), as trainsim does")
    return None


def _aiob_missing_ag(e: Entry, c: Ctx) -> str | None:
    if (e.phase == "bwd" and e.kind == "allgather" and not c.x.default_mode and c.x.sp
            and e.y_calls > e.x_calls):
        return ("AICB's AIOB mode has the row layers' backward all-gather but not the column layers' re-gather of "
                "their input for the weight gradient (Megatron's SP backward all-gathers it again), nor the "
                "embedding/output layers' backward all-gathers")
    return None


def _embedding_grads(e: Entry, c: Ctx) -> str | None:
    if "embedding_grads" in e.x_names or (_any(e.y_names, r"^sp_grads_ar$") and _row_has(c, r"^embedding_grads$")):
        return ("once per iteration, AICB all-reduces 2*b*s*h bytes over TP as 'embedding_grads'; Megatron "
                "all-reduces the gradients of the SP-replicated parameters (layer norms, biases) over TP "
                "(trainsim's sp_grads_ar, their actual size)")
    return None


def _sp_grads(e: Entry, c: Ctx) -> str | None:
    if _any(e.y_names, r"^sp_grads_ar$") and e.x_calls == 0 and not _row_has(c, r"^embedding_grads$"):
        return ("under SP, Megatron all-reduces the gradients of the parameters every TP rank holds a copy of "
                "(layer norms, biases) over TP once per iteration (trainsim's sp_grads_ar); AICB's file has no "
                "such all-reduce")
    return None


def _sp_embedding(e: Entry, c: Ctx) -> str | None:
    if e.phase == "fwd" and e.group == "tp" and c.x.sp and _any(e.y_names, r"^embedding_(rs|ar)$") \
            and e.y_calls > e.x_calls:
        return ("Megatron's vocab-parallel embedding reduces its output over TP (a reduce-scatter under SP), "
                "as trainsim does; AICB's SP mode writes no embedding communication for this model")
    return None


def _moe_routing(e: Entry, c: Ctx) -> str | None:
    if e.kind == "allgather" and "mlp_moelayer" in e.x_names and e.y_calls == 0 and e.bytes < 1 << 20:
        return ("AICB's MoE layer all-gathers the routing scores over TP before dispatch (a small message); "
                "trainsim's all-to-all dispatcher routes each TP rank's own sequence shard and gathers no scores")
    return None


def _configs_differ(e: Entry, c: Ctx) -> str | None:
    if c.x.fmt != "native" or c.y.fmt != "native":
        return None
    diffs = [k for k in sorted(set(c.x.config) | set(c.y.config)) if c.x.config.get(k) != c.y.config.get(k)
             and k not in ("model.name", "model.source")]
    if diffs:
        shown = ", ".join(f"{k}: {c.x.config.get(k)!r} vs {c.y.config.get(k)!r}" for k in diffs[:6])
        return f"the two workloads were built from different configs ({shown})"
    return None


RULES: tuple[Callable[[Entry, Ctx], str | None], ...] = (
    _tp1, _embedding_norm, _layernorm, _grad_norm_under_tp, _dp_ag_filed_under_tp, _dp_sizes, _moe_zero,
    _cross_entropy, _optimizer_scalars, _sp_no_backward, _aiob_zero_rs, _aiob_missing_ag, _embedding_grads,
    _sp_grads, _sp_embedding, _moe_routing, _configs_differ,
)


def _row_has(c: Ctx, pattern: str, zero: bool = False) -> bool:
    """Whether AICB's side of this row has a record matching ``pattern`` (of 0 bytes if ``zero``)."""
    return any(re.search(pattern, n) for col in c.x_side(c.row) if (col.bytes == 0 or not zero) for n in col.names)


def explain(row, a, b, rows) -> dict:
    """{'explanations': (...), 'unexplained': (sizes...)} for a row that differs."""
    x, y = (b, a) if (b.fmt == "simai" and a.fmt != "simai") else (a, b)
    ctx = Ctx(x, y, rows, row, x is a)
    texts: list[str] = []
    unexplained: list[int] = []
    for nbytes, na, nb, names_a, names_b in row.sizes():
        if na == nb:
            continue
        xc, yc, xn, yn = (nb, na, names_b, names_a) if x is b else (na, nb, names_a, names_b)
        e = Entry(row.phase, row.group, row.kind, nbytes, xc, yc, tuple(dict.fromkeys(xn)), tuple(dict.fromkeys(yn)))
        found = [t for rule in RULES if (t := rule(e, ctx)) is not None]
        if not found:
            unexplained.append(nbytes)
        for t in found:
            if t not in texts:
                texts.append(t)
    return {"explanations": tuple(texts), "unexplained": tuple(unexplained)}
