"""Run one ```python block of a document (helper of test_docs_examples.py, not a test).

Usage: python _run_python_block.py BLOCK.py SETUP.py DOC LINE

SETUP runs first (the docs-test `setup:` markers); then the block, compiled with the
document's name and line numbers so a traceback points into the page. An expression
statement whose trailing comment is a Python literal must evaluate to it
(`g.algorithm, g.num_flows   # ('nvls_tree', 18432)`); floats compare to 1e-9 relative.
"""
from __future__ import annotations

import ast
import io
import math
import sys
import tokenize
from pathlib import Path


def same(a, b) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        try:
            return math.isclose(float(a), float(b), rel_tol=1e-9)
        except (TypeError, ValueError):
            return False
    if isinstance(a, (tuple, list)) and isinstance(b, (tuple, list)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b


def docs_check(value, expected, where: str) -> None:
    if not same(value, expected):
        raise AssertionError(f"{where}: the page says {expected!r}, the code gives {value!r}")


def with_checks(code: str, doc: str, first_line: int) -> ast.Module:
    comments = {}
    for tok in tokenize.generate_tokens(io.StringIO(code).readline):
        if tok.type == tokenize.COMMENT:
            comments[tok.start[0]] = tok.string[1:].strip()
    tree = ast.parse(code, filename=doc)

    class Checks(ast.NodeTransformer):
        def visit_Expr(self, node: ast.Expr):
            comment = comments.get(node.end_lineno)
            if comment is None:
                return node
            try:
                ast.literal_eval(comment)
            except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
                return node
            where = f"{doc}:{first_line + node.lineno - 1}"
            call = ast.Call(
                func=ast.Name("__docs_check", ast.Load()),
                args=[node.value, ast.parse(comment, mode="eval").body, ast.Constant(where)],
                keywords=[],
            )
            return ast.copy_location(ast.Expr(call), node)

    tree = ast.fix_missing_locations(Checks().visit(tree))
    ast.increment_lineno(tree, first_line - 1)
    return tree


def main() -> None:
    block, setup, doc, line = sys.argv[1:5]
    namespace = {"__name__": "__main__", "__docs_check": docs_check}
    setup_code = Path(setup).read_text(encoding="utf-8")
    if setup_code.strip():
        exec(compile(setup_code, f"{doc} (docs-test setup before line {line})", "exec"), namespace)  # noqa: S102
    code = Path(block).read_text(encoding="utf-8")
    exec(compile(with_checks(code, doc, int(line)), doc, "exec"), namespace)  # noqa: S102


if __name__ == "__main__":
    main()
