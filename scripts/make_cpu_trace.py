"""Train a small GPT with torch on the CPU under the PyTorch profiler and save its Kineto trace.

WHY: the trace readers, the calibration import and the diff must be tested on traces that
torch itself produced, not on hand-written JSON. This script makes such a trace in a few
seconds, so CI can produce a fresh one (tests/trace/test_e2e_cpu.py imports this file) and
tests/data/ can ship a small compressed one.

The model is built the way trainsim's workload describes a GPT layer (pre-norm, learned
positions, tied embeddings, biases on the linears):
    embedding (token + position) -> per layer: layernorm, qkv linear, causal SDPA, proj linear,
    residual add, layernorm, fc1, gelu, fc2, residual add -> final layernorm, output linear
    (tied to the embedding), cross-entropy; Adam.
Labels: record_function ranges "embedding.fwd", "layer.<i>.fwd", "head.fwd", "optimizer"
(and torch's own "ProfilerStep#<n>" per step). Backward ops carry no labels of their own;
the reader maps them to their forward op through autograd's sequence numbers.

Usage: python scripts/make_cpu_trace.py OUT.json.gz [--layers 2 --hidden 256 --heads 4
       --seq 128 --vocab 1024 --batch 2 --steps 3 --threads 1]
"""
from __future__ import annotations

import argparse
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class GptSpec:
    layers: int = 2
    hidden: int = 256
    heads: int = 4
    seq: int = 128
    vocab: int = 1024
    batch: int = 2
    steps: int = 3
    """Profiled (active) training steps; one warm-up step runs before them, unprofiled."""
    threads: int = 1
    """torch intra-op threads; 1 keeps CPU timings stable on a shared machine."""
    seed: int = 0


def build_gpt(spec: GptSpec):
    """Return an nn.Module computing the mean cross-entropy loss of (tokens, targets)."""
    import torch
    from torch import nn
    from torch.nn import functional as F

    class Block(nn.Module):
        def __init__(self, index: int) -> None:
            super().__init__()
            self.index = index
            h = spec.hidden
            self.ln1 = nn.LayerNorm(h)
            self.qkv = nn.Linear(h, 3 * h)
            self.proj = nn.Linear(h, h)
            self.ln2 = nn.LayerNorm(h)
            self.fc1 = nn.Linear(h, 4 * h)
            self.fc2 = nn.Linear(4 * h, h)

        def forward(self, x):
            with torch.profiler.record_function(f"layer.{self.index}.fwd"):
                b, s, h = x.shape
                q, k, v = self.qkv(self.ln1(x)).split(h, dim=-1)
                shape = (b, s, spec.heads, h // spec.heads)
                q, k, v = (t.view(shape).transpose(1, 2) for t in (q, k, v))
                a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
                x = x + self.proj(a.transpose(1, 2).reshape(b, s, h))
                return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))

    class Gpt(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tok = nn.Embedding(spec.vocab, spec.hidden)
            self.pos = nn.Embedding(spec.seq, spec.hidden)
            self.blocks = nn.ModuleList(Block(i) for i in range(spec.layers))
            self.ln_f = nn.LayerNorm(spec.hidden)

        def forward(self, tokens, targets):
            with torch.profiler.record_function("embedding.fwd"):
                # Positions looked up per token (b, s), as the workload counts the lookup.
                positions = torch.arange(tokens.shape[1]).expand_as(tokens)
                x = self.tok(tokens) + self.pos(positions)
            for block in self.blocks:
                x = block(x)
            with torch.profiler.record_function("head.fwd"):
                logits = F.linear(self.ln_f(x), self.tok.weight)  # tied output layer
                return F.cross_entropy(logits.view(-1, spec.vocab), targets.view(-1))

    return Gpt()


def profile_training(spec: GptSpec, out: Path) -> dict[str, float]:
    """Train ``spec.steps`` profiled steps (after one warm-up) and write the trace to ``out``.

    Returns wall-clock step times measured outside the profiler's view, for sanity checks.
    """
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function, schedule

    torch.manual_seed(spec.seed)
    torch.set_num_threads(spec.threads)
    model = build_gpt(spec)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4, foreach=False)
    gen = torch.Generator().manual_seed(spec.seed)
    tokens = torch.randint(0, spec.vocab, (spec.batch, spec.seq), generator=gen)
    targets = torch.randint(0, spec.vocab, (spec.batch, spec.seq), generator=gen)

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        loss = model(tokens, targets)
        loss.backward()
        with record_function("optimizer"):
            opt.step()

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp{'.gz' if out.name.endswith('.gz') else ''}")
    walls: list[float] = []
    with profile(
        activities=[ProfilerActivity.CPU],
        record_shapes=True,
        schedule=schedule(wait=0, warmup=1, active=spec.steps, repeat=1),
    ) as prof:
        for _ in range(spec.steps + 1):
            t0 = time.perf_counter()
            step()
            walls.append(time.perf_counter() - t0)
            prof.step()
    prof.export_chrome_trace(str(tmp))
    tmp.replace(out)  # atomic: a failed export leaves no half-written trace behind
    return {"warmup_step_s": walls[0], "mean_profiled_step_s": sum(walls[1:]) / spec.steps}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path, help="trace file to write (.json or .json.gz)")
    for f, default in asdict(GptSpec()).items():
        ap.add_argument(f"--{f}", type=int, default=default)
    args = ap.parse_args(argv)
    spec = GptSpec(**{k: getattr(args, k) for k in asdict(GptSpec())})
    walls = profile_training(spec, args.out)
    print(f"wrote {args.out}; step wall time {walls['mean_profiled_step_s'] * 1e3:.1f} ms "
          f"(warm-up {walls['warmup_step_s'] * 1e3:.1f} ms)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
