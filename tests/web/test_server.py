"""serve-web's HTTP side without a browser: its guards, its one-line errors, one search at a time.

Units: sizes in bytes, timeouts in seconds.
"""
from __future__ import annotations

import http.client
import json
import subprocess
import sys
import time
from urllib.parse import urlsplit

import pytest

from engine.web.plan import megatron_argv, plan_argv, plan_yaml
from web_helpers import ROOT, cli, cli_summary, env
from workload_gen.core.errors import ConfigError

SMALL = {"model": "llama3-8b", "num_layers": "2", "world_size": "8", "global_batch": "8", "seq_length": "1024",
         "tp": "2"}


def request(server: str, method: str, path: str, body: bytes | str | None = None,
            headers: dict[str, str] | None = None) -> tuple[int, str]:
    u = urlsplit(server)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
    hdrs = {"Content-Type": "application/json", **(headers or {})}
    conn.request(method, path, body=body.encode() if isinstance(body, str) else body, headers=hdrs)
    res = conn.getresponse()
    text = res.read().decode()
    conn.close()
    return res.status, text


def evaluate(server: str, plan: dict) -> dict:
    status, text = request(server, "POST", "/api/evaluate", json.dumps({"plan": plan}))
    assert status == 200, text
    return json.loads(text)


def cli_error(*flags: str) -> str:
    done = cli("run-analytical", *flags, "--json", "-q")
    assert done.returncode == 2 and done.stdout == ""
    return done.stderr.strip()


def test_bad_plans_get_the_clis_line(server):
    # a model that does not exist, a 10^6-layer config, a word where a count goes
    for plan, flags in (({**SMALL, "model": "llama9-1t"}, ["--model", "llama9-1t"]),
                        ({**SMALL, "num_layers": "1000000"}, ["--model", "llama3-8b", "--num-layers", "1000000"]),
                        ({**SMALL, "tp": "two"}, ["--model", "llama3-8b", "--tp", "two"])):
        got = evaluate(server, plan)
        assert set(got) == {"error"}
        assert "\n" not in got["error"] and "Traceback" not in got["error"]
        want = cli_error(*plan_argv(plan))
        assert got["error"] == want
        assert want.startswith("error: ")
    assert "num_layers" in evaluate(server, {**SMALL, "num_layers": "1000000"})["error"]


def test_malformed_requests_are_one_line_400s(server):
    for body in ("{not json", "[1, 2", json.dumps({"plan": "tp=2"}), json.dumps([1]), "\xff"):
        status, text = request(server, "POST", "/api/evaluate", body)
        assert status == 400, text
        assert json.loads(text)["error"].startswith("error: ")
    # a huge upload is refused by its declared size, before it is read
    status, text = request(server, "POST", "/api/evaluate", b"x" * (2 << 20))
    assert status == 400 and "at most 1048576 bytes" in json.loads(text)["error"]
    # a flag smuggled into a value never reaches the parser as a flag: the value is refused whole
    got = evaluate(server, {**SMALL, "tp": "2 --out /tmp/x"})
    assert got == {"error": cli_error(*plan_argv({**SMALL, "tp": "2 --out /tmp/x"}, attached=True))}
    assert "invalid int value: '2 --out /tmp/x'" in got["error"]
    assert evaluate(server, {**SMALL, "tp": "-1"}) == {"error": cli_error(*plan_argv({**SMALL, "tp": "-1"}))}


def test_host_and_origin_are_checked(server):
    port = urlsplit(server).port
    assert request(server, "GET", "/api/meta")[0] == 200
    assert request(server, "GET", "/api/meta", headers={"Host": f"localhost:{port}"})[0] == 200
    status, text = request(server, "GET", "/api/meta", headers={"Host": f"evil.example:{port}"})
    assert status == 403 and "is not this server" in json.loads(text)["error"]
    status, text = request(server, "POST", "/api/evaluate", json.dumps({"plan": SMALL}),
                           headers={"Origin": "http://evil.example"})
    assert status == 403 and "may not use this server" in json.loads(text)["error"]
    assert request(server, "POST", "/api/evaluate", json.dumps({"plan": SMALL}),
                   headers={"Origin": f"http://127.0.0.1:{port}"})[0] == 200


