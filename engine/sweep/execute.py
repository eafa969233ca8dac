"""Run sweep points locally (processes) or on Ray, resumably and deterministically.

Each finished point is appended to a JSON-lines journal next to the output table
(``<output>.journal.jsonl``) as soon as it is known, so an interrupted sweep loses at
most the points in flight. A restart reads the journal, skips points whose key is
there, and the final table is written (atomically) in point order, so the same spec
gives the same table whatever the execution order or interruptions.
"""
from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from engine.sweep.grid import SweepPoint

Row = dict[str, Any]
Evaluator = Callable[[dict[str, Any]], Row]


def journal_path(output: Path) -> Path:
    return output.with_name(output.name + ".journal.jsonl")


def read_journal(path: Path) -> dict[str, Row]:
    """Rows already computed, by point key. A torn last line (killed mid-write) is ignored."""
    done: dict[str, Row] = {}
    if not path.exists():
        return done
    with path.open() as fh:
        for line in fh:
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue
            done[rec["key"]] = rec["row"]
    return done


def _batches(points: list[SweepPoint], size: int) -> Iterator[list[SweepPoint]]:
    for i in range(0, len(points), size):
        yield points[i:i + size]


def _eval_batch(evaluate: Evaluator, configs: list[tuple[str, dict[str, Any]]]) -> list[tuple[str, Row]]:
    return [(key, evaluate(cfg)) for key, cfg in configs]


class Progress:
    """One line on stderr, rewritten: done/total, rate and ETA. Silent when not a TTY unless asked."""

    def __init__(self, total: int, already: int, enabled: bool = True) -> None:
        self.total, self.done, self.start = total, already, time.perf_counter()
        self.base = already
        self.enabled = enabled
        self.last = 0.0

    def update(self, n: int) -> None:
        self.done += n
        now = time.perf_counter()
        if not self.enabled or (now - self.last < 0.25 and self.done < self.total):
            return
        self.last = now
        elapsed = now - self.start
        rate = (self.done - self.base) / elapsed if elapsed > 0 else 0.0
        eta = (self.total - self.done) / rate if rate > 0 else float("inf")
        width = 30
        filled = int(width * self.done / max(self.total, 1))
        bar = "#" * filled + "-" * (width - filled)
        eta_s = f"{eta:6.0f}s" if eta != float("inf") else "     ?"
        print(f"\r[{bar}] {self.done}/{self.total} {rate:8.0f} pts/s ETA {eta_s}", end="", file=sys.stderr, flush=True)
        if self.done >= self.total:
            print(file=sys.stderr)


def run_points(
    points: list[SweepPoint],
    evaluate: Evaluator,
    journal: Path,
    *,
    workers: int | None = None,
    ray_address: str | None = None,
    use_ray: bool = False,
    batch_size: int = 64,
    progress: bool = True,
) -> list[Row]:
    """Evaluate every point not yet in the journal; return rows in point order."""
    done = read_journal(journal)
    todo = [p for p in points if p.key not in done]
    bar = Progress(len(points), len(points) - len(todo), enabled=progress)
    journal.parent.mkdir(parents=True, exist_ok=True)
    with journal.open("a") as jf:
        def record(results: Iterable[tuple[str, Row]]) -> None:
            n = 0
            for key, row in results:
                done[key] = row
                jf.write(json.dumps({"key": key, "row": row}, sort_keys=True, default=str) + "\n")
                n += 1
            jf.flush()
            bar.update(n)

        batches = [[(p.key, p.config) for p in b] for b in _batches(todo, batch_size)]
        if use_ray:
            _run_ray(batches, evaluate, record, ray_address)
        else:
            n_workers = workers if workers is not None else (os.cpu_count() or 1)
            if n_workers <= 1 or len(batches) <= 1:
                for b in batches:
                    record(_eval_batch(evaluate, b))
            else:
                with ProcessPoolExecutor(max_workers=n_workers) as pool:
                    futures = [pool.submit(_eval_batch, evaluate, b) for b in batches]
                    for fut in futures:  # in order: deterministic journal for a given worker count
                        record(fut.result())
    if progress and not todo:
        print(f"all {len(points)} points already done (journal {journal})", file=sys.stderr)
    return [done[p.key] for p in points]


def _run_ray(batches: list[list[tuple[str, dict[str, Any]]]], evaluate: Evaluator, record, address: str | None) -> None:
    """Ray is the distributed engine: one task per batch, results collected as they finish."""
    import ray  # optional dependency (the `ray` extra)

    started_here = not ray.is_initialized()
    if started_here:
        if address:
            ray.init(address=address, log_to_driver=False)
        else:
            ray.init(include_dashboard=False, log_to_driver=False)
    try:
        remote = ray.remote(_eval_batch)
        fn_ref = ray.put(evaluate)
        pending = [remote.remote(fn_ref, b) for b in batches]
        while pending:
            ready, pending = ray.wait(pending, num_returns=1)
            for ref in ready:
                record(ray.get(ref))
    finally:
        if started_here:
            ray.shutdown()
