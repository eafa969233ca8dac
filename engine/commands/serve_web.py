"""``serve-web``: the what-if page, a local web server over run-analytical's own code path.

Units: the page's numbers are summary.json's (seconds, bytes); ``--port`` is a TCP port.

The app (engine.web.app) only routes and guards; what a plan means is decided here, by the
CLI's own pieces: a plan becomes run-analytical's argv (engine.web.plan.plan_argv), which
run-analytical's parser reads (its messages are the page's messages) and which runs through
the same library calls as ``run-analytical --json`` (configure the system, build the
workload, run_workload on the analytical backend, summary.json's text), so the numbers on
the page and in ``run-analytical --json`` for the same flags are identical (tests/web check
it). Starlette and uvicorn are imported only when the server starts.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import shlex
import sys
import tempfile
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from engine.commands.parser import OneLineParser, run_cli
from engine.commands.vocab import add_quiet
from workload_gen.core.errors import ConfigError, TrainsimError

TIMELINE_MICROBATCHES = 4
"""Micro-batches the page's timeline shows: enough for the pipeline's warm-up on pp <= 4 and
the steady 1F1B pattern after it."""

VALID_CHOICES = {"tp": (1, 2, 4, 8, 16, 32, 64), "pp": (1, 2, 3, 4, 6, 8, 12, 16, 32), "vpp": (1, 2, 3, 4, 5, 6, 8),
                 "cp": (1, 2, 4, 8, 16), "ep": (1, 2, 4, 8, 16, 32, 64, 128, 256), "etp": (1, 2, 4, 8, 16, 32, 64)}
"""Candidate values of each layout axis the page offers; the library keeps those valid for the
plan (the same check the CLI runs), so these only bound the list's length."""

SEARCH_TOP_K = 10
"""Layouts the page's search table holds: search's own default shows 5 (--top-k); the page has
room for twice that, and the search prunes to it (top_k), so more would cost time."""
HF_MAX_CHARS = 256 * 1024
"""A Hugging Face config.json is a few KB; 256 KB is far beyond any real one."""


