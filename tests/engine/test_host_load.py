"""How close the host is to setting the pace (engine.host_launch.host_load) and the warning
run-analytical prints when the prediction hangs on the per-op host cost."""
import json
from dataclasses import replace

import pytest

from compute_profile.attaching import attach
from engine.commands.run import analytical_main
from engine.host_launch import HOST_COST_SPREAD, HostLoad, HostModel, host_load
from workload_gen.builder import build
from workload_gen.core.model_presets import get_preset
from workload_gen.core.parallel_config import ParallelConfig
from workload_gen.core.records import ComputeOp
from workload_gen.core.system import SYSTEMS

OP_S = SYSTEMS["h100"].launch_op_s


def _qwen(layers: int = 2, **kw):
    model = replace(get_preset("qwen3-30b-a3b"), num_layers=layers)
    base = dict(world_size=8, ep=8, global_batch=8, micro_batch=1, seq_length=1024)
    return attach(build(model, ParallelConfig(**{**base, **kw})), "h100-sxm")[0]


def _passes(w):
    for stage in w.stages:
        for chunk in stage.chunks:
            yield chunk.forward
            yield chunk.backward


def _gpu_s(ops) -> float:
    return sum(op.time_s or 0.0 for op in ops if isinstance(op, ComputeOp))


def test_the_load_is_the_host_time_the_engine_charges_over_the_gpu_time():
    """A stage's load is the launch seconds of the engine's own host plans for its passes (the
    costs the simulation advances the CPU by), summed over its chunks, over their GPU compute
    seconds; the busiest stage and direction is reported. PP 2 with 2 virtual stages: 4 chunks."""
    w = _qwen(4, world_size=16, pp=2, vpp=2, global_batch=16)
    got = host_load(w, OP_S)
    model = HostModel(w, OP_S)
    loads = {}
    for stage in w.stages:
        for direction in ("forward", "backward"):
            host = gpu = 0.0
            for c, chunk in enumerate(stage.chunks):
                ops = chunk.forward if direction == "forward" else chunk.backward
                plan = model.plan((stage.stage, c, direction), ops)
                host += sum(plan.launch) if plan is not None else model.pass_totals(ops)[0]
                gpu += _gpu_s(ops)
            loads[stage.stage, direction] = host / gpu
    assert len(w.stages) == 2 and all(len(st.chunks) == 2 for st in w.stages)
    assert got.load == pytest.approx(max(loads.values()), rel=1e-12)
    assert loads[got.stage, got.direction] == pytest.approx(got.load, rel=1e-12)
    assert got.op_s == OP_S


def test_a_pass_over_load_one_is_the_one_the_engine_runs_at_the_hosts_pace():
    """Without pipeline syncs the engine starts a pass with the host at the GPU's clock exactly
    when its launch work exceeds its compute: a load above 1."""
    w = _qwen()
    assert host_load(w, OP_S).load < 1 < host_load(w, 10 * OP_S).load
    for op_s in (OP_S, 10 * OP_S):  # below and above the host-bound line
        model = HostModel(w, op_s)
        for i, ops in enumerate(_passes(w)):
            host, gpu, _ = model.pass_totals(ops)
            plan = model.plan(i, ops)
            if plan is None:  # starts far ahead and never waits: it cannot be host-bound
                assert host <= gpu
            else:
                assert plan.synced == (host > gpu)


