"""Sweep specs: a base run config and a grid over any of its fields.

A spec is YAML::

    base:                       # the same mapping gen-workload's -c YAML takes, plus `system`
      model: llama3-8b
      parallel: {world_size: 64, global_batch: 512, micro_batch: 1, seq_length: 4096}
      system: h100              # a preset name, or a mapping of system fields (with `base:`)
    grid:                       # a list of blocks; blocks combine as a product
      - product:                # every combination of these axes
          parallel.tp: [1, 2, 4, 8]
          parallel.pp: [1, 2, 4]
      - zip:                    # these axes advance together (equal lengths)
          parallel.world_size: [64, 128, 256]
          parallel.global_batch: [256, 512, 1024]
    filters:                    # optional; a point is kept only if every expression is true
      - "parallel.tp * parallel.pp <= 32"
    output: results.csv         # .csv or .parquet; relative to the spec file and inside its directory

Axis names are dotted paths into the base mapping. A mapping-valued system is
addressed the same way (``system.nic_bw``). Points are numbered in expansion order,
which is the order of the output table, so the same spec always gives the same table.

Limits (workload_gen.core.limits, each refused up front with the limit in the message): at most
MAX_SWEEP_POINTS grid points; a filter has at most MAX_EXPR_CHARS characters,
MAX_EXPR_NODES syntax nodes and MAX_EXPR_DEPTH levels, and its arithmetic is bounded
(integers up to MAX_EXPR_INT_BITS bits, strings and lists up to MAX_EXPR_SEQUENCE items),
so ``9 ** 9 ** 9`` or ``"a" * 4000000000`` is one line instead of minutes and gigabytes.
A filter that divides by zero or overflows at some point is one line naming the point. A
grid whose filters keep no point is refused.
"""
from __future__ import annotations

import ast
import copy
import hashlib
import itertools
import json
import math
import operator
import warnings
from dataclasses import replace
from pathlib import Path
from typing import Any

from engine.sweep.table import check_table_path
from workload_gen.core.errors import ConfigError
from workload_gen.core.limits import (
    MAX_EXPR_CHARS,
    MAX_EXPR_DEPTH,
    MAX_EXPR_INT_BITS,
    MAX_EXPR_NODES,
    MAX_EXPR_SEQUENCE,
    MAX_NESTING,
    MAX_SWEEP_POINTS,
)
from workload_gen.core.record import record
from workload_gen.core.yaml_file import read_yaml_mapping

_MAX_SPEC_NODES = 1_000_000
"""Values in a spec, aliases counted at each use (a YAML "billion laughs" is refused)."""