class PlanRunner:
    """:class:`engine.web.port.PlanPort` on run-analytical's parser and code path."""

    def __init__(self, workdir: Path) -> None:
        from engine.commands.run import build_parser

        self._workdir = workdir
        self._parser = build_parser("analytical")
        self._parser.exit = _raise_parser_exit  # the parser's one line becomes an error, not an exit
        self._lock = threading.Lock()  # argparse's parser is shared; its parse is quick

    # -- reading a plan -------------------------------------------------------------------
    def _files(self, plan: Mapping[str, Any]) -> dict[str, str]:
        """The plan's pasted texts (a Hugging Face config.json, a system YAML) written to files,
        one per content, so the CLI reads them by path as it reads a user's."""
        from engine.web.plan import FILE_KEYS, HF_CONFIG_KEY

        paths = {}
        for key in FILE_KEYS:
            text = plan.get(key)
            if text in (None, ""):
                continue
            if not isinstance(text, str) or len(text) > HF_MAX_CHARS:
                raise ConfigError(key, f"{len(str(text))} characters", f"a file's text of at most {HF_MAX_CHARS} "
                                  "characters")
            digest = hashlib.sha256(text.encode()).hexdigest()[:16]
            path = self._workdir / digest / ("config.json" if key == HF_CONFIG_KEY else "system.yaml")
            if not path.exists():
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(text, encoding="utf-8")
            paths[key] = str(path)
        return paths

    def _args(self, plan: Mapping[str, Any], extra: tuple[str, ...] = ()) -> tuple[list[str], argparse.Namespace]:
        from engine.web.plan import plan_argv

        files = self._files(plan)
        with self._lock:
            args = self._parser.parse_args([*plan_argv(plan, files, attached=True), *extra])
        return plan_argv(plan, files), args

    # -- the port -------------------------------------------------------------------------
    def meta(self) -> dict[str, Any]:
        from engine.web.plan import FIELDS
        from workload_gen.config_loading import DEFAULT_MODEL
        from workload_gen.core.model_presets import PRESETS
        from workload_gen.core.parallel_config import DTYPE_BYTES, FP8_RECIPES, RECIPE_CHOICES, RECOMPUTES
        from workload_gen.core.system import SYSTEMS

        return {"models": list(PRESETS), "systems": list(SYSTEMS), "dtypes": list(DTYPE_BYTES),
                "recomputes": list(RECOMPUTES), "fp8_recipes": list(FP8_RECIPES), "default_model": DEFAULT_MODEL,
                "dispatchers": list(RECIPE_CHOICES["moe_token_dispatcher"]),
                "flex_backends": list(RECIPE_CHOICES["moe_flex_dispatcher_backend"]),
                "fields": [{"key": f.key, "flag": f.flag, "kind": f.kind} for f in FIELDS],
                "timeline_microbatches": TIMELINE_MICROBATCHES}

    def evaluate(self, plan: Mapping[str, Any]) -> dict[str, Any]:
        """run-analytical --json for the plan, step by step as engine.commands.run._body does
        for a generated workload (the tests compare the two summaries)."""
        from engine.commands.run import (backend_options, event_outputs, host_warning, memory_warning, reject_simai_flags,
                                         throughput_note)
        from engine.pipeline import run_workload
        from engine.web.plan import megatron_argv, plan_yaml
        from engine.web.timeline import first_microbatches
        from network.registry import backend_kind
        from workload_gen import build
        from workload_gen.core.system import load_system
        from workload_gen.core.unmodelled import unmodelled
        from workload_gen.flag_values import configs_from_flags

        argv, args = self._args(plan, ("--json",))
        kind = backend_kind("analytical")
        options = backend_options(kind, args)
        system = kind.configure(options, load_system(args.system))
        reject_simai_flags(args)
        model, par, notes = configs_from_flags(vars(args))
        workload = build(model, par)
        net = kind.from_options(options, system, par.world_size, efficiency=args.efficiency, progress=None)
        result = run_workload(workload, system, profile=args.profile, gpu=args.gpu, timeline=False, backend=net)
        result.extras.update(kind.report(net))
        summary = json.loads(event_outputs(args, result, {})[1]["summary.json"])  # --json's text, as read
        kind.finish(net, None)
        # the warnings run-analytical prints on stderr for this plan, in its words
        notes = [*notes, *(f"warning: run-analytical: {line}" for line in unmodelled(workload.parallel))]
        if summary.get("memory_verdict") in ("does not fit", "edge"):
            notes.append(memory_warning(result, "run-analytical"))
        host = host_warning(result, "run-analytical", lambda s: kind.from_options(
            options, s, par.world_size, efficiency=args.efficiency, progress=None))
        if host:
            notes.append(host)
        carry = throughput_note(summary)  # the line run-analytical prints under "compute times"
        if carry:
            notes.append(carry)
        # The drawing only: a second run keeping the intervals of the first micro-batches
        # (the summary above is the CLI's, computed without a timeline as --json does; the
        # timeline run's own summary is not: its extras name the window, and on a long run its
        # breakdown, built from three short runs, differs from --json's in the last bits).
        drawn = run_workload(result.workload, system, timeline=True, backend=kind.from_options(
            options, system, par.world_size, efficiency=args.efficiency, progress=None),
            trace_window=2 * TIMELINE_MICROBATCHES)
        return {"argv": argv, "command": shlex.join(["run-analytical", *argv, "--json"]),
                "megatron": shlex.join(megatron_argv(plan)), "yaml": plan_yaml(plan),
                "summary": summary, "notes": notes,
                "timeline": first_microbatches(drawn.intervals, TIMELINE_MICROBATCHES),
                "choices": self._choices(args)}

    def _choices(self, args: argparse.Namespace) -> dict[str, list[dict[str, Any]]]:
        """For each layout axis, each candidate value with the library's verdict on the plan
        with that value: None when valid, else the CLI's message."""
        from workload_gen.flag_values import configs_from_flags

        values = vars(args)
        out: dict[str, list[dict[str, Any]]] = {}
        for axis, candidates in VALID_CHOICES.items():
            rows = []
            for v in candidates:
                try:
                    configs_from_flags({**values, f"p_{axis}": v})
                    rows.append({"value": v, "error": None})
                except TrainsimError as exc:
                    rows.append({"value": v, "error": f"error: {exc}"})
            out[axis] = rows
        return out

    def parse_flags(self, text: str) -> dict[str, Any]:
        from engine.web.plan import plan_from_values

        if len(text) > HF_MAX_CHARS:
            raise ConfigError("flags", f"{len(text)} characters", f"at most {HF_MAX_CHARS} characters")
        try:
            tokens = shlex.split(text.replace("\\\n", " "))
        except ValueError as exc:
            raise ConfigError("flags", text[:80], f"not shell words ({exc})") from None
        # A launch line's launcher and its flags (torchrun ... pretrain_gpt.py) come before
        # Megatron's: read from after the script, else from the first flag.
        scripts = [i for i, t in enumerate(tokens) if t.endswith(".py")]
        start = scripts[-1] + 1 if scripts else next((i for i, t in enumerate(tokens) if t.startswith("-")), 0)
        with self._lock:
            args = self._parser.parse_args(tokens[start:])
        plan = plan_from_values(vars(args))
        if getattr(args, "system", None) and "--system" in tokens:
            plan["system"] = args.system
        return {"plan": plan, "not_on_form": self._not_on_form(args)}

    def _not_on_form(self, args) -> list[str]:
        """The pasted flags that change the simulated iteration but have no field on the page:
        named, so that none is dropped silently (issue 29); the CLI still reads them."""
        from engine.web.plan import PARSED_DEST
        from workload_gen.megatron_flags import IGNORED_MEGATRON_FLAGS, ignored_dest

        kept = set(PARSED_DEST.values()) | {"p_fp8", "p_fp4", "p_fp4_recipe", "system", "config", "hf_config"}
        ignored = {ignored_dest(f) for f in IGNORED_MEGATRON_FLAGS}  # they change nothing (the CLI's note)
        out = []
        for action in self._parser._actions:
            dest = action.dest
            if dest in kept or dest in ignored or not action.option_strings or dest in ("help", "version"):
                continue
            value = getattr(args, dest, None)
            if value is not None and value != action.default and value is not False:
                out.append(max(action.option_strings, key=len))
        return sorted(set(out))

    def search(self, plan: Mapping[str, Any], progress: Callable[[int, int], None]) -> dict[str, Any]:
        """``search`` for the plan's model, system, world size, global batch and sequence length
        (every layout axis free), in a child process: the search reports progress only once it
        simulates, after an enumeration and memory phase that takes seconds on a big job, so a
        cancel (``progress`` raising) ends the child instead of waiting for the next report."""
        import multiprocessing
        import queue

        ctx = multiprocessing.get_context("spawn")  # the server runs threads: no fork
        messages = ctx.Queue()
        child = ctx.Process(target=_search_child, args=(dict(plan), str(self._workdir), messages),
                            name="trainsim-web-search", daemon=True)
        child.start()
        last = (0, 0)
        try:
            while True:
                try:
                    kind, payload = messages.get(timeout=SEARCH_POLL_S)
                except queue.Empty:
                    if not child.is_alive():
                        raise ConfigError("search", "the search process", "ended without an answer (out of "
                                          "memory, or killed)") from None
                    progress(*last)  # lets a cancel through while the child enumerates
                    continue
                if kind == "progress":
                    last = payload
                    progress(*payload)
                elif kind == "error":
                    raise _ParserExit(payload)
                else:
                    return payload
        finally:
            if child.is_alive():
                child.terminate()
            child.join(10)

    def search_here(self, plan: Mapping[str, Any], progress: Callable[[int, int], None]) -> dict[str, Any]:
        """The search itself, in this process (one worker): ``search --json``'s document, with
        each layout's form fields and what the pane says beside the counts."""
        from engine.commands.sweep import candidate_row, search_doc
        from engine.sweep.search import search
        from workload_gen.core.memory_fit import allocator_budget
        from workload_gen.core.system import load_system
        from workload_gen.flag_values import configs_from_flags

        keep = ("model", "hf_config", "system", "system_yaml", "num_layers", "world_size", "global_batch", "seq_length",
                "dtype", "fp8_recipe")
        _, args = self._args({k: v for k, v in plan.items() if k in keep})
        model, base, _ = configs_from_flags(vars(args))
        system = load_system(args.system)
        res = search(model, base, system, progress=progress, workers=1, top_k=SEARCH_TOP_K)
        rows = [{**candidate_row(i, c), "plan": _layout_plan(c.parallel)}
                for i, c in enumerate(res.ranked[:SEARCH_TOP_K], 1)]
        return {**search_doc(model, base, system, res, rows), "pruned": res.pruned,
                "capacity_bytes": allocator_budget(system.gpu_spec.memory_bytes, 0.0)}