def test_a_load_above_one_is_the_passs_simulated_length():
    """What the figure means, against the engine's own timeline: with a host slower per launch
    than any kernel, each kernel starts when its launch ends (the GPU is idle before it), so the
    pass lasts every launch plus the last kernel: load x GPU time + the last kernel's time.
    A 1-layer 125M model on one GPU: no collectives in its passes."""
    from engine.passes import profile_pass

    w = attach(build(replace(get_preset("gpt3-125m"), num_layers=1), ParallelConfig(world_size=1, global_batch=1)),
               "h100-sxm")[0]
    chunk = w.stages[0].chunks[0]
    op_s = 10 * max(op.time_s for op in (*chunk.forward, *chunk.backward))
    model = HostModel(w, op_s)

    def no_collective(op):
        raise AssertionError(op)
    lengths = {}
    for direction, ops in (("forward", chunk.forward), ("backward", chunk.backward)):
        assert all(isinstance(op, ComputeOp) for op in ops)
        prof = profile_pass(ops, no_collective, host=model.plan(direction, ops))
        lengths[direction] = (prof.duration - ops[-1].time_s) / _gpu_s(ops)
    got = host_load(w, op_s)
    assert got.load > 1 and got.waits == 0
    assert got.load == pytest.approx(max(lengths.values()), rel=1e-9)
    assert lengths[got.direction] == pytest.approx(got.load, rel=1e-9)


def test_the_load_scales_with_the_hosts_cost_and_against_the_gpus_speed():
    w = _qwen()
    base = host_load(w, OP_S).load
    assert host_load(w, 2 * OP_S).load == pytest.approx(2 * base, rel=1e-12)
    # every kernel twice as fast: the same launch work against half the GPU time
    halved = replace(w, stages=tuple(replace(st, chunks=tuple(replace(
        ch, forward=tuple(replace(op, time_s=op.time_s / 2) if isinstance(op, ComputeOp) else op for op in ch.forward),
        backward=tuple(replace(op, time_s=op.time_s / 2) if isinstance(op, ComputeOp) else op for op in ch.backward))
        for ch in st.chunks)) for st in w.stages))
    assert host_load(halved, OP_S).load == pytest.approx(2 * base, rel=1e-12)


def test_graphs_lower_the_load_and_an_ideal_host_has_none():
    plain = host_load(_qwen(), OP_S).load
    graphed = host_load(_qwen(cuda_graph_impl="transformer_engine", cuda_graph_scope=("attn", "moe_router")), OP_S)
    assert graphed.load < plain
    assert host_load(_qwen(), 0.0) is None


def test_sensitive_means_a_host_spread_times_slower_would_set_the_pace():
    line = 1.0 / HOST_COST_SPREAD
    assert HostLoad(line, 0, "forward", 0, OP_S).sensitive
    assert not HostLoad(line * 0.999, 0, "forward", 0, OP_S).sensitive
    d = HostLoad(0.75, 1, "backward", 48, OP_S).as_dict()
    assert d == {"load": 0.75, "stage": 1, "direction": "backward", "host_waits": 48,
                 "host_op_s": OP_S, "sensitive": True}


SMALL_EXPERTS = ["--system", "b200", "--model", "qwen3-30b-a3b", "--num-layers", "4", "--ep", "8", "--world-size", "8",
                 "--micro-batch", "1", "--global-batch", "8", "--seq-length", "4096",
                 "--moe-token-dispatcher-type", "alltoall", "-q", "--json"]


def test_run_analytical_warns_even_with_q_and_reports_the_load(capsys):
    """Qwen3-30B-A3B at 4096 tokens per micro-batch on B200 (16 experts per rank, a host wait
    per MoE layer): the forward's launch work is over half its GPU time."""
    assert analytical_main(SMALL_EXPERTS) == 0
    out = capsys.readouterr()
    h = json.loads(out.out)["extras"]["host_load"]
    assert h["sensitive"] and h["load"] * HOST_COST_SPREAD >= 1.0 and h["host_waits"] == 4
    lines = [ln for ln in out.err.splitlines() if "host-sensitive" in ln]
    assert len(lines) == 1 and lines[0].startswith("warning: run-analytical: ")
    assert f"{h['load']:.0%} of its GPU time" in lines[0] and "host_op_s" in lines[0]


