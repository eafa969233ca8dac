"""Run sweep points locally (processes) or on Ray, resumably and deterministically.

Each finished point is appended to a JSON-lines journal next to the output table
(``<output>.journal.jsonl``) as soon as it is known, so an interrupted sweep loses at
most the points in flight. A restart reads the journal, skips points whose key is
there, and the final table is written (atomically) in point order, so the same spec
gives the same table whatever the execution order or interruptions.

Byte-identical resumes: a row is written to the journal with its keys in the order the
evaluator made them (never sorted), and the row a run keeps in memory is the one read
back from its own journal line, so a resumed sweep and an uninterrupted one build their
table from identical rows. A torn line (a kill mid-write) never swallows the record
appended after it: the writer starts on a fresh line, and the reader recovers a record
glued to a torn one.

Interrupts: pool workers ignore SIGINT (the parent alone handles Ctrl-C) and exit when
their parent dies; on Ctrl-C or SIGTERM the parent terminates them and returns at once,
without waiting for the batches in flight.
"""
from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from engine.sweep.grid import SweepPoint
from workload_gen.core.errors import TrainsimError

Row = dict[str, Any]
Evaluator = Callable[[dict[str, Any]], Row]


def journal_path(output: Path) -> Path:
    return output.with_name(output.name + ".journal.jsonl")


_RECORD_START = '{"key"'


def _parse_record(text: str) -> tuple[str, Row] | None:
    try:
        rec = json.loads(text)
    except (json.JSONDecodeError, RecursionError, ValueError):
        return None
    if not isinstance(rec, dict) or not isinstance(rec.get("key"), str) or not isinstance(rec.get("row"), dict):
        return None
    return rec["key"], rec["row"]


def read_journal(path: Path) -> dict[str, Row]:
    """Rows already computed, by point key. A torn line (killed mid-write) is ignored, and
    a record that a later run appended to a torn line is recovered; lines that are not
    records (a damaged file) are skipped."""
    done: dict[str, Row] = {}
    if not path.exists():
        return done
    with path.open(encoding="utf-8", errors="replace") as fh:
        for line in fh:
            rec = _parse_record(line)
            if rec is None:
                # "<torn record><next record>": the next record starts at a later '{"key"'.
                start = line.find(_RECORD_START, 1)
                while rec is None and start > 0:
                    rec = _parse_record(line[start:])
                    start = line.find(_RECORD_START, start + 1)
            if rec is not None:
                done[rec[0]] = rec[1]
    return done


def _journal_line(key: str, row: Row) -> str:
    """One record, keys in the row's own order (never sorted: see the module docstring)."""
    return json.dumps({"key": key, "row": row}, default=str) + "\n"


def _open_journal(path: Path):
    """Open for appending, starting on a fresh line if the last one was torn. A journal path
    that is a symlink or not a regular file is refused: appending would write into whatever
    it points at (issue 29: a journal linked to the sweep's spec)."""
    from workload_gen.core.errors import ConfigError

    if path.is_symlink() or (path.exists() and not path.is_file()):
        raise ConfigError("journal", str(path), "is a symlink or not a regular file; the sweep appends its "
                          "journal there: remove it, or give another --out")
    path.parent.mkdir(parents=True, exist_ok=True)
    torn = False
    if path.exists() and path.stat().st_size > 0:
        with path.open("rb") as fh:
            fh.seek(-1, os.SEEK_END)
            torn = fh.read(1) != b"\n"
    fh = path.open("a", encoding="utf-8")
    if torn:
        fh.write("\n")
    return fh


def _error_row(exc: BaseException) -> Row:
    return {"status": "error", "reason": f"internal error (a trainsim bug): {type(exc).__name__}: {exc}"[:500]}


def _batches(points: list[SweepPoint], size: int) -> Iterator[list[SweepPoint]]:
    for i in range(0, len(points), size):
        yield points[i:i + size]


def _workload_key(config: dict[str, Any]) -> str:
    """The point's config without its system: points with equal keys build the same workload."""
    try:
        return json.dumps({k: v for k, v in config.items() if k != "system"}, sort_keys=True, default=str)
    except TypeError:  # keys of mixed types
        return repr(sorted((str(k), repr(v)) for k, v in config.items() if k != "system"))


def _by_workload(points: list[SweepPoint]) -> list[SweepPoint]:
    """Points that differ only in system fields next to each other (groups in order of first
    appearance, points in order within a group), so they land in one batch and one worker,
    which builds and attaches their workload once (engine.pipeline.build_cached). Rows are
    still tabulated in point order."""
    groups: dict[str, list[SweepPoint]] = {}
    for p in points:
        groups.setdefault(_workload_key(p.config), []).append(p)
    if len(groups) == len(points):
        return points
    return [p for g in groups.values() for p in g]


def _eval_one(evaluate: Evaluator, cfg: dict[str, Any]) -> Row:
    """One point; an unexpected exception (a bug) becomes an ``error`` row with its type and
    message, so one bad point never ends a sweep of thousands."""
    try:
        return evaluate(cfg)
    except Exception as exc:  # noqa: BLE001 - recorded in the row, counted and reported
        return _error_row(exc)


def _eval_batch(evaluate: Evaluator, configs: list[tuple[str, dict[str, Any]]]) -> list[tuple[str, Row]]:
    return [(key, _eval_one(evaluate, cfg)) for key, cfg in configs]


