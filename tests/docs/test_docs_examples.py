"""Every command in README.md and docs/*.md runs here, so a documented example cannot break silently.

What is extracted (``python tests/docs/test_docs_examples.py`` prints the inventory):

- fenced ```bash / ```sh / ```shell / ```console blocks, and untagged ``` blocks whose lines
  start with a ``$ `` prompt. A block is split into commands: ``\\`` continuations are joined,
  blank lines and ``#`` comment lines dropped (trailing comments go to bash, which ignores
  them). In a block with ``$`` prompts the other lines are the documented output; ``$ echo $?``
  followed by ``N`` makes N the expected exit code of the command before it, and then the
  first documented output line must appear in the command's output. Every other command must
  exit 0.
- ```python blocks: run with ``python``; an expression statement whose trailing comment is a
  Python literal (``g.algorithm, g.num_flows   # ('nvls_tree', 18432)``) must equal it.

How it runs: each document gets a fresh temporary directory ``TMP/work`` holding symlinks to
the repository's top-level directories (``scripts/``, ``tests/``, ``docker/``, ...) and
``TMP/shared`` pointing at the repository's ``../shared``, so the paths the docs use
(``../shared/data/...``, ``tests/data/...``, ``scripts/...``) resolve while everything a
command writes (``w.txt``, ``run/``) lands in the temporary directory. The document's commands
run there in page order, as a reader following the page would run them, so a later block may
use what an earlier one wrote. Shell variables (``TINY=...``) carry over between commands.
Each command is one test (``-k 'README.md:62'`` runs the commands before it first).

Markers: HTML comments, invisible on the rendered page, on the lines right before a block's
opening fence (several may be stacked; blank lines between them are allowed):

``<!-- docs-test: gpu -->``
    The block needs a GPU. Unless it runs at full size on a machine with a CUDA GPU, each
    command's program is run with ``--help`` and every option the command uses must be listed
    there; with ``ci-replace`` markers the (shrunk) commands also run on the CPU.
``<!-- docs-test: slow -->``
    The block takes minutes at documented size. In CI its commands run shrunk by its
    ``ci-replace`` markers (argument parsing is still checked on the documented command);
    without any ``ci-replace`` it is checked for argument parsing only.
``<!-- docs-test: ci-replace: OLD => NEW -->``
    In CI, replace the text OLD by NEW in the block's commands and setups (repeatable;
    applied in order).
``<!-- docs-test: known-failure: REASON -->``
    The block's commands fail today because of REASON (a bug in a file this change could not
    touch). The test asserts they still fail (reported as XFAIL with the reason) and fails
    once they pass, so the marker gets removed.
``<!-- docs-test: setup: SHELL -->``
    Run SHELL in the document's directory before the block (a file the reader is assumed to
    have). Before a ```python block, SETUP is Python code run before the block.
``<!-- docs-test: file: NAME -->``
    Write the (non-shell) block's text to NAME in the document's directory, e.g. a YAML file
    that later commands read, so the file shown on the page is the file that is tested.
``<!-- docs-test: same-as: DOC -->``
    An excerpt of commands run in DOC: each must appear there verbatim (and is run there).
``<!-- docs-test: exclusive -->``
    The block's commands measure time (a CPU trace that a later command compares): each runs
    with no other docs command beside it.
``<!-- docs-test: measured-output -->``
    The block's documented output holds figures measured on some machine (a real trace, a
    timing): its lines must still be printed, with the same words, but their numbers are not
    compared. Without it every figure a ``$`` block documents must match what the command
    prints now, within 0.1% (``output_mismatch``), except single figures written ``~4.9``
    (measured: a timing in an otherwise deterministic line).
``<!-- docs-test: long-running: TEXT -->``
    The block's command is a server that runs until stopped (``serve-web``): it is started in
    its own process group, passes once its output shows TEXT (within a minute) and, when that
    output names an ``http://`` URL, the URL answers 200; then it is stopped. A command that
    exits first, or never prints TEXT, fails.
``<!-- docs-test: retry: N -->``
    Run the whole block again, up to N more times, when one of its commands fails (a
    timing comparison that another process on a shared machine disturbed); the failed
    attempts are reported with the result.

Two kinds of command are recognised without a marker. ``pip install`` is never run (it would
change the environment the suite runs in): in a command ``A && B`` each ``pip install`` part is
checked against this environment (pinned versions installed, extras defined in pyproject.toml
and installed), ``python -m pytest ...`` (the whole suite) must be the line .ci/run runs, and
the other parts run. ``docker ...`` runs when TRAINSIM_DOCS_FULL=1 and a Docker daemon answers;
otherwise the Dockerfile must exist and the command run inside the image is checked for
argument parsing against the local install.

Size and time. By default (CI size) the gpu and slow blocks run shrunk: the whole file costs
about 175 s of CPU (measured when each of its four ns-3 start-ups JIT-compiled ns-3's headers, ~20 s
each; they now load trainsim's cached core in under a second, docs/ns3.md "Start-up"),
and pages run side by side (TRAINSIM_DOCS_JOBS commands at a time, default the CPU count):
under 2 minutes on 2 idle cores, 3.5 minutes on a 2-core machine at load 5.
Full size: ``TRAINSIM_DOCS_FULL=1 python -m pytest -q -p no:cacheprovider tests/docs`` runs every
command as documented (ci-replace ignored). The gpu blocks then run in full only where torch
sees a CUDA GPU (elsewhere they stay at argument parsing plus the shrunk CPU run) and the
Docker commands only where a Docker daemon answers. Expect tens of minutes (the documented
``search`` and ``run-ns3`` take minutes each, measuring Llama-3 70B's shapes longer on a CPU).
``python tests/docs/test_docs_examples.py`` prints every extracted step and how it is checked.
"""
from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
RUNNER = Path(__file__).resolve().with_name("_run_python_block.py")
FULL = os.environ.get("TRAINSIM_DOCS_FULL") == "1"
TIMEOUT_S = 1800 if FULL else 300

