"""One CLI vocabulary over the ten console commands (engine/commands/vocab.py):
-o/--out, --profile, --algorithm, -q/--quiet and --version mean the same everywhere, and the
old spellings (--output, --db, --algo) still work as deprecated aliases with one note."""
from __future__ import annotations

import argparse
import tomllib
from pathlib import Path

import pytest

from engine.commands.vocab import DeprecatedAlias

REPO = Path(__file__).resolve().parents[2]


def _parsers() -> dict[str, argparse.ArgumentParser]:
    """Every command's parser (compute-profile: each subcommand), by a readable name."""
    from engine.commands.expand_collective import build_parser as collective_parser
    from engine.commands.compute_profile import build_parser as profile_parser
    from engine.commands.compute_profile import subcommands
    from engine.commands.run import build_parser as run_parser
    from engine.commands.sweep import _search_parser, _sweep_parser
    from engine.commands.diff import _trace_parser, _workload_parser
    from engine.commands.gen_workload import build_parser as workload_parser
    from engine.commands.serve_web import build_parser as web_parser

    out = {
        "gen-workload": workload_parser(), "expand-collective": collective_parser(),
        "run-analytical": run_parser("analytical"), "run-ns3": run_parser("ns3"),
        "run-flow": run_parser("flow"),
        "diff-trace": _trace_parser(), "diff-workload": _workload_parser(),
        "sweep": _sweep_parser(), "search": _search_parser(), "serve-web": web_parser(),
    }
    for name, sub in subcommands(profile_parser()).items():
        out[f"compute-profile {name}"] = sub
    return out


PARSERS = _parsers()