@record
class SweepPoint:
    index: int
    """Position in expansion order (and in the output table)."""
    axes: tuple[tuple[str, Any], ...]
    """The grid values of this point, as (dotted name, value)."""
    config: dict[str, Any]
    """The full run mapping: base with the axes applied."""

    @property
    def key(self) -> str:
        """Stable identity of the point, used to resume a sweep."""
        try:
            blob = json.dumps(self.config, sort_keys=True, default=str)
        except TypeError:  # keys of mixed types (YAML allows `5: x` beside `a: y`) cannot be sorted
            blob = json.dumps(_text_keys(self.config), sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _text_keys(value: Any) -> Any:
    """``value`` with every mapping key as text (for a sortable, stable JSON form)."""
    if isinstance(value, dict):
        return {str(k): _text_keys(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_text_keys(v) for v in value]
    return value


@record
class SweepSpec:
    base: dict[str, Any]
    blocks: tuple[tuple[str, tuple[tuple[str, tuple[Any, ...]], ...]], ...]
    """(mode, ((axis, values), ...)) per block; mode is 'product' or 'zip'."""
    filters: tuple[str, ...]
    output: Path
    source: str


def load_spec(path: str | Path, *, output: str | Path | None = None) -> SweepSpec:
    """The spec at ``path``; ``output`` (the command line's -o/--out) replaces its
    ``output:``, which is then not required to stay inside the spec's directory."""
    p = Path(path)
    data = read_yaml_mapping(p, "base, grid, filters and output")
    spec = spec_from_dict(data, source=str(p), base_dir=p.parent, confine_output=output is None)
    return spec if output is None else replace(spec, output=Path(output))


def _check_spec_size(data: Any, source: str) -> None:
    """Refuse a spec too deep or too large to copy per point (YAML aliases counted at each
    use); iterative, so a deep spec cannot exhaust the stack here."""
    todo: list[tuple[Any, int]] = [(data, 1)]
    seen = 0
    while todo:
        node, depth = todo.pop()
        seen += 1
        if seen > _MAX_SPEC_NODES:
            raise ConfigError("spec", f"more than {_MAX_SPEC_NODES:,} values", "too large (YAML aliases count at "
                              "each use)", source)
        if depth > MAX_NESTING:
            raise ConfigError("spec", f"nesting depth > {MAX_NESTING}", "too deeply nested "
                              "(workload_gen/core/limits.py MAX_NESTING)", source)
        if isinstance(node, dict):
            todo.extend((v, depth + 1) for v in node.values())
            todo.extend((k, depth + 1) for k in node)
        elif isinstance(node, (list, tuple)):
            todo.extend((v, depth + 1) for v in node)


def _resolve_relative_paths(base: dict, base_dir: Path | None) -> dict:
    """The base's file references (model.hf_config, a system YAML path) resolved against the
    spec's directory, as its output is (issue 29: a relative hf_config was looked up in the
    current directory)."""
    if base_dir is None:
        return base
    out = dict(base)
    model = out.get("model")
    if isinstance(model, dict) and isinstance(model.get("hf_config"), str) and not Path(model["hf_config"]).is_absolute():
        out["model"] = {**model, "hf_config": str(base_dir / model["hf_config"])}
    system = out.get("system")
    if isinstance(system, str) and system.endswith((".yaml", ".yml")) and not Path(system).is_absolute():
        out["system"] = str(base_dir / system)
    return out


def spec_from_dict(data: Any, source: str = "<spec>", base_dir: Path | None = None,
                   confine_output: bool = True) -> SweepSpec:
    if not isinstance(data, dict):
        raise ConfigError("spec", type(data).__name__, "must be a mapping with base/grid/filters/output", source)
    _check_spec_size(data, source)
    unknown = sorted((k for k in data if k not in ("base", "grid", "filters", "output")), key=str)
    if unknown:
        raise ConfigError(str(unknown[0]), data[unknown[0]], "unknown spec key; valid: base, grid, filters, output",
                          source)
    base = data.get("base") or {}
    if not isinstance(base, dict):
        raise ConfigError("base", base, "must be a mapping (the run config)", source)
    base = _resolve_relative_paths(base, base_dir)
    raw_grid = data.get("grid") or []
    if isinstance(raw_grid, dict):
        raw_grid = [raw_grid]
    if not isinstance(raw_grid, list):
        raise ConfigError("grid", raw_grid, "must be a list of blocks, each {product: {axis: [values]}} or "
                          "{zip: {...}} (or one such block)", source)
    blocks = []
    for i, block in enumerate(raw_grid):
        if not isinstance(block, dict) or len(block) != 1 or next(iter(block)) not in ("product", "zip"):
            raise ConfigError(f"grid[{i}]", block, "each block is {product: {axis: [values]}} or {zip: {...}}", source)
        mode, axes = next(iter(block.items()))
        if not isinstance(axes, dict) or not axes:
            raise ConfigError(f"grid[{i}].{mode}", axes, "must map axis names to lists of values", source)
        parsed = []
        for name, values in axes.items():
            if not isinstance(name, str):
                raise ConfigError(f"grid[{i}].{mode}", name, "axis names are dotted field names (text)", source)
            if not isinstance(values, list) or not values:
                raise ConfigError(f"grid[{i}].{mode}.{name}", values, "must be a non-empty list", source)
            parsed.append((name, tuple(values)))
        if mode == "zip" and len({len(v) for _, v in parsed}) != 1:
            lengths = ", ".join(f"{n}: {len(v)}" for n, v in parsed)
            raise ConfigError(f"grid[{i}].zip", lengths, "zipped axes must have equal lengths", source)
        blocks.append((mode, tuple(parsed)))
    names = [n for _, axes in blocks for n, _ in axes]
    for name in names:
        _check_axis(name, source)
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise ConfigError("grid", dup[0], "an axis may appear in only one block", source)
    total = 1
    for mode, axes in blocks:
        total *= len(axes[0][1]) if mode == "zip" else math.prod(len(v) for _, v in axes)
        if total > MAX_SWEEP_POINTS:
            raise ConfigError("grid", f"more than {MAX_SWEEP_POINTS:,} points",
                              f"a sweep may have at most {MAX_SWEEP_POINTS:,} points "
                              "(workload_gen/core/limits.py MAX_SWEEP_POINTS); split it", source)
    filters = data.get("filters") or []
    if isinstance(filters, str):
        filters = [filters]
    if not isinstance(filters, list) or not all(isinstance(f, str) for f in filters):
        raise ConfigError("filters", _shown(repr(filters)), "must be a list of expressions (text)", source)
    for f in filters:
        _compile_filter(f, source)
    output = data.get("output") or "sweep.csv"
    if not isinstance(output, str):
        raise ConfigError("output", output, "must be a file name ending in .csv or .parquet", source)
    if "\0" in output:
        raise ConfigError("output", output, "must not contain a NUL character", source)
    out = Path(output)
    if base_dir is not None:
        # A spec may name its table only inside its own directory (a downloaded spec must
        # not write over ../../something); another place is the command line's -o/--out.
        out = base_dir / out
        inside = out.resolve(strict=False)
        root = base_dir.resolve(strict=False)
        if confine_output and inside != root and root not in inside.parents:
            raise ConfigError("output", output, f"must stay inside the spec's directory {root}; "
                                                "write elsewhere with --out PATH on the command line", source)
    check_table_path(out, "output", source)
    return SweepSpec(base=base, blocks=tuple(blocks), filters=tuple(filters), output=out, source=source)


def _known_fields() -> dict[str, tuple[str, ...]]:
    """The fields a grid axis may address, per top-level section."""
    from dataclasses import fields

    from workload_gen.config_loading import LAYOUT_KEYS, MODEL_KEYS, TRAINING_KEYS
    from workload_gen.core.system import SystemConfig

    par = LAYOUT_KEYS + TRAINING_KEYS + ("num_layers_per_virtual_pipeline_stage",)
    return {"model": MODEL_KEYS + ("preset",), "parallel": par, "training": par,
            "system": tuple(f.name for f in fields(SystemConfig)) + ("base",)}


def _check_axis(name: str, source: str) -> None:
    """A typo in an axis would make every point invalid; catch it when the spec is read."""
    known = _known_fields()
    section, _, leaf = name.partition(".")
    if section not in known:
        raise ConfigError("grid", name, f"axes start with one of {', '.join(known)}", source)
    if leaf and leaf not in known[section]:
        raise ConfigError("grid", name, f"unknown {section} field '{leaf}'; valid: {', '.join(known[section])}", source)
    if not leaf and section != "model" and section != "system":
        raise ConfigError("grid", name, f"name a field, e.g. {section}.{known[section][0]}", source)


def set_dotted(mapping: dict[str, Any], dotted: str, value: Any) -> None:
    """Set ``a.b.c`` in a nested mapping; a string at ``a`` (a preset name) becomes ``{name: ...}``."""
    parts = dotted.split(".")
    node = mapping
    for part in parts[:-1]:
        child = node.get(part)
        if isinstance(child, str):
            # A preset name addressed by field: keep the preset as the base of the mapping.
            child = {"preset" if part == "model" else "base": child}
        elif child is None:
            child = {}
        elif not isinstance(child, dict):
            raise ConfigError(dotted, value, f"'{part}' is not a mapping in the base config")
        node[part] = child
        node = child
    node[parts[-1]] = value


def get_dotted(mapping: dict[str, Any], dotted: str) -> Any:
    node: Any = mapping
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


def _block_rows(mode: str, axes: tuple[tuple[str, tuple[Any, ...]], ...]) -> list[tuple[tuple[str, Any], ...]]:
    names = [n for n, _ in axes]
    if mode == "zip":
        return [tuple(zip(names, vals)) for vals in zip(*(v for _, v in axes))]
    return [tuple(zip(names, vals)) for vals in itertools.product(*(v for _, v in axes))]


def expand(spec: SweepSpec) -> list[SweepPoint]:
    """All points of the grid that pass the filters, in deterministic order.

    A grid with points none of which passes the filters is refused (ConfigError): a sweep
    of nothing is always a mistake in the filters."""
    block_rows = [_block_rows(mode, axes) for mode, axes in spec.blocks] or [[()]]
    checks = [_compile_filter(f, spec.source) for f in spec.filters]
    points = []
    considered = 0
    for combo in itertools.product(*block_rows):
        considered += 1
        axes = tuple(kv for row in combo for kv in row)
        config = copy.deepcopy(spec.base)
        for name, value in axes:
            set_dotted(config, name, value)
        if all(check(config, axes) for check in checks):
            points.append(SweepPoint(index=len(points), axes=axes, config=config))
    if not points and checks:
        raise ConfigError("filters", [_shown(f) for f in spec.filters], f"no point of the grid passes them (all {considered} "
                          "filtered out)", spec.source)
    return points


# --- filters: a tiny safe expression language over dotted config names -----------------

_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow}
_CMPS = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
         ast.Gt: operator.gt, ast.GtE: operator.ge, ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b}
