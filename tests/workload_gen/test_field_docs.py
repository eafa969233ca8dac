"""Flag help comes from the config dataclasses' attribute docstrings; config_loading reads
them with a line scan (start-up cost). The oracle here is Python's own parser: for every
config dataclass, the scan finds exactly the (field, docstring) pairs ``ast`` finds."""
from __future__ import annotations

import ast
import dataclasses
import importlib
import itertools
import sys

import pytest

from workload_gen.field_docs import field_docs

MODULES = ("workload_gen.core.model_config", "workload_gen.core.parallel_config", "workload_gen.core.system",
           "workload_gen.core.records", "workload_gen.core.run_result")


def _ast_docs(cls: type) -> dict[str, str]:
    tree = ast.parse(open(sys.modules[cls.__module__].__file__, encoding="utf-8").read())
    body = next(n.body for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls.__name__)
    out = {}
    for node, nxt in itertools.pairwise(body):
        if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and isinstance(nxt, ast.Expr)
                and isinstance(nxt.value, ast.Constant) and isinstance(nxt.value.value, str)):
            out[node.target.id] = " ".join(nxt.value.value.split())
    return out


def _dataclasses():
    for name in MODULES:
        mod = importlib.import_module(name)
        for obj in vars(mod).values():
            if isinstance(obj, type) and dataclasses.is_dataclass(obj) and obj.__module__ == name:
                yield obj


@pytest.mark.parametrize("cls", list(_dataclasses()), ids=lambda c: c.__name__)
def test_the_line_scan_reads_what_python_parses(cls):
    assert field_docs(cls) == _ast_docs(cls)


def test_the_main_configs_have_documented_fields():
    from workload_gen.core.model_config import ModelConfig
    from workload_gen.core.parallel_config import ParallelConfig

    assert len(field_docs(ModelConfig)) >= 10 and len(field_docs(ParallelConfig)) >= 10
