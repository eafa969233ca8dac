"""Reading a YAML file that must hold a mapping: the one way every input file is read.

Run configs, system files, sweep specs, efficiency tables and estimator parameters all go
through :func:`read_yaml_mapping`, so a syntax error always reads the same way: one line
with the file, the line number and YAML's own complaint (a FormatError, exit code 2).

Numbers follow YAML 1.2 (and JSON), not PyYAML's YAML 1.1 rules: ``5e10`` and ``1E-6``
are floats, where YAML 1.1 wants a dot (``5.0e+10``) and reads ``5.0e10`` as a string, so
every bandwidth written the way people write it used to be refused. JSON files are read
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
    loader = type("Yaml12NumbersLoader", (base,), {})
    loader.add_implicit_resolver("tag:yaml.org,2002:float", _YAML12_FLOAT, list("-+0123456789."))
    return loader


def read_text_file(path: str | Path, not_utf8_advice: str = "") -> str:
    """The whole of ``path`` as UTF-8 text. A file that cannot be read, or is not UTF-8, is
    one FormatError naming it; ``not_utf8_advice`` is appended to the latter's message.

    Why a function: the YAML reader here and the Hugging Face ``config.json`` reader
    (``workload_gen.hf_config``) report these two failures in the same words.
    """
    try:
        return Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise FormatError(str(path), None, f"not UTF-8 text (byte {exc.start}){not_utf8_advice}") from None
    except OSError as exc:
        raise FormatError(str(path), None, f"cannot read: {exc.strerror or exc}") from None


def read_yaml_mapping(path: str | Path, expected: str) -> dict[str, Any]:
    """The mapping in ``path``; an empty file is an empty mapping.

    expected: what the mapping should contain, for the error message when it is not one.
    """
    import yaml  # local: keeps `import workload_gen` light

    text = read_text_file(path, "; save the file as UTF-8")
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
