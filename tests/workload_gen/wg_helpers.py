"""Small helpers shared by the workload_gen tests."""
from __future__ import annotations

from workload_gen import build
from workload_gen.config_loading import configs_from_dict
from workload_gen.core.records import CollectiveOp, ComputeOp, Phase, Workload


def make(model: str | dict, **settings) -> Workload:
    """Build from a preset name (or model mapping) and flat parallel/training settings."""
    from workload_gen.config_loading import LAYOUT_KEYS

    layout = {k: v for k, v in settings.items() if k in LAYOUT_KEYS}
    training = {k: v for k, v in settings.items() if k not in LAYOUT_KEYS}
    m, p = configs_from_dict({"model": model, "parallel": layout, "training": training})
    return build(m, p)


def layer_ops(w: Workload, layer: int, section: str = "fwd", stage: int | None = None):
    """Ops of one layer in the chunk that holds it."""
    for st in w.stages:
        for ch in st.chunks:
            if layer in ch.layers or (layer == -1 and st.stage == 0 and ch.chunk == 0) or (
                    layer == w.model.num_layers and st.stage == w.parallel.pp - 1 and ch.chunk == w.parallel.vpp - 1):
                ops = ch.forward if section == "fwd" else ch.backward
                return [op for op in ops if op.layer == layer]
    raise AssertionError(f"layer {layer} not found")


def colls(ops, group=None, kind=None, phase=None):
    return [op for op in ops if isinstance(op, CollectiveOp)
            and (group is None or op.group == group) and (kind is None or op.kind == kind)
            and (phase is None or op.phase == phase)]


def comps(ops, kind=None, phase=None):
    return [op for op in ops if isinstance(op, ComputeOp)
            and (kind is None or op.kind == kind) and (phase is None or op.phase == phase)]


__all__ = ["make", "layer_ops", "colls", "comps", "Phase"]