_UNARY = (ast.Not, ast.USub, ast.UAdd)
_LEAVES = (ast.Load, ast.And, ast.Or, *_BINOPS, *_CMPS, *_UNARY)
"""Operator and context nodes: they carry no value of their own."""


class _FilterLimit(Exception):
    """A bounded-arithmetic limit was hit while evaluating a filter."""


def _dotted_name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = _dotted_name(node.value)
        return f"{inner}.{node.attr}" if inner else None
    return None


def _is_num(x: Any) -> bool:
    return isinstance(x, (int, float))  # bools too, as in Python


def _bounded(value: Any) -> Any:
    """Refuse values past the filter limits (checked after every operation)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > MAX_EXPR_INT_BITS:
        raise _FilterLimit(f"an integer over {MAX_EXPR_INT_BITS} bits (workload_gen/core/limits.py MAX_EXPR_INT_BITS)")
    if isinstance(value, (str, list, tuple)) and len(value) > MAX_EXPR_SEQUENCE:
        raise _FilterLimit(f"a string or list over {MAX_EXPR_SEQUENCE:,} items "
                           "(workload_gen/core/limits.py MAX_EXPR_SEQUENCE)")
    if isinstance(value, complex):
        raise _FilterLimit("a complex number")
    return value


def _binop(op: type, a: Any, b: Any) -> Any:
    """Arithmetic with its cost bounded before it is paid."""
    num_a, num_b = _is_num(a), _is_num(b)
    if op is ast.Pow:
        if not (num_a and num_b):
            raise TypeError("** needs numbers")
        big = isinstance(a, int) and isinstance(b, int) and b > 0 and abs(a) > 1
        if big and b * math.log2(abs(a)) > MAX_EXPR_INT_BITS:
            raise _FilterLimit(f"{a} ** {b} is over {MAX_EXPR_INT_BITS} bits "
                               "(workload_gen/core/limits.py MAX_EXPR_INT_BITS)")
    elif op is ast.Mult:
        for seq, n in ((a, b), (b, a)):
            if isinstance(seq, (str, list)) and isinstance(n, int) and len(seq) * max(n, 0) > MAX_EXPR_SEQUENCE:
                raise _FilterLimit(f"repetition to {len(seq) * n:,} items is over {MAX_EXPR_SEQUENCE:,} "
                                   "(workload_gen/core/limits.py MAX_EXPR_SEQUENCE)")
    elif op is ast.Add:
        if not (num_a and num_b) and type(a) is not type(b):
            raise TypeError("+ needs two numbers, two strings or two lists")
    elif not (num_a and num_b):
        raise TypeError("arithmetic needs numbers")  # e.g. "%s" % x would be string formatting
    return _bounded(_BINOPS[op](a, b))


def _shown(expr: str) -> str:
    """A filter as messages quote it: long ones cut, so the message stays one short line."""
    return expr if len(expr) <= 80 else expr[:77] + "..."


def _check_tree(tree: ast.AST, expr: str, source: str) -> None:
    """Size, depth and syntax of a filter, before it is ever evaluated."""
    todo: list[tuple[ast.AST, int]] = [(tree, 1)]
    count = 0
    while todo:
        node, depth = todo.pop()
        if isinstance(node, _LEAVES):
            continue
        count += 1
        if count > MAX_EXPR_NODES:
            raise ConfigError("filters", _shown(expr), f"over {MAX_EXPR_NODES} syntax nodes "
                              "(workload_gen/core/limits.py MAX_EXPR_NODES)", source)
        if depth > MAX_EXPR_DEPTH:
            raise ConfigError("filters", _shown(expr), f"nested over {MAX_EXPR_DEPTH} levels "
                              "(workload_gen/core/limits.py MAX_EXPR_DEPTH)", source)
        if _dotted_name(node) is not None:
            continue
        ok = (
            isinstance(node, ast.Constant) and (node.value is None or isinstance(node.value, (bool, int, float, str)))
            or isinstance(node, ast.BinOp) and type(node.op) in _BINOPS
            or isinstance(node, ast.UnaryOp) and isinstance(node.op, _UNARY)
            or isinstance(node, ast.BoolOp)
            or isinstance(node, ast.Compare) and all(type(o) in _CMPS for o in node.ops)
            or isinstance(node, (ast.List, ast.Tuple))
        )
        if not ok:
            raise ConfigError("filters", _shown(expr), f"unsupported syntax '{ast.dump(node)[:40]}'", source)
        if isinstance(node, ast.Constant):
            try:
                _bounded(node.value)
            except _FilterLimit as exc:
                raise ConfigError("filters", _shown(expr), f"a literal is {exc}", source) from None
        todo.extend((child, depth + 1) for child in ast.iter_child_nodes(node))


def _compile_filter(expr: str, source: str):
    """Parse once; evaluation walks the AST. Only arithmetic, comparisons, and/or/not, literals and names."""
    if not isinstance(expr, str):
        raise ConfigError("filters", _shown(repr(expr)), "must be an expression (text)", source)
    if len(expr) > MAX_EXPR_CHARS:
        raise ConfigError("filters", _shown(expr), f"over {MAX_EXPR_CHARS:,} characters "
                          "(workload_gen/core/limits.py MAX_EXPR_CHARS)", source)
    try:
        with warnings.catch_warnings():
            # Python warns on stderr of a literal run into a keyword ("1and": invalid decimal
            # literal) whether it then accepts or refuses it: a filter's outcome is one line
            warnings.simplefilter("ignore", SyntaxWarning)
            tree = ast.parse(expr.strip(), mode="eval").body
    except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError):
        raise ConfigError("filters", _shown(expr), "not a valid expression", source) from None
    _check_tree(tree, expr, source)

    def ev(node: ast.AST, cfg: dict[str, Any]) -> Any:
        if isinstance(node, ast.Constant):
            return node.value
        name = _dotted_name(node)
        if name is not None:
            if name in ("True", "False", "None"):
                return {"True": True, "False": False, "None": None}[name]
            return get_dotted(cfg, name)
        if isinstance(node, ast.BinOp):
            return _binop(type(node.op), ev(node.left, cfg), ev(node.right, cfg))
        if isinstance(node, ast.UnaryOp):
            operand = ev(node.operand, cfg)
            if isinstance(node.op, ast.Not):
                return not operand
            if not _is_num(operand):
                raise TypeError("unary minus needs a number")
            return _bounded(-operand if isinstance(node.op, ast.USub) else +operand)
        if isinstance(node, ast.BoolOp):
            vals = (ev(v, cfg) for v in node.values)
            return all(vals) if isinstance(node.op, ast.And) else any(vals)
        if isinstance(node, ast.Compare):
            left = ev(node.left, cfg)
            for op, comp in zip(node.ops, node.comparators):
                right = ev(comp, cfg)
                if not _CMPS[type(op)](left, right):
                    return False
                left = right
            return True
        if isinstance(node, (ast.List, ast.Tuple)):
            return _bounded([ev(e, cfg) for e in node.elts])
        raise ConfigError("filters", _shown(expr), f"unsupported syntax '{ast.dump(node)[:40]}'", source)

    def check(cfg: dict[str, Any], axes: tuple[tuple[str, Any], ...] = ()) -> bool:
        try:
            return bool(ev(tree, cfg))
        except TypeError:
            return False  # e.g. a name missing from this point: the filter cannot hold
        except (ZeroDivisionError, OverflowError, _FilterLimit) as exc:
            # the point's description is built only here, not for every point checked
            where = " at the point " + ", ".join(f"{n}={v!r}" for n, v in axes)[:200] if axes else ""
            why = ("divides by zero" if isinstance(exc, ZeroDivisionError)
                   else "overflows" if isinstance(exc, OverflowError) else f"computes {exc}")
            raise ConfigError("filters", _shown(expr), f"{why}{where}", source) from None

    # Validate once against an empty config (names evaluate to None): constant arithmetic
    # that divides by zero or exceeds a limit is refused when the spec is read.
    check({})
    return check