SHELL_LANGS = {"bash", "sh", "shell", "console", "shell-session"}
PROMPT_LANGS = {"console", "shell-session"}
MARKER = re.compile(r"<!--\s*docs-test:\s*(.*?)\s*-->")
MARKER_KINDS = {
    "gpu", "slow", "ci-replace", "known-failure", "setup", "file", "same-as", "exclusive", "retry",
    "measured-output",
    "long-running",
}
LONG_RUNNING_WAIT_S = 60
FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*([^`\s]*)")


def doc_files() -> list[str]:
    return ["README.md", *sorted(p.relative_to(REPO).as_posix() for p in (REPO / "docs").glob("*.md"))]


# --------------------------------------------------------------------------- extraction


@dataclass
class Block:
    doc: str
    line: int  # 1-based line of the opening fence
    lang: str
    body: list[str]
    markers: list[tuple[str, str]]  # (kind, argument)

    def has(self, kind: str) -> bool:
        return any(k == kind for k, _ in self.markers)

    def args(self, kind: str) -> list[str]:
        return [a for k, a in self.markers if k == kind]

    @property
    def is_shell(self) -> bool:
        return self.lang in SHELL_LANGS or (self.lang == "" and any(l.startswith("$ ") for l in self.body))

    @property
    def has_prompts(self) -> bool:
        return self.lang in PROMPT_LANGS or any(l.startswith("$ ") for l in self.body)


@dataclass
class Step:
    """One thing done in a document's directory, in page order."""

    kind: str  # "sh" | "python" | "setup-sh" | "file"
    doc: str
    line: int
    text: str
    block: Block
    expect_rc: int = 0
    output: list[str] = field(default_factory=list)  # documented output lines (prompt blocks)
    arg: str = ""  # file name for "file"; python setup code for "python"

    @property
    def is_test(self) -> bool:
        return self.kind in ("sh", "python")

    @property
    def id(self) -> str:
        return f"{self.doc}:{self.line}"

    @property
    def mode(self) -> str:
        """How this step is checked at the current size (see the module docstring)."""
        b = self.block
        if self.kind == "python":
            return "known-failure" if b.has("known-failure") else "run"
        if b.has("same-as"):
            return "same-as"
        if any(part.strip().startswith("pip install") for part in self.text.split("&&")):
            return "install"  # never run pip here: it would change the environment the suite runs in
        if self.text.startswith("docker "):
            return "run" if FULL and docker_available() else "static"
        if b.has("known-failure"):
            return "known-failure"
        if b.has("long-running"):
            return "long-running"
        if (b.has("gpu") and not (FULL and gpu_available())) or (b.has("slow") and not FULL):
            if not b.has("ci-replace"):
                return "help-only"
            return "ci-size" if self.shrunk else "run"
        return "run"

    def _ci(self, text: str) -> str:
        if not FULL or (self.block.has("gpu") and not gpu_available()):
            for rule in self.block.args("ci-replace"):
                old, new = (s.strip() for s in rule.split("=>", 1))
                text = text.replace(old, new)
        return text

    def command(self) -> str:
        """The command (or setup) as run at the current size: the block's ci-replace rules apply in CI."""
        return self._ci(self.text)

    @property
    def shrunk(self) -> bool:
        """Runs smaller than documented: its text or one of its block's setups is ci-replaced."""
        return self.command() != self.text or any(self._ci(s) != s for s in self.block.args("setup"))


def parse_blocks(doc: str, text: str) -> tuple[list[Block], list[str]]:
    """Fenced blocks of a markdown file with the docs-test markers right before each; problems."""
    lines = text.split("\n")
    blocks: list[Block] = []
    problems: list[str] = []
    pending: list[tuple[int, str, str]] = []  # markers waiting for their block
    i = 0
    while i < len(lines):
        line = lines[i]
        m = FENCE.match(line)
        if m:
            fence = m.group(2)
            close = re.compile(r"^\s*" + re.escape(fence[0]) + "{" + str(len(fence)) + r",}\s*$")
            j = i + 1
            while j < len(lines) and not close.match(lines[j]):
                j += 1
            indent = len(m.group(1))
            body = [l[indent:] if l[:indent].strip() == "" else l for l in lines[i + 1 : j]]
            blocks.append(Block(doc, i + 1, m.group(3).lower(), body, [(k, a) for _, k, a in pending]))
            pending = []
            i = j + 1
            continue
        found = MARKER.findall(line)
        if found:
            if MARKER.sub("", line).strip():
                problems.append(f"{doc}:{i + 1}: a docs-test marker must be alone on its line")
            for spec in found:
                kind, _, arg = spec.partition(":")
                kind, arg = kind.strip(), arg.strip()
                if kind not in MARKER_KINDS:
                    problems.append(f"{doc}:{i + 1}: unknown docs-test marker {kind!r} (known: {sorted(MARKER_KINDS)})")
                pending.append((i + 1, kind, arg))
        elif line.strip() and pending:
            problems.append(f"{doc}:{pending[0][0]}: docs-test marker not followed by a fenced block")
            pending = []
        i += 1
    if pending:
        problems.append(f"{doc}:{pending[0][0]}: docs-test marker not followed by a fenced block")
    return blocks, problems


def split_commands(block: Block) -> list[Step]:
    """The shell commands of a block, continuations joined, with documented output and exit codes."""
    steps: list[Step] = []
    prompts = block.has_prompts
    body = block.body
    i = 0
    while i < len(body):
        line = body[i]
        if prompts:
            if not line.startswith("$ "):
                if steps:
                    steps[-1].output.append(line)
                i += 1
                continue
            text = line[2:]
        else:
            stripped = line.strip()
            if not stripped or stripped.startswith("#"):
                i += 1
                continue
            text = line
        start = i
        while text.rstrip().endswith("\\") and i + 1 < len(body):
            i += 1
            text = text.rstrip()[:-1].rstrip() + " " + body[i].strip()
        steps.append(Step("sh", block.doc, block.line + 1 + start, text.strip(), block))
        i += 1
    # `$ echo $?` + `N`: N is the exit code of the command before it
    kept: list[Step] = []
    for step in steps:
        if step.text == "echo $?" and kept:
            out = [l for l in step.output if l.strip()]
            if out and out[0].strip().lstrip("-").isdigit():
                kept[-1].expect_rc = int(out[0])
                continue
        kept.append(step)
    return kept


def document_steps(doc: str) -> tuple[list[Step], list[str]]:
    blocks, problems = parse_blocks(doc, (REPO / doc).read_text(encoding="utf-8"))
    steps: list[Step] = []
    for block in blocks:
        for kind, arg in block.markers:
            if kind == "file" and (block.is_shell or block.lang == "python"):
                problems.append(f"{doc}:{block.line}: 'file' marker on a {block.lang} block")
            if kind in ("known-failure", "same-as", "file", "setup", "ci-replace") and not arg:
                problems.append(f"{doc}:{block.line}: docs-test marker {kind!r} needs an argument")
            if kind == "ci-replace" and "=>" not in arg:
                problems.append(f"{doc}:{block.line}: ci-replace needs 'OLD => NEW'")
            if kind == "retry" and not arg.isdigit():
                problems.append(f"{doc}:{block.line}: retry needs a count")
        runnable = block.is_shell or block.lang == "python"
        if block.markers and not runnable and not block.has("file"):
            kind = block.lang or "plain"
            problems.append(f"{doc}:{block.line}: docs-test marker on a block that is not run ({kind})")
        if block.has("file"):
            steps.append(Step("file", doc, block.line, "\n".join(block.body) + "\n", block, arg=block.args("file")[0]))
            continue
        if block.lang == "python":
            code = "\n".join(block.body) + "\n"
            steps.append(Step("python", doc, block.line + 1, code, block, arg="\n".join(block.args("setup"))))
            continue
        if not block.is_shell:
            continue
        for setup in block.args("setup"):
            steps.append(Step("setup-sh", doc, block.line, setup, block))
        commands = split_commands(block)
        if not commands:
            problems.append(f"{doc}:{block.line}: shell block without a command")
        if block.has("ci-replace") and not FULL:
            for rule in block.args("ci-replace"):
                old = rule.split("=>", 1)[0].strip()
                if not any(old in text for text in [c.text for c in commands] + block.args("setup")):
                    problems.append(f"{doc}:{block.line}: ci-replace {old!r} matches no command of the block")
        steps.extend(commands)
    return steps, problems


ALL_STEPS: dict[str, list[Step]] = {}
PROBLEMS: list[str] = []
for _doc in doc_files():
    ALL_STEPS[_doc], _problems = document_steps(_doc)
    PROBLEMS.extend(_problems)
TEST_STEPS = [s for doc in ALL_STEPS.values() for s in doc if s.is_test]


# --------------------------------------------------------------------------- environment


_cache: dict[str, bool] = {}


def gpu_available() -> bool:
    if "gpu" not in _cache:
        probe = "import torch,sys; sys.exit(0 if torch.cuda.is_available() else 1)"
        try:
            probe_run = subprocess.run([sys.executable, "-c", probe], check=False, capture_output=True, timeout=120)
            _cache["gpu"] = probe_run.returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            _cache["gpu"] = False
    return _cache["gpu"]


def docker_available() -> bool:
    if "docker" not in _cache:
        try:
            _cache["docker"] = bool(shutil.which("docker")) and subprocess.run(
                ["docker", "info"], check=False, capture_output=True, timeout=30
            ).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            _cache["docker"] = False
    return _cache["docker"]


def base_env() -> dict[str, str]:
    env = dict(os.environ)
    bindir = str(Path(sys.executable).parent)
    env["PATH"] = bindir + os.pathsep + env.get("PATH", "")  # `python` and the console scripts of this install
    env["MPLBACKEND"] = "Agg"
    return env


OUTPUT_LIKE = re.compile(r"^(run.*|out|build|dist|.*\.egg-info|__pycache__)$")


class Workspace:
    """A document's fresh directory and shell state; runs its steps in page order."""

    def __init__(self, doc: str, root: Path) -> None:
        self.doc = doc
        self.root = root
        self.dir = root / "work"
        self.dir.mkdir(parents=True)
        for entry in sorted(REPO.iterdir()):
            # directories only (plus the two files the docs name): stray outputs in a developer's
            # checkout must not make a documented command pass here
            if entry.name.startswith(".") or OUTPUT_LIKE.match(entry.name):
                continue
            if entry.is_dir() or entry.name in ("README.md", "pyproject.toml"):
                (self.dir / entry.name).symlink_to(entry)
        shared = (REPO.parent / "shared").resolve()
        if shared.exists():
            (root / "shared").symlink_to(shared)
        self.env = base_env()
        self.count = 0

    def shell(self, text: str, timeout: float = TIMEOUT_S) -> tuple[int, str]:
        """Run `text` with bash in the directory; shell variables carry over to later commands."""
        self.count += 1
        dump = self.root / f"env.{self.count}"
        script = f"set -a\n{text}\n__docs_rc=$?\nenv -0 > {shlex.quote(str(dump))}\nexit $__docs_rc\n"
        rc, out = run_process(["bash", "-c", script], self.dir, self.env, timeout)
        if dump.exists():
            for item in dump.read_bytes().split(b"\0"):
                name, sep, value = item.decode(errors="replace").partition("=")
                if sep and name not in ("PWD", "OLDPWD", "SHLVL", "_", "__docs_rc") and self.env.get(name) != value:
                    self.env[name] = value
            dump.unlink()
        return rc, out


LIVE: set[subprocess.Popen] = set()  # processes this test started and that still run
STOPPING = threading.Event()


def run_process(argv: list[str], cwd: Path, env: dict[str, str], timeout: float) -> tuple[int, str]:
    """Run argv in its own process group (so a timeout or the session's end stops all of it)."""
    if STOPPING.is_set():
        return 130, "[docs test: the session ended before this command]"
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, errors="replace", start_new_session=True)
    LIVE.add(proc)
    try:
        out, _ = proc.communicate(timeout=timeout)
        return proc.returncode, out
    except subprocess.TimeoutExpired:
        stop_process(proc)
        out, _ = proc.communicate()
        return 124, (out or "") + f"\n[docs test: timed out after {timeout:.0f} s]"
    finally:
        LIVE.discard(proc)


def stop_process(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # the group this test created for it
    except (ProcessLookupError, PermissionError):
        pass


def tail(text: str, n: int = 25) -> str:
    lines = text.rstrip().splitlines()
    return "\n".join(lines[-n:])


# --------------------------------------------------------------------------- checks


def option_tokens(argv: list[str]) -> list[str]:
    """The options a command uses: --long (without =value) and short -x flags."""
    opts = []
    for tok in argv:
        if tok.startswith("--") and len(tok) > 2:
            opts.append(tok.split("=", 1)[0])
        elif re.fullmatch(r"-[A-Za-z]", tok):
            opts.append(tok)
    return opts


def first_simple_command(text: str) -> list[str]:
    argv = shlex.split(text, comments=True)
    for i, tok in enumerate(argv):
        if tok in ("&&", "||", ";", "|") or tok.endswith(";"):
            return argv[:i]
    return argv


def help_check(ws: Workspace, argv: list[str]) -> tuple[bool, str]:
    """`argv`'s program knows every option `argv` uses (its --help lists them)."""
    while argv and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=\S*", argv[0]):
        argv = argv[1:]  # VAR=value before the program: the shell's environment assignment
    if not argv:
        return False, "empty command"
    lead = [argv[0]]
    rest = argv[1:]
    if argv[0] in ("python", "python3") and rest:
        if rest[0] == "-m" and len(rest) > 1:
            lead += rest[:2]
            rest = rest[2:]
        else:
            lead.append(rest[0])
            rest = rest[1:]
    # subcommand words (compute-profile measure) come before the first option
    while rest and not rest[0].startswith("-"):
        lead.append(rest[0])
        rest = rest[1:]
    if argv[0] not in ("python", "python3") and not shutil.which(argv[0], path=ws.env["PATH"]):
        return False, f"{argv[0]}: command not found"
    rc, out = ws.shell(shlex.join(lead + ["--help"]), timeout=120)
    if rc != 0:
        return False, f"`{shlex.join(lead)} --help` exited {rc}:\n{tail(out)}"
    missing = [o for o in option_tokens(rest) if not re.search(r"(?<![\w-])" + re.escape(o) + r"(?![\w-])", out)]
    if missing:
        return False, f"`{shlex.join(lead)} --help` does not list {', '.join(missing)}"
    return True, f"`{shlex.join(lead)} --help` lists every option used"


def pyproject_extras() -> dict[str, list[str]]:
    import tomllib

    data = tomllib.loads((REPO / "pyproject.toml").read_text())
    return data.get("project", {}).get("optional-dependencies", {})


def installed_matches(req: str) -> str | None:
    """None when requirement `req` (`name`, `name==ver`, `name>=ver`) is installed, else why not."""
    m = re.fullmatch(r"([A-Za-z0-9_.\-]+)\s*(?:(==|>=)\s*([^,;\s]+))?.*", req.strip())
    if not m:
        return None
    name, op, ver = m.groups()
    try:
        have = metadata.version(name)
    except metadata.PackageNotFoundError:
        return f"{name} is not installed"
    if op == "==" and have != ver and not have.startswith(ver + "+"):
        return f"{name}=={ver} wanted, {have} installed"
    return None


def check_pip(argv: list[str]) -> tuple[bool, str]:
    """A `pip install ...` line, checked against this environment without running pip."""
    assert argv[:2] == ["pip", "install"], argv
    problems, seen = [], []
    it = iter(argv[2:])
    extras_defined = pyproject_extras()
    for tok in it:
        if tok in ("-e", "--editable"):
            tok = next(it, "")
            m = re.fullmatch(r"\.(?:\[([^\]]*)\])?", tok)
            if not m:
                problems.append(f"editable target {tok!r} is not this repository")
                continue
            for extra in filter(None, (m.group(1) or "").split(",")):
                if extra not in extras_defined:
                    problems.append(f"extra [{extra}] is not in pyproject.toml")
                    continue
                problems.extend(filter(None, (installed_matches(r) for r in extras_defined[extra])))
            why = installed_matches("trainsim")
            if why:
                problems.append(why)
            seen.append(tok)
        elif tok in ("--index-url", "--extra-index-url", "-i", "-f", "--find-links"):
            next(it, None)
        elif tok.startswith("-"):
            continue
        else:
            why = installed_matches(tok)
            if why:
                problems.append(why)
            seen.append(tok)
    if problems:
        return False, "; ".join(problems)
    return True, f"installed as pinned: {', '.join(seen)}"


def and_parts(text: str) -> list[str]:
    """The commands of ``A && B && ...`` at the top level: an ``&&`` inside parentheses or
    quotes stays in its part (``(command -v x || (apt-get update && apt-get install x)) && ...``)."""
    parts, depth, quote, start, i = [], 0, "", 0, 0
    while i < len(text):
        c = text[i]
        if quote:
            quote = "" if c == quote else quote
        elif c in "'\"":
            quote = c
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        elif c == "&" and text.startswith("&&", i) and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 2
            i += 1
        i += 1
    parts.append(text[start:].strip())
    return parts


def ci_entry_lines() -> list[str]:
    path = REPO / ".ci" / "run"
    return [l.strip() for l in path.read_text().splitlines()] if path.exists() else []


def execute(ws: Workspace, step: Step) -> tuple[bool, str]:
    """Do one step; (passed, detail). Known failures pass when they still fail."""
    if step.kind == "file":
        target = ws.dir / step.arg
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(step.text)
        return True, f"wrote {step.arg}"
    if step.kind == "setup-sh":
        rc, out = ws.shell(step.command())
        return rc == 0, f"setup `{step.command()}` exited {rc}:\n{tail(out)}" if rc else ""
    if step.kind == "python":
        return run_python(ws, step)
    mode = step.mode
    if mode == "same-as":
        other = step.block.args("same-as")[0]
        norm = " ".join(shlex.split(step.text, comments=True))
        there = {" ".join(shlex.split(s.text, comments=True)) for s in ALL_STEPS.get(other, []) if s.kind == "sh"}
        if norm in there:
            return True, f"run in {other}"
        return False, f"`{step.text}` is not a command of {other} (same-as marker)"
    if mode == "install":
        details = []
        for part in and_parts(step.text):
            argv = shlex.split(part, comments=True)
            if argv[:2] == ["pip", "install"]:
                ok, detail = check_pip(argv)
            elif argv[:3] == ["python", "-m", "pytest"]:
                ok = step.text in ci_entry_lines()
                detail = "the suite itself: .ci/run runs this line" if ok else f".ci/run does not run `{step.text}`"
            else:
                rc, out = ws.shell(part)
                ok, detail = rc == 0, f"`{part}` exited {rc}" + (f":\n{tail(out)}" if rc else "")
            details.append(detail)
            if not ok:
                return False, "\n".join(details)
        return True, "\n".join(details)
    if mode == "static":  # docker without a daemon (or not at full size)
        argv = shlex.split(step.text, comments=True)
        parts, cur = [], []
        for tok in argv:
            if tok == "&&":
                parts.append(cur)
                cur = []
            else:
                cur.append(tok)
        parts.append(cur)
        tags = set()
        details = []
        for part in parts:
            if part[:2] == ["docker", "build"]:
                dockerfile = part[part.index("-f") + 1] if "-f" in part else "Dockerfile"
                if "-t" in part:
                    tags.add(part[part.index("-t") + 1])
                if not (ws.dir / dockerfile).is_file():
                    return False, f"{dockerfile} does not exist"
                details.append(f"{dockerfile} exists (no Docker daemon: not built)")
            elif part[:2] == ["docker", "run"]:
                image_at = next((i for i, t in enumerate(part) if t in tags or t == "trainsim"), None)
                if image_at is None or image_at + 1 >= len(part):
                    return False, "cannot find the image and its command in `docker run`"
                ok, detail = help_check(ws, part[image_at + 1 :])
                if not ok:
                    return False, detail
                details.append(detail)
            else:
                return False, f"unexpected part in a docker block: {shlex.join(part)}"
        return True, "\n".join(details)
    if mode == "long-running":
        return run_server(ws, step.command(), step.block.args("long-running")[0])
    details = []
    if mode in ("help-only", "ci-size"):
        ok, detail = help_check(ws, first_simple_command(step.text))
        if not ok:
            return False, detail
        details.append(detail)
        if mode == "help-only":
            return True, "\n".join(details)
    command = step.command()
    rc, out = ws.shell(command)
    if mode == "known-failure":
        reason = step.block.args("known-failure")[0]
        if rc != step.expect_rc:
            return True, f"still fails as known ({reason}): exit {rc}\n{tail(out, 5)}"
        return False, f"known failure now passes ({reason}): remove the marker\n$ {command}"
    if rc != step.expect_rc:
        return False, f"$ {command}\nexit code {rc}, documented {step.expect_rc}\n{tail(out)}"
    # numbers are compared only at the documented size (ci-replace shrinks the command) and
    # unless the block says its figures are measured on the machine at hand
    problem = output_mismatch(step.output, out, numbers=mode == "run" and not step.block.has("measured-output"))
    if problem:
        return False, f"$ {command}\n{problem}\ngot:\n{tail(out)}"
    details.append(f"exit {rc}")
    return True, "\n".join(details)


NUMBER = re.compile(r"[-+]?\d[\d,]*\.?\d*")


def _label(line: str) -> str:
    """A printed line's identity: its words before the first figure (a ``~`` before it, the
    documented mark of a measured figure, dropped), spaces normalised."""
    m = NUMBER.search(line)
    return " ".join((line[:m.start()] if m else line).removesuffix("~").split())


def output_mismatch(documented: list[str], out: str, numbers: bool) -> str | None:
    """Why the documented output lines of a command are not what it printed, or None. Each
    documented line (``...`` elides) must be printed: a line without figures verbatim (spaces
    normalised), a line with figures as a printed line with the same words before its first
    figure and, when ``numbers``, the same figures within 0.1% (or 0.011 absolute, the last
    digit of a 2-decimal print), so that no documented number drifts unnoticed (issue 29). A
    figure written ``~4.9`` is measured on the machine at hand and not compared."""
    printed = [" ".join(l.split()) for l in out.splitlines()]
    by_label: dict[str, list[str]] = {}
    for line in printed:
        by_label.setdefault(_label(line), []).append(line)
    for raw in documented:
        line = " ".join(raw.split())
        if not line or line == "...":
            continue
        want = NUMBER.findall(line)
        if not want:
            if not any(line in p for p in printed):
                return f"documented output line not printed: {raw.strip()!r}"
            continue
        candidates = by_label.get(_label(line), [])
        if not candidates:
            return f"documented output line not printed: {raw.strip()!r}"
        if not numbers:
            continue

        measured = [line[m.start() - 1:m.start()] == "~" for m in NUMBER.finditer(line)]

        def close(got_line: str) -> bool:
            got = NUMBER.findall(got_line)
            if len(got) != len(want):
                return False
            for g, w, skip in zip(got, want, measured):
                if skip:  # "~4.9 s": a figure measured on the machine at hand
                    continue
                gv, wv = float(g.replace(",", "")), float(w.replace(",", ""))
                if abs(gv - wv) > max(1e-3 * abs(wv), 0.011):
                    return False
            return True

        if not any(close(c) for c in candidates):
            return f"documented figures drifted: {raw.strip()!r}, printed {candidates[0]!r}"
    return None


def run_server(ws: Workspace, command: str, ready: str) -> tuple[bool, str]:
    """A long-running command (a server): start it, wait for ``ready`` in its output, fetch
    the URL it printed (if any), stop its process group; (passed, detail)."""
    import queue
    import urllib.request

    proc = subprocess.Popen(["bash", "-c", command], cwd=ws.dir, env=ws.env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace",
                            start_new_session=True)
    LIVE.add(proc)
    lines: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [lines.put(l) for l in proc.stdout] + [lines.put(None)], daemon=True).start()
    out: list[str] = []
    try:
        deadline = time.monotonic() + LONG_RUNNING_WAIT_S
        while True:
            try:
                line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                return False, f"$ {command}\nno {ready!r} within {LONG_RUNNING_WAIT_S} s:\n{tail(''.join(out))}"
            if line is None:
                return False, f"$ {command}\nexited ({proc.wait()}) before printing {ready!r}:\n{tail(''.join(out))}"
            out.append(line)
            if ready in line:
                break
        url = re.search(r"http://\S+", line)
        if url:
            with urllib.request.urlopen(url.group(0).rstrip(".,)"), timeout=30) as res:
                if res.status != 200:
                    return False, f"$ {command}\n{url.group(0)} answered {res.status}"
        return True, f"started; printed {line.strip()!r}" + (f"; {url.group(0)} answered 200" if url else "") + "; stopped"
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=10)
        except (ProcessLookupError, PermissionError, subprocess.TimeoutExpired):
            stop_process(proc)
        LIVE.discard(proc)


def run_python(ws: Workspace, step: Step) -> tuple[bool, str]:
    block_file = ws.root / f"block_{step.line}.py"
    block_file.write_text(step.text)
    setup_file = ws.root / f"setup_{step.line}.py"
    setup_file.write_text(step.arg)
    cmd = [sys.executable, str(RUNNER), str(block_file), str(setup_file), step.doc, str(step.line)]
    rc, out = run_process(cmd, ws.dir, ws.env, TIMEOUT_S)
    if step.mode == "known-failure":
        reason = step.block.args("known-failure")[0]
        if rc != 0:
            return True, f"still fails as known ({reason})\n{tail(out, 5)}"
        return False, f"known failure now passes ({reason}): remove the marker"
    return rc == 0, "" if rc == 0 else f"python block failed (exit {rc}):\n{tail(out, 30)}"


# --------------------------------------------------------------------------- tests


RESULTS: dict[str, tuple[bool, str, float]] = {}  # step id -> (passed, detail, seconds)


class Runner:
    """Runs each page's steps in page order in its own thread, pages side by side.

    At most JOBS commands run at a time (TRAINSIM_DOCS_JOBS, default the CPU count); the
    tests wait for their step's result. A page runs only up to its last selected test."""

    def __init__(self, tmp_path_factory, selected: list[Step]) -> None:
        self.jobs = max(1, int(os.environ.get("TRAINSIM_DOCS_JOBS") or os.cpu_count() or 2))
        self.slots = threading.Semaphore(self.jobs)
        self.alone = threading.Lock()  # held by an `exclusive` step while it takes every slot
        self.done = {s.id: threading.Event() for doc in ALL_STEPS.values() for s in doc if s.is_test}
        self.failed_before: dict[str, list[str]] = {}
        self.threads = []
        for doc, steps in ALL_STEPS.items():
            wanted = [steps.index(s) for s in selected if s.doc == doc]
            if not wanted:
                continue
            root = tmp_path_factory.mktemp(re.sub(r"[^A-Za-z0-9]+", "_", doc))
            thread = threading.Thread(target=self.run_page, args=(doc, root, max(wanted)), daemon=True)
            thread.start()
            self.threads.append(thread)

    def execute(self, ws: Workspace, step: Step) -> tuple[bool, str, float]:
        """One step, holding one slot (every slot for an `exclusive` block); (ok, detail, seconds)."""
        held = self.jobs if step.block.has("exclusive") else 1
        if held > 1:
            self.alone.acquire()
        for _ in range(held):
            self.slots.acquire()
        started = time.monotonic()
        try:
            ok, detail = execute(ws, step)
        except Exception as exc:  # noqa: BLE001 - a bug here must fail the test, not hang it
            ok, detail = False, f"docs test error: {type(exc).__name__}: {exc}"
        finally:
            for _ in range(held):
                self.slots.release()
            if held > 1:
                self.alone.release()
        return ok, detail, time.monotonic() - started

    def run_page(self, doc: str, root: Path, last: int) -> None:
        ws = Workspace(doc, root)
        failed: list[str] = []
        steps = ALL_STEPS[doc][: last + 1]
        groups: list[list[Step]] = []  # the steps of one block (its setups and commands)
        for step in steps:
            if groups and groups[-1][0].block is step.block:
                groups[-1].append(step)
            else:
                groups.append([step])
        for group in groups:
            retries = group[0].block.args("retry")
            attempts = 1 + (int(retries[0]) if retries else 0)
            earlier: list[str] = []
            for attempt in range(1, attempts + 1):
                outcome = [(step, *self.execute(ws, step)) for step in group]
                bad = [f"{step.id}: " + (detail.strip().splitlines() or ["failed"])[0]
                       for step, ok, detail, _ in outcome if not ok]
                if not bad or attempt == attempts:
                    break
                earlier.append(f"attempt {attempt} of {attempts} failed ({'; '.join(bad)}); the block ran again")
            for step, ok, detail, seconds in outcome:
                if earlier:
                    detail = "\n".join([*earlier, detail])
                if step.is_test:
                    RESULTS[step.id] = (ok, detail, seconds)
                    self.failed_before[step.id] = list(failed)
                    self.done[step.id].set()
                if not ok:
                    failed.append(f"{step.id} ({step.mode if step.is_test else step.kind}): "
                                  + (detail.strip().splitlines() or ["failed"])[0])

    def wait(self, step: Step) -> tuple[bool, str, list[str]]:
        if not self.done[step.id].wait(timeout=TIMEOUT_S * 20):
            return False, "the page's runner did not reach this step", []
        ok, detail, _ = RESULTS[step.id]
        return ok, detail, self.failed_before.get(step.id, [])


@pytest.fixture(scope="session")
def runner(request, tmp_path_factory):
    # another test file may name a parameter "step" too: only documented steps count
    selected = [item.callspec.params["step"] for item in request.session.items
                if getattr(item, "callspec", None) and isinstance(item.callspec.params.get("step"), Step)]
    yield Runner(tmp_path_factory, selected)
    STOPPING.set()  # e.g. after -x: stop what still runs instead of leaving it behind
    for proc in list(LIVE):
        stop_process(proc)


def test_markers_and_inventory():
    """Markers are known and attached to blocks; the documents hold commands at all."""
    assert not PROBLEMS, "\n".join(PROBLEMS)
    assert len(TEST_STEPS) > 30, f"only {len(TEST_STEPS)} documented commands found"


SAMPLE_PAGE = """\
Text.

<!-- docs-test: slow -->

<!-- docs-test: ci-replace: --n 100 => --n 2 -->
```bash
# a comment line
tool --a 1 \\
    --n 100          # trailing comment
other 'quoted arg'
```

```
$ bad --x
error: no such thing
$ echo $?
2
```

```text
$ not a shell block (text)
```

<!-- docs-test: file: spec.yaml -->
```yaml
a: 1
```
"""


def test_extraction_rules():
    blocks, problems = parse_blocks("x.md", SAMPLE_PAGE)
    assert not problems
    steps = [s for b in blocks if b.is_shell for s in split_commands(b)]
    assert [(s.line, s.text) for s in steps] == [
        (8, "tool --a 1 --n 100          # trailing comment"), (10, "other 'quoted arg'"), (14, "bad --x")]
    assert [s.expect_rc for s in steps] == [0, 0, 2] and steps[2].output[0] == "error: no such thing"
    assert blocks[0].markers == [("slow", ""), ("ci-replace", "--n 100 => --n 2")]
    if not FULL:
        assert steps[0].command() == "tool --a 1 --n 2          # trailing comment" and steps[0].mode == "ci-size"
        assert steps[1].mode == "help-only" or steps[1].mode == "run"
    assert blocks[3].markers == [("file", "spec.yaml")] and not blocks[2].is_shell
    _, problems = parse_blocks("y.md", "<!-- docs-test: gpu -->\ntext\n<!-- docs-test: bogus -->\n```bash\nx\n```\n")
    assert any("not followed by a fenced block" in p for p in problems)
    assert any("unknown docs-test marker 'bogus'" in p for p in problems)


def test_exit_codes_known_failures_and_shell_state(tmp_path):
    page = """\
```console
$ V=42; sh -c 'echo "error: bad $V"; exit 2'
error: bad 42
$ echo $?
2
$ test "$V" = 42
```

<!-- docs-test: known-failure: a bug elsewhere -->
```bash
false
```

<!-- docs-test: known-failure: fixed meanwhile -->
```bash
true
```
"""
    blocks, problems = parse_blocks("z.md", page)
    assert not problems
    steps = [s for b in blocks for s in split_commands(b)]
    ws = Workspace("README.md", tmp_path)
    assert [execute(ws, s)[0] for s in steps] == [True, True, True, False]
    assert "remove the marker" in execute(ws, steps[3])[1]
    wrong = Step("sh", "z.md", 1, "sh -c 'echo other; exit 2'", blocks[0], expect_rc=2, output=["error: bad 42"])
    assert not execute(ws, wrong)[0]


def test_retry_runs_the_whole_block_again(tmp_path_factory, monkeypatch):
    page = "<!-- docs-test: retry: 1 -->\n```bash\necho x >> log\ntest -e once || { touch once; false; }\n```\n"
    blocks, problems = parse_blocks("retry.md", page)
    steps = split_commands(blocks[0])
    assert not problems and len(steps) == 2
    monkeypatch.setitem(ALL_STEPS, "retry.md", steps)
    try:
        runner = Runner(tmp_path_factory, steps)
        ok, detail, _ = runner.wait(steps[1])
        assert ok and "attempt 1 of 2 failed" in detail
        assert runner.wait(steps[0])[0]
    finally:
        for step in steps:
            RESULTS.pop(step.id, None)


def test_long_running_blocks_start_answer_and_stop(tmp_path):
    page = """\
<!-- docs-test: long-running: serving on -->
```bash
python -c 'import time; print("serving on", flush=True); time.sleep(600)'
```

<!-- docs-test: long-running: serving on -->
```bash
echo gone
```
"""
    blocks, problems = parse_blocks("srv.md", page)
    assert not problems
    steps = [s for b in blocks for s in split_commands(b)]
    assert [s.mode for s in steps] == ["long-running", "long-running"]
    ws = Workspace("README.md", tmp_path)
    t0 = time.monotonic()
    ok, detail = execute(ws, steps[0])
    assert ok and "stopped" in detail and time.monotonic() - t0 < 60  # stopped, not waited for
    ok, detail = execute(ws, steps[1])
    assert not ok and "exited (0) before printing 'serving on'" in detail


def test_and_parts_keep_a_subshell_whole():
    line = ("(command -v chromium >/dev/null || (apt-get update -qq && apt-get install -y -qq chromium)) && "
            "pip install torch==2.13.0 -e '.[test]' && python -m pytest -q")
    assert and_parts(line) == ["(command -v chromium >/dev/null || (apt-get update -qq && apt-get install -y -qq "
                               "chromium))", "pip install torch==2.13.0 -e '.[test]'", "python -m pytest -q"]
    assert and_parts("echo 'a && b' && true") == ["echo 'a && b'", "true"]


def test_documented_figures_must_match_what_is_printed():
    """A documented figure off by more than 0.1% is drift; a figure written ~4.9 is measured
    and not compared; a documented line the command no longer prints fails; with numbers off
    (a shrunk CI run) only the words are compared."""
    printed = "iteration time      3.6958 s\nmeasured 36 op shapes in 4.3 s\nok\n"
    assert output_mismatch(["iteration time 3.6958 s", "...", "ok"], printed, numbers=True) is None
    assert "drifted" in output_mismatch(["iteration time 3.6163 s"], printed, numbers=True)
    assert output_mismatch(["iteration time 3.6983 s"], printed, numbers=False) is None
    assert output_mismatch(["measured 36 op shapes in ~4.9 s"], printed, numbers=True) is None
    assert "drifted" in output_mismatch(["measured 33 op shapes in ~4.9 s"], printed, numbers=True)
    assert "not printed" in output_mismatch(["throughput 1 tokens/s"], printed, numbers=True)
    assert "not printed" in output_mismatch(["done"], printed, numbers=True)


def test_pip_lines_are_checked_not_run():
    ok, detail = check_pip(["pip", "install", "-e", ".[no-such-extra]"])
    assert not ok and "no-such-extra" in detail
    ok, detail = check_pip(["pip", "install", "pytest==0.0.1"])
    assert not ok and "pytest==0.0.1 wanted" in detail


@pytest.mark.parametrize("step", TEST_STEPS, ids=[s.id for s in TEST_STEPS])
def test_documented_command(step: Step, runner):
    ok, detail, failed_before = runner.wait(step)
    if not ok:
        earlier = f"\n(earlier steps of this page that failed: {'; '.join(failed_before)})" if failed_before else ""
        pytest.fail(f"{step.id} [{step.mode}]\n{detail}{earlier}", pytrace=False)
    if step.mode == "known-failure":
        pytest.xfail(f"{step.id}: {step.block.args('known-failure')[0]}")


def inventory_lines() -> list[str]:
    lines = []
    for doc, steps in ALL_STEPS.items():
        tests = [s for s in steps if s.is_test]
        by_mode: dict[str, int] = {}
        for s in tests:
            by_mode[s.mode] = by_mode.get(s.mode, 0) + 1
        modes = ", ".join(f"{n} {m}" for m, n in sorted(by_mode.items()))
        lines.append(f"{doc:28s} {len(tests):3d} commands ({modes or 'none'})")
    lines.append("not run as documented at this size:")
    for s in TEST_STEPS:
        if s.mode != "run":
            why = ""
            if s.mode == "known-failure":
                why = s.block.args("known-failure")[0]
            elif s.mode == "same-as":
                why = "run in " + s.block.args("same-as")[0]
            elif s.mode in ("help-only", "ci-size"):
                why = ("needs a GPU" if s.block.has("gpu") else "slow at documented size") + (
                    "; arguments checked against --help" if s.mode == "help-only" else
                    f"; arguments checked against --help, then runs as `{s.command()}`" if s.command() != s.text else
                    "; arguments checked against --help, runs on the block's smaller setup"
                )
            elif s.mode == "install":
                why = "pip lines checked against the installed environment"
            elif s.mode == "static":
                why = "Dockerfile checked, image command checked for argument parsing"
            elif s.mode == "long-running":
                why = "a server: started, checked to answer, stopped"
            lines.append(f"  {s.id:28s} [{s.mode}] {why}")
    return lines


def terminal_summary(terminalreporter) -> None:
    """Called from tests/docs/conftest.py: the inventory and the slowest commands."""
    tr = terminalreporter
    tr.section("documented commands" + (" (full size)" if FULL else " (CI size; TRAINSIM_DOCS_FULL=1 for full)"))
    for line in inventory_lines():
        tr.write_line(line)
    if RESULTS:
        by_id = {s.id: s for s in TEST_STEPS}
        passed = sum(ok for ok, _, _ in RESULTS.values())
        tr.write_line(f"{passed} of {len(RESULTS)} checked here passed (known failures count as passed); slowest:")
        for sid, (ok, _, sec) in sorted(RESULTS.items(), key=lambda r: -r[1][2])[:8]:
            if sid not in by_id:
                continue
            tr.write_line(f"  {sec:6.1f} s  {sid:28s} {by_id[sid].text[:70]}")


if __name__ == "__main__":
    for problem in PROBLEMS:
        print("PROBLEM:", problem)
    for doc, steps in ALL_STEPS.items():
        print(f"== {doc}")
        for s in steps:
            label = s.mode if s.is_test else s.kind
            print(f"  {s.line:4d} [{label}] {s.text if s.kind != 'python' else s.text.splitlines()[0] + ' ...'}"[:200])
    print("\n".join(inventory_lines()))
