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
    output: results.csv         # .csv or .parquet; relative to the spec file

Axis names are dotted paths into the base mapping. A mapping-valued system is
addressed the same way (``system.nic_bw``). Points are numbered in expansion order,
which is the order of the output table, so the same spec always gives the same table.
"""
from __future__ import annotations

import ast
import copy
import hashlib
import itertools
import json
import operator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from workload_gen.errors import ConfigError
from workload_gen.yaml_file import read_yaml_mapping


@dataclass(frozen=True, slots=True)
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
        blob = json.dumps(self.config, sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class SweepSpec:
    base: dict[str, Any]
    blocks: tuple[tuple[str, tuple[tuple[str, tuple[Any, ...]], ...]], ...]
    """(mode, ((axis, values), ...)) per block; mode is 'product' or 'zip'."""
    filters: tuple[str, ...]
    output: Path
    source: str


def load_spec(path: str | Path) -> SweepSpec:
    p = Path(path)
    data = read_yaml_mapping(p, "base, grid, filters and output")
    return spec_from_dict(data, source=str(p), base_dir=p.parent)


def spec_from_dict(data: Any, source: str = "<spec>", base_dir: Path | None = None) -> SweepSpec:
    if not isinstance(data, dict):
        raise ConfigError("spec", type(data).__name__, "must be a mapping with base/grid/filters/output", source)
    unknown = sorted(set(data) - {"base", "grid", "filters", "output"})
    if unknown:
        raise ConfigError(unknown[0], data[unknown[0]], "unknown spec key; valid: base, grid, filters, output", source)
    base = data.get("base") or {}
    if not isinstance(base, dict):
        raise ConfigError("base", base, "must be a mapping (the run config)", source)
    raw_grid = data.get("grid") or []
    if isinstance(raw_grid, dict):
        raw_grid = [raw_grid]
    blocks = []
    for i, block in enumerate(raw_grid):
        if not isinstance(block, dict) or len(block) != 1 or next(iter(block)) not in ("product", "zip"):
            raise ConfigError(f"grid[{i}]", block, "each block is {product: {axis: [values]}} or {zip: {...}}", source)
        mode, axes = next(iter(block.items()))
        if not isinstance(axes, dict) or not axes:
            raise ConfigError(f"grid[{i}].{mode}", axes, "must map axis names to lists of values", source)
        parsed = []
        for name, values in axes.items():
            if not isinstance(values, list) or not values:
                raise ConfigError(f"grid[{i}].{mode}.{name}", values, "must be a non-empty list", source)
            parsed.append((str(name), tuple(values)))
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
    filters = data.get("filters") or []
    if isinstance(filters, str):
        filters = [filters]
    for f in filters:
        _compile_filter(str(f), source)
    out = Path(data.get("output") or "sweep.csv")
    if base_dir is not None and not out.is_absolute():
        out = base_dir / out
    if out.suffix not in (".csv", ".parquet"):
        raise ConfigError("output", str(out), "must end in .csv or .parquet", source)
    return SweepSpec(base=base, blocks=tuple(blocks), filters=tuple(str(f) for f in filters), output=out, source=source)


def _known_fields() -> dict[str, tuple[str, ...]]:
    """The fields a grid axis may address, per top-level section."""
    from dataclasses import fields

    from workload_gen.config_loading import LAYOUT_KEYS, MODEL_KEYS, TRAINING_KEYS
    from workload_gen.system import SystemConfig

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
    """All points of the grid that pass the filters, in deterministic order."""
    block_rows = [_block_rows(mode, axes) for mode, axes in spec.blocks] or [[()]]
    checks = [_compile_filter(f, spec.source) for f in spec.filters]
    points = []
    for combo in itertools.product(*block_rows):
        axes = tuple(kv for row in combo for kv in row)
        config = copy.deepcopy(spec.base)
        for name, value in axes:
            set_dotted(config, name, value)
        if all(check(config) for check in checks):
            points.append(SweepPoint(index=len(points), axes=axes, config=config))
    return points


# --- filters: a tiny safe expression language over dotted config names -----------------

_BINOPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow}
_CMPS = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
         ast.Gt: operator.gt, ast.GtE: operator.ge, ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b}


def _dotted_name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = _dotted_name(node.value)
        return f"{inner}.{node.attr}" if inner else None
    return None


def _compile_filter(expr: str, source: str):
    """Parse once; evaluation walks the AST. Only arithmetic, comparisons, and/or/not, literals and names."""
    try:
        tree = ast.parse(expr, mode="eval").body
    except SyntaxError:
        raise ConfigError("filters", expr, "not a valid expression", source) from None

    def ev(node: ast.AST, cfg: dict[str, Any]) -> Any:
        if isinstance(node, ast.Constant):
            return node.value
        name = _dotted_name(node)
        if name is not None:
            if name in ("True", "False", "None"):
                return {"True": True, "False": False, "None": None}[name]
            return get_dotted(cfg, name)
        if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
            return _BINOPS[type(node.op)](ev(node.left, cfg), ev(node.right, cfg))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            return not ev(node.operand, cfg)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -ev(node.operand, cfg)
        if isinstance(node, ast.BoolOp):
            vals = (ev(v, cfg) for v in node.values)
            return all(vals) if isinstance(node.op, ast.And) else any(vals)
        if isinstance(node, ast.Compare) and all(type(o) in _CMPS for o in node.ops):
            left = ev(node.left, cfg)
            for op, comp in zip(node.ops, node.comparators):
                right = ev(comp, cfg)
                if not _CMPS[type(op)](left, right):
                    return False
                left = right
            return True
        if isinstance(node, (ast.List, ast.Tuple)):
            return [ev(e, cfg) for e in node.elts]
        raise ConfigError("filters", expr, f"unsupported syntax '{ast.dump(node)[:40]}'", source)

    # Validate the syntax once against an empty config (names evaluate to None).
    def check(cfg: dict[str, Any]) -> bool:
        try:
            return bool(ev(tree, cfg))
        except TypeError:
            return False  # e.g. a name missing from this point: the filter cannot hold

    try:
        ev(tree, {})
    except TypeError:
        pass
    return check