def _layout_plan(par: Any) -> dict[str, Any]:
    """The form fields of a searched layout: its axes (the expert layout included), the
    switches search turned on and, for an MoE model, the dispatcher and EP overlap it chose,
    so the page loads what was simulated."""
    plan = {k: getattr(par, k) for k in ("tp", "pp", "vpp", "cp", "ep", "micro_batch", "recompute", "sp",
                                         "overlap_grad_reduce", "overlap_param_gather", "tp_comm_overlap")}
    if par.ep > 1:
        plan.update(moe_token_dispatcher=par.moe_token_dispatcher,
                    overlap_moe_expert_parallel_comm=par.overlap_moe_expert_parallel_comm)
        if par.moe_token_dispatcher == "flex":
            plan["moe_flex_dispatcher_backend"] = par.moe_flex_dispatcher_backend
    return {**plan, "etp": "" if par.etp is None else par.etp, "dist_opt": par.distributed_optimizer}


SEARCH_POLL_S = 0.2
"""How often the server looks at a running search between its reports: the delay of a cancel."""


def _search_child(plan: dict[str, Any], workdir: str, messages: Any) -> None:
    """A search process: its progress, then its answer or its error's text, on ``messages``
    (the parent raises it again, and the search runner words it as the page's line)."""
    try:
        def progress(done: int, total: int) -> None:
            messages.put(("progress", (done, total)))

        result = PlanRunner(Path(workdir)).search_here(plan, progress)
        messages.put(("result", result))
    except TrainsimError as exc:
        messages.put(("error", str(exc)))


