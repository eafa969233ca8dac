"""Reading a YAML file that must hold a mapping: the one way every input file is read.

Run configs, system files, sweep specs, efficiency tables and estimator parameters all go
through :func:`read_yaml_mapping`, so a syntax error always reads the same way: one line
with the file, the line number and YAML's own complaint (a FormatError, exit code 2).

Numbers follow YAML 1.2 (and JSON), not PyYAML's YAML 1.1 rules: ``5e10`` and ``1E-6``
are floats, where YAML 1.1 wants a dot (``5.0e+10``) and reads ``5.0e10`` as a string, so
every bandwidth written the way people write it used to be refused; ``010`` is ten (YAML
1.1: eight) and ``1_000`` is text. A key repeated in one mapping is an error (YAML forbids
it; PyYAML kept the last). JSON files are read
by the same function (JSON is YAML 1.2). libyaml's C parser is used when PyYAML has it
(about 10x faster on the shipped data files).
"""
from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from typing import Any

from workload_gen.core.errors import FormatError

_YAML12_FLOAT = re.compile(r"""^(?:[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+
    |[-+]?\.[0-9_]+(?:[eE][-+]?[0-9]+)?)$""", re.X)
"""Floats YAML 1.1 misses: an exponent without a dot (5e10, 1.5E9 is already 1.1), or no
digit before the dot (.5)."""


@cache
def _loader() -> type:
    """SafeLoader (libyaml's when present) plus the YAML 1.2 float forms; built once, on
    first use, as a subclass so PyYAML's own SafeLoader is left as it is."""
    import yaml

    base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    loader = type("Yaml12NumbersLoader", (base,), {"construct_mapping": _construct_unique_mapping})
    # integers as YAML 1.2's core schema reads them: 010 is ten (YAML 1.1: eight), 0o10 is
    # eight, 0x10 sixteen, and 1_000 is not a number (YAML 1.1 drops the underscore)
    loader.yaml_implicit_resolvers = {
        first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:int"]
        for first, resolvers in base.yaml_implicit_resolvers.items()}
    loader.add_implicit_resolver("tag:yaml.org,2002:int", _YAML12_INT, list("-+0123456789"))
    loader.add_constructor("tag:yaml.org,2002:int", _construct_yaml12_int)
    loader.add_implicit_resolver("tag:yaml.org,2002:float", _YAML12_FLOAT, list("-+0123456789."))
    return loader


_YAML12_INT = re.compile(r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$")
"""YAML 1.2 core schema integers (decimal, 0o octal, 0x hex)."""


def _construct_yaml12_int(loader: Any, node: Any) -> int:
    text = loader.construct_scalar(node)
    if text.startswith(("0o", "0x")):
        return int(text[2:], 8 if text[1] == "o" else 16)
    return int(text, 10)


def _construct_unique_mapping(loader: Any, node: Any, deep: bool = False) -> dict:
    """A mapping whose keys are unique: YAML forbids repeating a key, and PyYAML would keep
    the last one silently (issue 29: a duplicated section overrode the first)."""
    import yaml

    seen: dict[Any, Any] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        try:
            hash(key)
        except TypeError:
            continue  # unhashable keys fail in PyYAML's own construction, with its message
        if key in seen:
            raise yaml.constructor.ConstructorError(
                "while reading a mapping", node.start_mark, f"key {key!r} appears twice (first on line "
                f"{seen[key].start_mark.line + 1})", key_node.start_mark)
        seen[key] = key_node
    return yaml.SafeLoader.construct_mapping(loader, node, deep=deep)


def read_text_file(path: str | Path, not_utf8_advice: str = "") -> str:
    """The whole of ``path`` as UTF-8 text. A file that cannot be read, or is not UTF-8, is
    one FormatError naming it; ``not_utf8_advice`` is appended to the latter's message.

    Why a function: the YAML reader here and the Hugging Face ``config.json`` reader
    (``workload_gen.hf_config``) report these two failures in the same words.
    """
    import os
    import stat as stat_mod

    from workload_gen.core.limits import MAX_TEXT_FILE_BYTES

    try:
        st = os.stat(path)
        if not stat_mod.S_ISREG(st.st_mode):  # /dev/zero, a FIFO: unbounded, read would never end
            raise FormatError(str(path), None, "is not a regular file (a device, FIFO or directory); give a file")
        if st.st_size > MAX_TEXT_FILE_BYTES:
            raise FormatError(str(path), None, f"is {st.st_size:,} bytes, over the {MAX_TEXT_FILE_BYTES:,}-byte "
                              "limit for a config file (workload_gen/core/limits.py MAX_TEXT_FILE_BYTES)")
        return Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise FormatError(str(path), None, f"not UTF-8 text (byte {exc.start}){not_utf8_advice}") from None
    except OSError as exc:
        raise FormatError(str(path), None, f"cannot read: {exc.strerror or exc}") from None


MAX_TEXT_NESTING = 512
"""Brackets/braces open at once, or indentation columns, a config file may use: libyaml's C
parser recurses per level and crashed the process (a segmentation fault) on 10^5 levels;
Python's JSON reader raised RecursionError."""


_NESTING_CHARS = re.compile(r"[\"'\[\]{}\n]")


def check_nesting(text: str, path: str | Path) -> None:
    """Refuse text nested deeper than MAX_TEXT_NESTING (flow brackets outside quotes, or
    indentation) before a parser recurses into it: one FormatError line."""
    depth = deepest = 0
    quote = ""
    for m in _NESTING_CHARS.finditer(text):  # only the characters that matter (10x faster than a loop)
        ch = m.group()
        if quote:
            if ch == quote:
                quote = ""
        elif ch in "\"'":
            quote = ch
        elif ch in "[{":
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > MAX_TEXT_NESTING:
                    break
        elif ch in "]}":
            depth -= 1
        elif ch == "\n":
            quote = ""  # an unclosed quote ends with its line in the block styles that matter here
    indent = max((len(line) - len(line.lstrip(" ")) for line in text.splitlines()), default=0)
    if deepest > MAX_TEXT_NESTING or indent > 8 * MAX_TEXT_NESTING:
        raise FormatError(str(path), None, f"nested deeper than {MAX_TEXT_NESTING} levels; no config needs that "
                          "(workload_gen/core/yaml_file.py MAX_TEXT_NESTING)")


def read_yaml_mapping(path: str | Path, expected: str) -> dict[str, Any]:
    """The mapping in ``path``; an empty file is an empty mapping.

    expected: what the mapping should contain, for the error message when it is not one.
    """
    import yaml  # local: keeps `import workload_gen` light

    text = read_text_file(path, "; save the file as UTF-8")
    check_nesting(text, path)
    try:
        data = yaml.load(text, Loader=_loader())  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        raise FormatError(str(path), line, f"invalid YAML: {getattr(exc, 'problem', None) or exc}") from None
    except ValueError as exc:  # e.g. an integer of more digits than Python converts (4300)
        raise FormatError(str(path), None, f"invalid value: {exc}") from None
    except RecursionError:
        raise FormatError(str(path), None, "nested too deeply to read") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise FormatError(str(path), 1, f"expected a mapping with {expected}")
    return data