def test_host_rules_loopback_and_every_interface():
    from engine.web.app import HostCheck

    loop = HostCheck("127.0.0.1", 8000)
    assert all(loop.host(h) for h in ("127.0.0.1:8000", "localhost:8000", "[::1]:8000", "LOCALHOST:8000"))
    assert not any(loop.host(h) for h in ("192.168.1.5:8000", "evil.example:8000", "127.0.0.1:8001", None))
    assert loop.origin("http://localhost:8000") and not loop.origin("https://localhost:8000")
    shared = HostCheck("0.0.0.0", 8000)  # --host 0.0.0.0: reachable by address, never by a foreign name
    assert shared.host("192.168.1.5:8000") and shared.host("[fe80::1]:8000") and shared.host("localhost:8000")
    assert not shared.host("evil.example:8000") and not shared.host("192.168.1.5:9999")
    assert shared.origin("http://10.0.0.7:8000") and not shared.origin("http://rebind.evil.example:8000")


def test_only_its_own_static_files(server):
    assert request(server, "GET", "/static/app.js")[0] == 200
    u = urlsplit(server)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
    conn.request("GET", "/")
    res = conn.getresponse()
    assert "default-src 'self'" in res.getheader("Content-Security-Policy")  # nothing loads from elsewhere
    assert b"http://" not in res.read() and b"https://" not in request(server, "GET", "/static/app.js")[1].encode()
    conn.close()
    for path in ("/static/../app.py", "/static/..%2fapp.py", "/static/%2e%2e%2f%2e%2e%2fpyproject.toml",
                 "/static/__init__.py", "/../../pyproject.toml", "/static//etc/passwd"):
        status, text = request(server, "GET", path)
        assert status == 404, (path, status)
        assert "[build-system]" not in text and "root:" not in text


def test_one_search_at_a_time_and_cancel(server):
    big = {"model": "llama3-70b", "world_size": "1024", "global_batch": "1024", "seq_length": "8192"}
    status, text = request(server, "POST", "/api/search", json.dumps({"plan": big}))
    assert status == 200 and json.loads(text)["state"] == "running"
    status, text = request(server, "POST", "/api/search", json.dumps({"plan": SMALL}))
    assert status == 409 and "already running" in json.loads(text)["error"]
    assert json.loads(request(server, "DELETE", "/api/search")[1]) == {"cancelled": True}
    deadline = time.monotonic() + 60
    while json.loads(request(server, "GET", "/api/search")[1])["state"] == "running":
        assert time.monotonic() < deadline, "the search did not stop within 60 s of its cancel"
        time.sleep(0.2)
    assert json.loads(request(server, "GET", "/api/search")[1])["state"] == "cancelled"
    # the next one runs
    assert request(server, "POST", "/api/search", json.dumps({"plan": SMALL}))[0] == 200
    while (state := json.loads(request(server, "GET", "/api/search")[1]))["state"] == "running":
        time.sleep(0.1)
    assert state["state"] == "done" and state["result"]["layouts"]


def test_exports_read_back_to_the_same_run(server, tmp_path):
    plan = {**SMALL, "sp": True, "dist_opt": True, "recompute": "selective", "dtype": "fp8", "fp8_recipe": "tensorwise"}
    want = evaluate(server, plan)["summary"]["iteration_time_s"]
    assert want == cli_summary(*plan_argv(plan))["iteration_time_s"]
    assert cli_summary(*megatron_argv(plan))["iteration_time_s"] == want
    (tmp_path / "plan.yaml").write_text(plan_yaml(plan))
    assert cli_summary("-c", str(tmp_path / "plan.yaml"))["iteration_time_s"] == want
    status, text = request(server, "POST", "/api/flags", json.dumps({"text": " ".join(megatron_argv(plan))}))
    assert json.loads(text)["plan"] == {**{k: int(v) if v.isdigit() else v for k, v in SMALL.items()},
                                        "sp": True, "dist_opt": True, "recompute": "selective", "dtype": "fp8",
                                        "fp8_recipe": "tensorwise"}
    assert want != evaluate(server, {**plan, "fp8_recipe": "delayed"})["summary"]["iteration_time_s"]