class _ParserExit(TrainsimError):
    """run-analytical's parser refused the argv; the message is its own line."""


def _raise_parser_exit(status: int = 0, message: str | None = None) -> None:
    raise _ParserExit((message or f"run-analytical: stopped with status {status}").strip())


def build_parser() -> argparse.ArgumentParser:
    ap = OneLineParser(prog="serve-web", description=(
        "Serve the what-if page: a plan's step time, throughput, memory and timeline, updated as you "
        "type, with pinned plans to compare, a layout search and share links (local only by default)."),
        epilog="Example: serve-web --port 8765, then open the URL it prints")
    ap.add_argument("--host", default="127.0.0.1", metavar="ADDR",
                    help="address to listen on (default 127.0.0.1: this machine only)")
    ap.add_argument("--port", type=int, default=8765, metavar="N", help="TCP port (default 8765; 0 picks a free one)")
    add_quiet(ap, help="no request log on stderr (errors still print)")
    return ap


def serve(host: str, port: int, quiet: bool = False, ready: Callable[[str], None] | None = None) -> None:
    """Run the server until interrupted; ``ready(url)`` once it listens (the URL with the real port)."""
    import socket

    import uvicorn

    from engine.web.app import create_app

    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise ConfigError("--port", port, f"cannot listen on {host}:{port} ({exc.strerror}); give another --port "
                          "or 0 for a free one") from None
    sock.listen(128)  # listening before the URL is printed: a client that reads it at once gets queued, not refused
    real_port = sock.getsockname()[1]
    with tempfile.TemporaryDirectory(prefix="trainsim-web-") as tmp:
        app = create_app(PlanRunner(Path(tmp)), host, real_port)
        shown = f"[{host}]" if ":" in host else host
        url = f"http://{shown}:{real_port}/"
        (ready or (lambda u: print(f"serve-web: open {u} (Ctrl-C stops)", flush=True)))(url)
        config = uvicorn.Config(app, log_level="warning", access_log=not quiet)
        uvicorn.Server(config).run(sockets=[sock])


def main(argv: list[str] | None = None) -> int:
    """``serve-web``."""
    def body() -> int:
        args = build_parser().parse_args(argv)
        if not 0 <= args.port <= 65535:
            raise ConfigError("--port", args.port, "a TCP port, 0 to 65535 (0: a free one)")
        try:
            import starlette  # noqa: F401
            import uvicorn  # noqa: F401
        except ImportError as exc:
            raise ConfigError("serve-web", exc.name, "needs the web extra: pip install -e '.[web]'") from None
        serve(args.host, args.port, args.quiet)
        return 0

    return run_cli(body)


if __name__ == "__main__":
    sys.exit(main())