def _worker_init() -> None:
    """In each pool worker: leave Ctrl-C to the parent (a worker's own KeyboardInterrupt
    would print a traceback per worker), and exit when the parent dies (SIGKILL, OOM), so
    no worker outlives its sweep."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # the parent's SIGTERM handler (raise KeyboardInterrupt) is inherited through fork; a
    # worker told to stop must just stop, not print a traceback from inside a queue lock
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    parent = os.getppid()

    def watch() -> None:
        while True:
            time.sleep(0.5)
            if os.getppid() != parent:
                os._exit(1)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def _stop_pool(pool: ProcessPoolExecutor) -> None:
    """Terminate every worker now (Ctrl-C, SIGTERM): cancel what is queued, kill what runs."""
    procs = list(getattr(pool, "_processes", {}).values())  # no public handle on the workers
    for proc in procs:
        if proc.is_alive():
            proc.terminate()
    pool.shutdown(wait=False, cancel_futures=True)
    deadline = time.monotonic() + 0.5
    for proc in procs:
        proc.join(max(0.0, deadline - time.monotonic()))
        if proc.is_alive():
            proc.kill()
            proc.join(0.1)
    # Let the executor's manager thread finish closing its wake-up pipe now: at interpreter
    # exit concurrent.futures would otherwise write to it mid-close (a traceback on stderr).
    manager = getattr(pool, "_executor_manager_thread", None)
    if manager is not None:
        manager.join(1.0)


def worker_count(workers: int | None) -> int:
    """Worker processes for a sweep or search: the number asked for, else every core."""
    return workers if workers is not None else (os.cpu_count() or 1)


@contextmanager
def local_pool(workers: int | None,
               died: str = "a worker process died (out of memory, or killed)") -> Iterator[ProcessPoolExecutor | None]:
    """The sweep's process pool (workers that leave Ctrl-C to the parent and die with it),
    or None for one worker (run in this process). ``search`` runs on it too. On an interrupt
    or error the workers are terminated at once; a worker that died is one line."""
    n = worker_count(workers)
    if n <= 1:
        yield None
        return
    pool = ProcessPoolExecutor(max_workers=n, initializer=_worker_init)
    try:
        yield pool
    except BrokenProcessPool:
        _stop_pool(pool)
        raise TrainsimError(died) from None
    except BaseException:
        _stop_pool(pool)
        raise
    pool.shutdown(wait=True)


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
    from workload_gen.core.progress import Progress  # the one progress bar of every long job

    done = read_journal(journal)
    todo = [p for p in points if p.key not in done]
    # points resumed from the journal are shown as done but kept out of the rate and ETA
    bar = Progress(len(points), "sweep", unit="pt", initial=len(points) - len(todo), quiet=not progress)
    try:
        _run_todo(todo, evaluate, journal, done, bar, workers=workers, ray_address=ray_address, use_ray=use_ray,
                  batch_size=batch_size)
    finally:
        bar.close()  # the bar leaves the screen before anything else prints (an interrupt's line too)
    if not todo:  # on the progress stream, like the bar (a line only where the bar would show)
        bar.close(f"all {len(points)} points already done (journal {journal})")
    return [done[p.key] for p in points]


def _run_todo(todo: list[SweepPoint], evaluate: Evaluator, journal: Path, done: dict[str, Row], bar: Any, *,
              workers: int | None, ray_address: str | None, use_ray: bool, batch_size: int) -> None:
    """Evaluate ``todo`` into the journal and ``done`` (see :func:`run_points`)."""
    with _open_journal(journal) as jf:
        def record(results: Iterable[tuple[str, Row]]) -> None:
            n = 0
            for key, row in results:
                line = _journal_line(key, row)
                jf.write(line)
                done[key] = json.loads(line)["row"]  # exactly what a resumed run reads back
                n += 1
            jf.flush()
            bar.update(n)

        batches = [[(p.key, p.config) for p in b] for b in _batches(_by_workload(todo), batch_size)]
        if use_ray:
            _run_ray(batches, evaluate, record, ray_address)
        else:
            n_workers = worker_count(workers)
            if n_workers <= 1 or len(batches) <= 1:
                for b in batches:
                    record(_eval_batch(evaluate, b))
            else:
                died = ("a sweep worker process died (out of memory, or killed); the points finished so far "
                        f"are in {journal}: run the sweep again to resume")
                with local_pool(min(n_workers, len(batches)), died) as pool:
                    assert pool is not None
                    futures = [pool.submit(_eval_batch, evaluate, b) for b in batches]
                    for fut in futures:  # in order: deterministic journal for a given worker count
                        record(fut.result())


RAY_CONNECT_TIMEOUT_S = 5.0
"""How long ``--ray ADDRESS`` may take to accept a TCP connection before the sweep refuses it:
ray.init itself retries an unreachable head for minutes (3.5 min seen here for a closed port)."""


def check_ray_address(address: str | None, timeout_s: float = RAY_CONNECT_TIMEOUT_S) -> None:
    """Refuse, in one line and before any point runs, a Ray address nothing answers at: a TCP
    connection to HOST:PORT (``ray://HOST:PORT`` for Ray Client) must open within ``timeout_s``.
    None, "" and "auto" (Ray finds or starts a cluster itself) are not probed."""
    import socket

    from workload_gen.core.errors import ConfigError

    if not address or address == "auto":
        return
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError("--ray", address, "expected HOST:PORT (e.g. 10.0.0.1:6379), ray://HOST:PORT or auto")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except OSError as exc:
        why = "no answer" if isinstance(exc, TimeoutError) else (exc.strerror or type(exc).__name__)
        raise ConfigError("--ray", address, f"nothing accepts a connection there within {timeout_s:g} s ({why}); "
                          "start the cluster (ray start --head) or give --ray without an address to run "
                          "Ray on this machine") from None


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