def test_system_yaml_pasted(server, tmp_path):
    text = "base: h100\nnics_per_node: 4\nnic_bw: 5.0e10\n"
    plan = {k: v for k, v in SMALL.items() if k != "system"}
    got = evaluate(server, {**plan, "world_size": "16", "global_batch": "16", "system_yaml": text})
    (tmp_path / "my_cluster.yaml").write_text(text)
    want = cli_summary("--system", str(tmp_path / "my_cluster.yaml"), *plan_argv({**plan, "world_size": "16",
                                                                                  "global_batch": "16"}))
    assert got["summary"]["iteration_time_s"] == want["iteration_time_s"]
    assert got["summary"]["iteration_time_s"] != evaluate(server, {**plan, "world_size": "16", "global_batch": "16"})[
        "summary"]["iteration_time_s"]  # half the NICs, slower DP across the two nodes
    bad = evaluate(server, {**plan, "system_yaml": "base: h100\nnic_bw: fast\n"})
    assert bad["error"].startswith("error: ") and "nic_bw" in bad["error"]


def test_hf_config_pasted(server, tmp_path):
    hf = {"model_type": "llama", "hidden_size": 1024, "intermediate_size": 2816, "num_hidden_layers": 2,
          "num_attention_heads": 16, "num_key_value_heads": 4, "vocab_size": 32000,
          "max_position_embeddings": 4096}
    plan = {k: v for k, v in SMALL.items() if k not in ("model", "num_layers")}
    got = evaluate(server, {**plan, "hf_config": json.dumps(hf)})
    path = tmp_path / "config.json"
    path.write_text(json.dumps(hf))
    want = cli_summary("--hf-config", str(path), *plan_argv(plan))
    assert got["summary"]["iteration_time_s"] == want["iteration_time_s"]
    bad = evaluate(server, {**plan, "hf_config": "{\"model_type\": \"llama\""})
    assert bad["error"].startswith("error: ") and "\n" not in bad["error"]


def test_plan_values_are_words_not_flags():
    with pytest.raises(ConfigError, match="unknown field"):
        plan_argv({"out": "/tmp/x"})
    with pytest.raises(ConfigError, match="at most 64 characters"):
        plan_argv({"model": "x" * 65})
    assert plan_argv({"model": "--help"}, attached=True) == ["--model=--help"]  # a value, not the flag
    assert plan_argv({"tp": 4, "sp": False, "pp": ""}) == ["--tp", "4"]


