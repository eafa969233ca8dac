"""Double binary tree all-reduce (NCCL's tree), and the tree shapes NVLS-tree reuses.

Shape (what NCCL builds): inside a node the GPUs form a chain; across nodes, the nodes
form a binary tree. Two complementary node trees are used at once, each carrying half the
channels (channel c uses tree c mod 2), so that a node that is a leaf in one tree is
interior in the other and every NIC carries about the same load.

Node tree 0 (in-order bit tree over node indices 0..N-1): node i > 0 with lowest set bit
``b`` has parent ``(i XOR b) | 2b``, or ``i XOR b`` when that is out of range; node 0 is
the root. Odd nodes are leaves. Tree 1: for even N the mirror image (i -> N-1-i), for odd
N the tree shifted by one (i -> i+1 mod N); both turn the leaves of tree 0 into interior
nodes.

Across nodes, channels 2r and 2r+1 (one per tree) share rail r: each channel's chain
inside a node starts at the GPU of that rail (``tree_slot``), and that head GPU is the one that talks to the parent and children nodes, so every
inter-node tree edge joins two GPUs of the same rail.

All-reduce on a tree, pipelined by chunks: every chunk is reduced up to the root (an up
flow from x waits for the up flows of x's children, same chunk) and broadcast back down (a
down flow into y waits for the down flow into y's parent, or, at the root, for the up
flows into the root). With height h (edges from the root to the deepest rank) and K chunks
of time t each on equal links: T = 2h*latency + (2h + K - 1)*t.
"""
from __future__ import annotations

from collectives.algorithms.pipeline import Template, emit
from collectives.common import Context, chunk_count, nested_split
from collectives.flowgraph import FlowBuilder
from collectives.registry import ALGORITHMS


def btree_parents(N: int) -> list[int]:
    """Parent of each node in tree 0 (-1 for the root, node 0)."""
    par = [-1] * N
    for i in range(1, N):
        low = i & -i
        up = (i ^ low) | (low << 1)
        par[i] = up if up < N else i ^ low
    return par

def dtree_parents(N: int, tree: int) -> list[int]:
    base = btree_parents(N)
    if tree == 0 or N == 1:
        return base
    if N % 2 == 0:
        return [-1 if base[N - 1 - i] < 0 else N - 1 - base[N - 1 - i] for i in range(N)]
    return [-1 if base[(i - 1) % N] < 0 else (base[(i - 1) % N] + 1) % N for i in range(N)]

def tree_height(parents: list[int]) -> int:
    """Edges on the longest root-to-leaf path."""
    depth = [0] * len(parents)
    best = 0
    for i in range(len(parents)):
        d, x = 0, i
        while parents[x] >= 0:
            x, d = parents[x], d + 1
        depth[i] = d
        best = max(best, d)
    return best

def tree_slot(ctx: Context, channel: int) -> int:
    """Which rotation of a node's GPUs (hence which rail) a tree channel uses: channels 2r
    and 2r+1 carry trees 0 and 1 on the same rail across nodes; inside one node there is
    no second tree, so every channel takes its own rotation."""
    return channel // 2 if ctx.layout.num_nodes > 1 else channel


def rank_tree(ctx: Context, channel: int) -> dict[int, int]:
    """rank -> parent rank (-1 at the root) for one channel: node tree + per-node chains."""
    L = ctx.layout
    node_par = dtree_parents(L.num_nodes, channel % 2)
    chains = [L.chain(k, tree_slot(ctx, channel)) for k in range(L.num_nodes)]
    par: dict[int, int] = {}
    for k, ch in enumerate(chains):
        par[ch[0]] = chains[node_par[k]][0] if node_par[k] >= 0 else -1
        for a, bb in zip(ch, ch[1:]):
            par[bb] = a
    return par

def tree_allreduce_height(nodes: int, per_node: int) -> int:
    """Height (edges) of the rank tree, the worse of the two trees."""
    hs = [tree_height(dtree_parents(nodes, t)) for t in ((0, 1) if nodes > 1 else (0,))]
    # deepest path: down the node tree to a node, then along its chain
    return max(hs) + per_node - 1

def add_up_down(t: Template, par: dict[int, int], channel: int, root_extra=(), step0: int = 0,
                own_input: dict[int, int] | None = None) -> dict[str, dict]:
    """Add up (reduce) and down (broadcast) edges of one rank tree to ``t``.

    Returns the edges by rank: ``up[x]`` (x -> parent) and ``down[y]`` (parent -> y), and
    ``into_root`` (the up edges into the root). ``root_extra`` are template edges the root's
    down flows must also wait for. ``own_input[x]``, when given, is an edge a rank's up flow
    must wait for besides its children (NVLS-tree: the node's partial sum from its switch).
    """
    kids: dict[int, list[int]] = {x: [] for x in par}
    root = -1
    for x, p in par.items():
        if p < 0:
            root = x
        else:
            kids[p].append(x)
    height: dict[int, int] = {}
    order: list[int] = []

    def visit(x: int) -> int:  # iterative post-order would be longer; trees here are shallow
        h = 0
        for y in kids[x]:
            h = max(h, visit(y) + 1)
        height[x] = h
        order.append(x)
        return h

    H = visit(root)
    up: dict[int, int] = {}
    for x in order:  # post-order: children before parents
        if x != root:
            own = [own_input[x]] if own_input is not None else []
            up[x] = t.edge(x, par[x], channel, step0 + height[x], own + [up[y] for y in kids[x]])
    into_root = [up[y] for y in kids[root]] + list(root_extra)
    down: dict[int, int] = {}
    frontier, depth = [root], 0
    while frontier:
        nxt = []
        for x in frontier:
            for y in kids[x]:
                deps = into_root if x == root else [down[x]]
                down[y] = t.edge(x, y, channel, step0 + H + depth, deps)
                nxt.append(y)
        frontier, depth = nxt, depth + 1
    return {"up": up, "down": down, "into_root": into_root, "root": root, "height": H}

@ALGORITHMS.register_algorithm("tree", ("allreduce",), "NCCL double binary tree across nodes, chains inside nodes")
def build_tree(ctx: Context, b: FlowBuilder) -> str:
    C = ctx.channels
    K = chunk_count(nested_split(ctx.nbytes, (C,)).max(), ctx.protocol)
    t = Template()
    for c in range(C):
        add_up_down(t, rank_tree(ctx, c), c)
    emit(b, t, nested_split(ctx.nbytes, (C, K)))
    return "all"

def node_tree_heads(ctx: Context, channel: int) -> tuple[list[int], list[int]]:
    """(node parents, head GPU of each node) for one channel."""
    L = ctx.layout
    return dtree_parents(L.num_nodes, channel % 2), [L.chain(k, tree_slot(ctx, channel))[0] for k in range(L.num_nodes)]

__all__ = ["btree_parents", "dtree_parents", "tree_height", "tree_allreduce_height", "add_up_down"]