def _options(p: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {o: a for a in p._actions for o in a.option_strings}


def test_the_table_covers_every_console_command():
    scripts = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
    assert {name.split()[0] for name in PARSERS} == set(scripts)


@pytest.mark.parametrize("name", sorted(PARSERS))
def test_every_command_speaks_the_same_flags(name):
    opts = _options(PARSERS[name])
    # --version and -q/--quiet everywhere
    assert isinstance(opts["--version"], argparse._VersionAction)
    assert opts["-q"] is opts["--quiet"] and opts["-q"].dest == "quiet"
    # output: -o and --out are one flag (dest out); --output only as the deprecated alias
    if {"-o", "--out", "--output"} & set(opts):
        assert opts["-o"] is opts["--out"] and opts["--out"].dest == "out", name
        assert isinstance(opts["--output"], DeprecatedAlias) and opts["--output"].dest == "out"
    # profile database: --profile; --db only as the deprecated alias
    if {"--profile", "--db"} & set(opts):
        assert opts["--profile"].dest == "profile"
        assert isinstance(opts["--db"], DeprecatedAlias) and opts["--db"].dest == "profile"
    # collective algorithm: --algorithm; --algo only as the deprecated alias
    if "--algo" in opts:
        assert isinstance(opts["--algo"], DeprecatedAlias) and opts["--algo"].dest == "algorithm"
        assert "--algorithm" in opts


@pytest.mark.parametrize("name", sorted(PARSERS))
def test_no_help_text_is_just_the_flag_name(name):
    for action in PARSERS[name]._actions:
        if not action.option_strings or action.help in (None, argparse.SUPPRESS):
            continue
        words = {action.dest, action.dest.removeprefix("m_").removeprefix("p_"),
                 *(o.lstrip("-") for o in action.option_strings)}
        words |= {w.replace("-", "_") for w in words} | {w.replace("_", " ") for w in words}
        assert action.help.strip().lower() not in {w.lower() for w in words}, (name, action.option_strings)
        assert len(action.help) > 12, (name, action.option_strings, action.help)


def test_model_and_training_flags_say_what_they_mean_and_their_unit():
    from workload_gen.field_docs import FIELD_UNIT

    opts = _options(PARSERS["gen-workload"])
    for flag, unit in (("--hidden-size", "elements per token"), ("--seq-length", "tokens"),
                       ("--global-batch", "sequences"), ("--tp", "GPUs"), ("--num-layers", "layers"),
                       ("--ddp-bucket-size", "elements")):
        assert f"[{unit}]" in opts[flag].help, flag
    assert "residual stream" in opts["--hidden-size"].help
    # every numeric field flag names its unit
    for action in PARSERS["gen-workload"]._actions:
        field = action.dest[2:] if action.dest.startswith(("m_", "p_")) else None
        if field in FIELD_UNIT and action.help != argparse.SUPPRESS:
            assert f"[{FIELD_UNIT[field]}]" in action.help, action.option_strings


def _main(command: str):
    from engine.commands.expand_collective import main as collective_main
    from engine.commands.compute_profile import main as profile_main
    from engine.commands.run import analytical_main, ns3_main
    from engine.commands.sweep import search_main, sweep_main
    from engine.commands.diff import diff_trace_main, diff_workload_main
    from engine.commands.gen_workload import main as workload_main
    from engine.commands.serve_web import main as web_main

    return {"gen-workload": workload_main, "compute-profile": profile_main, "expand-collective": collective_main,
            "run-analytical": analytical_main, "run-ns3": ns3_main, "diff-trace": diff_trace_main,
            "diff-workload": diff_workload_main, "sweep": sweep_main, "search": search_main,
            "serve-web": web_main}[command]


@pytest.mark.parametrize("command", ["gen-workload", "compute-profile", "expand-collective", "run-analytical",
                                     "run-ns3", "diff-trace", "diff-workload", "sweep", "search", "serve-web"])
def test_version_in_process(command, capsys):
    from engine.commands.parser import package_version

    with pytest.raises(SystemExit) as exc:
        _main(command)(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.strip() == f"{command} {package_version()}"


TINY = ["--model", "gpt3-125m", "--num-layers", "2", "--world-size", "8", "--global-batch", "8"]


def test_old_spellings_work_with_one_note(tmp_path, capsys):
    main = _main("gen-workload")
    assert main([*TINY, "--output", str(tmp_path / "a.txt"), "-q"]) == 0
    assert main([*TINY, "--out", str(tmp_path / "b.txt"), "-q"]) == 0
    assert (tmp_path / "a.txt").read_text() == (tmp_path / "b.txt").read_text()
    err = capsys.readouterr().err
    assert err.count("note: --output is deprecated; use --out (same meaning)") == 1

    ec = _main("expand-collective")
    assert ec(["--op", "allreduce", "--size", "1MiB", "--ranks", "8", "--algo", "ring", "-q"]) == 0
    out, err = capsys.readouterr()
    assert "algorithm ring" in out and "note: --algo is deprecated; use --algorithm" in err
    assert ec(["--op", "allreduce", "--size", "1MiB", "--ranks", "8", "--algorithm", "ring", "-q"]) == 0
    out, err = capsys.readouterr()
    assert "algorithm ring" in out and err == ""


def test_profile_is_the_database_flag_everywhere(tmp_path, capsys):
    """compute-profile writes with --profile what the other commands read with --profile."""
    db = tmp_path / "p.sqlite"
    csv_path = tmp_path / "rows.csv"
    csv_path.write_text(
        "gpu,kind,shape_key,dtype,phase,time_s,source,flops,bytes,min_s,max_s,repeats,note,torch_version,"
        "cuda_version,device_name,date\n"
        "h100-sxm,gemm,8192x2304x768,bf16,fwd,1e-05,measured,1e9,1e6,1e-05,1e-05,3,,,,,\n")
    profile = _main("compute-profile")
    assert profile(["import-csv", str(csv_path), "--profile", str(db)]) == 0
    assert profile(["stats", "--db", str(db), "-q"]) == 0
    out, err = capsys.readouterr()
    assert "h100-sxm" in out and "note: --db is deprecated; use --profile" in err
    with pytest.raises(SystemExit) as exc:  # a usage error, like argparse's own
        profile(["stats"])
    assert exc.value.code == 2
    assert "required: --profile" in capsys.readouterr().err
    run = _main("run-analytical")
    assert run([*TINY, "--profile", str(db), "-q", "--json"]) == 0
    out, err = capsys.readouterr()
    assert '"iteration_time_s"' in out and "[run-analytical]" not in err


@pytest.mark.parametrize("argv", [
    ["gen-workload", *TINY, "-o", "{tmp}/w.txt"],
    # 4 sequences a micro-batch: the host keeps up (a 1-sequence pass of this 125M model would get
    # the host-sensitive warning, which -q rightly does not silence: tests/engine/test_host_load.py)
    ["run-analytical", *TINY[:-1], "32", "--micro-batch", "4", "-o", "{tmp}/run", "--no-plot"],
    ["expand-collective", "--op", "allgather", "--size", "1MiB", "--ranks", "4", "-o", "{tmp}/f.csv"],
    ["search", *TINY[:4], "--world-size", "8", "--global-batch", "8", "-o", "{tmp}/s.csv"],
])
def test_quiet_leaves_stderr_empty(tmp_path, capsys, argv):
    command, *args = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    assert _main(command)([*args, "-q"]) == 0
    assert capsys.readouterr().err == ""
    assert any(tmp_path.iterdir())


def test_defaults_survive_the_deprecated_aliases():
    """The alias shares the flag's dest; the flag's own default is the one that holds."""
    from engine.commands.compute_profile import build_parser as profile_parser
    from engine.commands.gen_workload import build_parser as workload_parser

    assert workload_parser().parse_args([]).out == "workload.txt"
    assert profile_parser().parse_args(["import-csv", "x.csv"]).profile == "profile.sqlite"
    assert profile_parser().parse_args(["coverage", "--gpu", "h100"]).profile is None
