"""Reading a YAML file that must hold a mapping: the one way every input file is read.

Run configs, system files, sweep specs, efficiency tables and estimator parameters all go
through :func:`read_yaml_mapping`, so a syntax error always reads the same way: one line
with the file, the line number and YAML's own complaint (a FormatError, exit code 2).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from workload_gen.errors import FormatError


def read_yaml_mapping(path: str | Path, expected: str) -> dict[str, Any]:
    """The mapping in ``path``; an empty file is an empty mapping.

    expected: what the mapping should contain, for the error message when it is not one.
    """
    import yaml  # local: keeps `import workload_gen` light

    text = Path(path).read_text(encoding="utf-8")
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        raise FormatError(str(path), line, f"invalid YAML: {getattr(exc, 'problem', None) or exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise FormatError(str(path), 1, f"expected a mapping with {expected}")
    return data
