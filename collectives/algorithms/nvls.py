"""NVLS (NVLink SHARP): all-reduce in the NVSwitch, and NVLS-tree across nodes.

The NVSwitch of node k is an explicit endpoint, id ``-(k+1)`` (flowgraph.switch_id).
Inside a node (``nvls``), per channel and chunk:
- reduce: every GPU j sends its chunk to the switch (j -> SW); the switch adds them
  (``multimem.ld_reduce``);
- multicast: the switch sends the reduced chunk to every GPU (SW -> j,
  ``multimem.st``), after all the node's reduce flows of that chunk.
We fold NCCL's write-back of each GPU's reduced shard into the switch (the switch both
reduces and multicasts). A GPU therefore sends S and receives S; with chunk pipelining the
two directions overlap: T = (1 + 1/K) * S / B_nvls + 2 * latency, where B_nvls is the
per-GPU NVLS rate (timing.LinkModel calibrates it from the system's nvls_busbw).

Across nodes (``nvls_tree``, NCCL's NVLS_TREE), per channel and chunk:
1. reduce into each node's switch (j -> SW_k);
2. the switch hands the node's partial sum to the node's head GPU for this channel
   (SW_k -> head_k; head = GPU on the channel's rail);
3. the heads reduce up the channel's node tree (double binary tree, as ``tree``) and
   broadcast the result down;
4. each head pushes the global result into its switch (head_k -> SW_k), which multicasts
   it to the node's other GPUs (SW_k -> j).
"""
from __future__ import annotations

from collectives.algorithms.pipeline import Template, emit
from collectives.algorithms.tree import add_up_down, node_tree_heads
from collectives.common import Context, chunk_count, nested_split
from collectives.flowgraph import FlowBuilder, switch_id
from collectives.registry import ALGORITHMS
from workload_gen.core.errors import ConfigError


def _pieces(ctx: Context):
    C = ctx.channels
    K = chunk_count(nested_split(ctx.nbytes, (C,)).max(), ctx.protocol)
    return nested_split(ctx.nbytes, (C, K))


@ALGORITHMS.register_algorithm("nvls", ("allreduce",), "NVLink SHARP all-reduce inside one node (reduce + multicast in the NVSwitch)")
def build_nvls(ctx: Context, b: FlowBuilder) -> str:
    L = ctx.layout
    if L.num_nodes != 1:
        raise ConfigError("algorithm", "nvls", f"NVLS alone is single-node; this group spans {L.num_nodes} nodes (use nvls_tree)")
    sw = switch_id(L.node_ids[0])
    t = Template()
    for c in range(ctx.channels):
        red = [t.edge(j, sw, c, 0) for j in L.local[0]]
        for j in L.local[0]:
            t.edge(sw, j, c, 1, red)
    emit(b, t, _pieces(ctx))
    return "all"


@ALGORITHMS.register_algorithm("nvls_tree", ("allreduce",), "NVLS inside nodes + double binary tree between node heads")
def build_nvls_tree(ctx: Context, b: FlowBuilder) -> str:
    L = ctx.layout
    if L.num_nodes == 1:
        return build_nvls(ctx, b)
    t = Template()
    for c in range(ctx.channels):
        node_par, heads = node_tree_heads(ctx, c)
        partial = []
        for k, node in enumerate(L.node_ids):
            sw = switch_id(node)
            red = [t.edge(j, sw, c, 0) for j in L.local[k]]
            partial.append(t.edge(sw, heads[k], c, 1, red))
        # the tree among heads; each head's up flow also needs its node's partial sum
        par = {heads[k]: (heads[node_par[k]] if node_par[k] >= 0 else -1) for k in range(L.num_nodes)}
        tr = _head_tree(t, par, c, partial, heads)
        for k, node in enumerate(L.node_ids):
            sw, h = switch_id(node), heads[k]
            ready = tr["into_root"] if h == tr["root"] else [tr["down"][h]]
            push = t.edge(h, sw, c, 3 + 2 * tr["height"], ready)
            for j in L.local[k]:
                if j != h:
                    t.edge(sw, j, c, 4 + 2 * tr["height"], [push])
    emit(b, t, _pieces(ctx))
    return "all"


def _head_tree(t: Template, par: dict[int, int], c: int, partial: list[int], heads: list[int]) -> dict:
    """The tree among node heads: tree.add_up_down, where a head's up flow (and the root's
    down flows) also wait for that node's partial sum from its switch."""
    part_of = dict(zip(heads, partial))
    root = next(x for x, p in par.items() if p < 0)
    return add_up_down(t, par, c, root_extra=[part_of[root]], step0=2, own_input=part_of)


__all__ = ["build_nvls", "build_nvls_tree", "add_up_down"]