def test_the_warning_gives_the_step_a_host_spread_times_slower_would_give(capsys, tmp_path):
    """The line's range is the same job run on a system whose YAML sets host_op_s to
    HOST_COST_SPREAD x the preset's per-op cost (an independent path: the user's own fix);
    a slower host never makes the step shorter."""
    import re

    assert analytical_main(SMALL_EXPERTS) == 0
    out = capsys.readouterr()
    step = json.loads(out.out)["iteration_time_s"]
    (line,) = [ln for ln in out.err.splitlines() if "host-sensitive" in ln]
    m = re.search(r"the step ([\d.]+) s at 2x the per-op cost against ([\d.]+) s, ([+-]\d+)%", line)
    assert m, line
    slow_yaml = tmp_path / "slow.yaml"
    slow_yaml.write_text(f"base: b200\nhost_op_s: {HOST_COST_SPREAD * SYSTEMS['b200'].launch_op_s!r}\n")
    argv = [*SMALL_EXPERTS]
    argv[argv.index("--system") + 1] = str(slow_yaml)
    assert analytical_main(argv) == 0
    slow = json.loads(capsys.readouterr().out)["iteration_time_s"]
    assert float(m.group(1)) == pytest.approx(slow, rel=1e-3) and float(m.group(2)) == pytest.approx(step, rel=1e-3)
    assert slow > step and int(m.group(3)) == round(100 * (slow / step - 1))


def test_a_host_that_keeps_up_is_not_flagged(capsys):
    """The same job with 8 sequences per micro-batch: 8x the GPU work per pass for about the
    same launches; and the default dense job."""
    argv = [*SMALL_EXPERTS]
    argv[argv.index("--micro-batch") + 1] = "8"
    argv[argv.index("--global-batch") + 1] = "64"
    for args in (argv, ["-q", "--json"]):
        assert analytical_main(args) == 0
        out = capsys.readouterr()
        assert not json.loads(out.out)["extras"]["host_load"]["sensitive"]
        assert "host-sensitive" not in out.err


def test_a_sweep_row_carries_the_host_load_of_its_run():
    """sweep and search tabulate the load, so a layout search shows which layouts hang on the host:
    more sequences per micro-batch, the same launches, less of a load."""
    from engine.sweep.point import evaluate_config

    def row(mb: int):
        return evaluate_config({"model": {"preset": "qwen3-30b-a3b", "num_layers": 4}, "system": "b200",
                                "parallel": {"world_size": 8, "ep": 8, "micro_batch": mb, "global_batch": 8 * mb,
                                             "seq_length": 4096, "moe_token_dispatcher": "alltoall"}})
    one, eight = row(1), row(8)
    assert one["status"] == eight["status"] == "ok"
    assert one["host_load"] * HOST_COST_SPREAD >= 1.0 > eight["host_load"] * HOST_COST_SPREAD


def test_search_marks_the_layouts_whose_time_hangs_on_the_host(capsys):
    """search's table names the host-sensitive layouts (as run-analytical warns for one plan) and
    its rows carry the load: fewer sequences per micro-batch load the host more."""
    from engine.commands.sweep import search_main

    argv = ["--model", "qwen3-30b-a3b", "--system", "b200", "--world-size", "8", "--global-batch", "64",
            "--seq-length", "1024", "--num-layers", "4", "-q"]
    assert search_main([*argv, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["layouts"]
    assert rows and all(r["host_load"] > 0 for r in rows)
    assert search_main(argv) == 0
    table = capsys.readouterr().out.splitlines()
    for r in rows:
        line = next(ln for ln in table if ln.split()[:1] == [str(r["rank"])])
        assert ("host-sensitive" in line) == (r["host_load"] * HOST_COST_SPREAD >= 1.0)
    sensitive = [r for r in rows if r["host_load"] * HOST_COST_SPREAD >= 1.0]
    assert sensitive and any(ln.startswith("host-sensitive:") for ln in table)
    by_mb = {}
    for r in rows:
        by_mb.setdefault((r["tp"], r["ep"]), {})[r["micro_batch"]] = r["host_load"]
    pairs = [(m[min(m)], m[max(m)]) for m in by_mb.values() if len(m) > 1]
    assert pairs and all(small > big for small, big in pairs)