def test_serve_web_cli_errors_and_imports():
    done = cli("serve-web", "--port", "70000")
    assert done.returncode == 2 and done.stderr.strip().startswith("error: --port=70000 is invalid")
    # the simulating commands never load the web libraries
    code = ("import sys; from engine.commands.run import analytical_main; analytical_main(['--model', 'llama3-8b', "
            "'--num-layers', '1', '-q', '--json']); print(sorted(m for m in ('starlette', 'uvicorn', 'engine.web') "
            "if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env(), cwd=ROOT,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"


def test_timeline_rows_read_from_the_compact_form_equal_the_intervals():
    from engine.pipeline import run_workload
    from engine.web.timeline import first_microbatches
    from workload_gen import build
    from workload_gen.config_loading import configs_from_dict

    model, par = configs_from_dict({"model": {"preset": "llama3-8b", "num_layers": 4}, "parallel": {
        "world_size": 16, "tp": 2, "pp": 2, "global_batch": 16, "seq_length": 1024}})
    result = run_workload(build(model, par), "h100", timeline=True)
    fast = first_microbatches(result.intervals, 2)  # Blocks read directly
    slow = first_microbatches(tuple(result.intervals), 2)  # Interval objects
    assert fast == slow
    assert fast["lanes"][0] == "rank 0 compute" and len(fast["rows"]) > 0
    kept = [iv for iv in result.intervals if 0 <= iv.microbatch < 2]
    assert len(fast["rows"]) == len(kept)
    # one op at a time on a compute stream: the kept compute intervals of a rank never overlap
    for lane, name in enumerate(fast["lanes"]):
        if name.endswith("compute"):
            spans = sorted((s, e) for ln, s, e, *_ in fast["rows"] if ln == lane)
            assert all(a[1] <= b[0] + 1e-9 for a, b in zip(spans, spans[1:]))


def test_pasted_flags_without_a_field_are_named_not_dropped(server):
    """Megatron flags the form has no field for (the experts, a capacity factor) are
    listed back, so the page never drops one silently (issue 29); ignored flags (--lr) change
    nothing and are not listed; the fields the form has are filled."""
    text = ("--tensor-model-parallel-size 2 --num-experts 8 --moe-router-topk 2 "
            "--moe-expert-capacity-factor 1.25 --lr 3e-4")
    status, body = request(server, "POST", "/api/flags", json.dumps({"text": text}))
    got = json.loads(body)
    assert got["plan"]["tp"] == 2
    assert got["not_on_form"] == ["--moe-expert-capacity-factor", "--moe-router-topk", "--num-experts"]
    status, body = request(server, "POST", "/api/flags", json.dumps({"text": "--tensor-model-parallel-size 2"}))
    assert json.loads(body)["not_on_form"] == []


def test_nvfp4_is_a_precision_of_the_page(server):
    """FP4 (NVFP4) is offered; on a Blackwell system the page's step equals the CLI's, and its
    Megatron export (--fp4-format e2m1 --fp4-recipe nvfp4) reads back to the same plan; on
    H100 the CLI's refusal is the page's answer."""
    plan = {**SMALL, "system": "b200", "dtype": "fp4"}
    got = evaluate(server, plan)
    assert got["summary"]["iteration_time_s"] == cli_summary(*plan_argv(plan))["iteration_time_s"]
    assert cli_summary(*megatron_argv(plan))["iteration_time_s"] == got["summary"]["iteration_time_s"]
    status, body = request(server, "POST", "/api/flags", json.dumps({"text": " ".join(megatron_argv(plan))}))
    assert json.loads(body)["plan"]["dtype"] == "fp4" and json.loads(body)["not_on_form"] == []
    assert "needs FP4 tensor cores" in evaluate(server, {**SMALL, "system": "h100", "dtype": "fp4"})["error"]


def test_each_form_field_reads_back_from_the_parsers_own_dest():
    """A field's flag and its Megatron spelling both land where the field says run-analytical's
    parser stores them (the form's read-back of pasted flags depends on it)."""
    from engine.commands.run import build_parser
    from engine.web.plan import FIELDS

    dests = {o: a.dest for a in build_parser("analytical")._actions for o in a.option_strings}
    for f in FIELDS:
        if f.dest is None:
            continue
        assert dests[f.flag] == f.dest, f.key
        if f.megatron is not None:
            assert dests[f.megatron] == f.dest, f.key


def test_drawn_timeline_of_a_long_run_equals_the_full_timelines():
    """With many micro-batches the drawing run keeps only a trace window, built from three
    short runs (engine.steady_timeline.WindowTimeline), not simulated: its first micro-batches
    must be those of a run that keeps every interval (an independent simulation)."""
    import tempfile
    from pathlib import Path

    from engine.commands.serve_web import TIMELINE_MICROBATCHES, PlanRunner
    from engine.pipeline import run_workload
    from engine.steady_timeline import WindowTimeline
    from engine.web.timeline import first_microbatches
    from workload_gen import build
    from workload_gen.config_loading import configs_from_dict

    model, par = configs_from_dict({"model": {"preset": "llama3-8b", "num_layers": 4}, "parallel": {
        "world_size": 16, "tp": 2, "pp": 2, "global_batch": 512, "seq_length": 1024}})
    workload = build(model, par)
    assert isinstance(run_workload(workload, "h100", timeline=True, trace_window=2 * TIMELINE_MICROBATCHES).intervals,
                      WindowTimeline)  # the path under test, not a full simulation
    full = first_microbatches(run_workload(workload, "h100", timeline=True).intervals, TIMELINE_MICROBATCHES)
    with tempfile.TemporaryDirectory() as tmp:
        drawn = PlanRunner(Path(tmp)).evaluate({"model": "llama3-8b", "num_layers": "4", "world_size": "16",
                                                "tp": "2", "pp": "2", "global_batch": "512", "seq_length": "1024"})
    assert drawn["timeline"] == full
    assert {mb for *_, mb in full["rows"]} == set(range(TIMELINE_MICROBATCHES))


def test_a_refused_search_is_the_clis_line():
    """A search the library refuses (here an unknown model) fails with the CLI's one line,
    worded once ("error: ..."), after its trip through the search's child process."""
    import tempfile
    from pathlib import Path

    from engine.commands.serve_web import PlanRunner
    from engine.web.search_job import SearchRunner

    with tempfile.TemporaryDirectory() as tmp:
        runner = SearchRunner(PlanRunner(Path(tmp)).search)
        assert runner.start({"model": "llama9-1t", "world_size": "8"})
        runner.wait(120)
        got = runner.view()
    assert got["state"] == "failed" and got["result"] is None
    assert got["error"] == cli_error("--model", "llama9-1t")


def test_the_pipeline_schedule_is_a_field_and_reads_back_from_pasted_flags(server):
    """DualPipeV on the page: the plan runs as run-analytical runs its flags, and pasted
    --pipeline-schedule lands in the field (not in "not on the form")."""
    plan = {**SMALL, "num_layers": "8", "world_size": "8", "tp": "2", "pp": "2", "vpp": "2", "global_batch": "16",
            "pipeline_schedule": "dualpipev"}
    got = evaluate(server, plan)
    assert "error" not in got, got
    status, body = request(server, "POST", "/api/flags", json.dumps({"text": " ".join(megatron_argv(plan))}))
    back = json.loads(body)
    assert back["plan"]["pipeline_schedule"] == "dualpipev" and back["not_on_form"] == []


def test_a_host_sensitive_plan_gets_the_clis_warning(server):
    """The what-if page shows run-analytical's host-sensitive line for a plan whose CPU launch work
    is over half its GPU work (Qwen3-30B-A3B, one sequence a micro-batch, 16 experts per rank on
    B200), word for word; a plan the host keeps up with gets none."""
    plan = {"model": "qwen3-30b-a3b", "num_layers": "4", "world_size": "8", "global_batch": "8", "seq_length": "4096",
            "micro_batch": "1", "ep": "8", "system": "b200", "moe_token_dispatcher": "alltoall"}
    got = evaluate(server, plan)
    done = cli("run-analytical", *plan_argv(plan), "--json", "-q")
    assert done.returncode == 0
    want = [ln for ln in done.stderr.splitlines() if "host-sensitive" in ln]
    assert len(want) == 1 and want[0] in got["notes"]
    assert got["summary"]["extras"]["host_load"]["sensitive"]
    assert not any("host-sensitive" in n for n in evaluate(server, SMALL)["notes"])


def test_a_rack_plan_says_its_tensor_rate_is_carried_by_the_power_law(server):
    """On GB200 the page shows run-analytical's line on the tensor rate it carries from B200's fit
    (x1.20, 1,200 W over 1,000 W), word for word; on H100, whose rate is its own fit, none."""
    from engine.commands.run import throughput_note

    got = evaluate(server, {**SMALL, "system": "gb200-nvl72"})
    lines = [n for n in got["notes"] if n.startswith("tensor rate:")]
    assert lines == [throughput_note(got["summary"])] and "b200's fit x1.20" in lines[0]
    assert not any(n.startswith("tensor rate:") for n in evaluate(server, SMALL)["notes"])
