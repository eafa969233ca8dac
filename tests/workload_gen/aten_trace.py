"""Bytes and kernels of eager PyTorch code, counted from a real autograd run: each ATen op
that runs (views excluded) and the bytes of its input and output tensors. The byte counts of
Megatron's eager element-wise sequences (workload_gen.costs) are checked against this, not
against the code under test. Autograd's formulas are the same on the CPU and on a GPU."""
from __future__ import annotations

from collections.abc import Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

_VIEWS = {"slice", "split", "split_with_sizes", "chunk", "view", "_unsafe_view", "alias", "expand", "as_strided",
          "detach", "narrow", "unsqueeze", "squeeze", "permute", "transpose", "select", "unbind", "reshape",
          "lift_fresh", "t"}


class AtenBytes(TorchDispatchMode):
    """Sums, over the ATen ops that run (views excluded), the bytes of each op's tensors of at
    least ``big`` elements (the activations, not the small per-position or per-expert vectors
    beside them), and counts the ops."""

    def __init__(self, big: int) -> None:
        super().__init__()
        self.big, self.bytes, self.ops = big, 0, []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = func.overloadpacket.__name__
        if name in _VIEWS:
            return out
        ins = [a for a in tree_flatten((args, kwargs))[0] if isinstance(a, torch.Tensor)]
        outs = [o for o in tree_flatten(out)[0] if isinstance(o, torch.Tensor)]
        if name == "copy_":
            ins = ins[1:]  # writes self, reads src
        elif name.endswith("_"):
            outs = ins[:1]  # in place: reads its inputs, writes self
        self.bytes += sum(t.numel() * t.element_size() for t in ins + outs if t.numel() >= self.big)
        self.ops.append(name)
        return out


def forward_backward(fn: Callable[[], torch.Tensor], big: int) -> tuple[AtenBytes, AtenBytes]:
    """Run ``fn`` (building its graph from leaves that require grad) and its backward with a
    gradient of ones made outside the count: the forward's and the backward's tallies."""
    fwd = AtenBytes(big)
    with fwd:
        y = fn()
    grad = torch.ones_like(y)
    bwd = AtenBytes(big)
    with bwd:
        y.backward(grad)
    return fwd, bwd
