"""Fuzz the SQLite profile database and its CSV import."""
from __future__ import annotations

import sqlite3

from fuzz_helpers import (
    fuzz_settings,
    json_scalars,
    mutated_bytes,
    mutated_text,
    only_trainsim_errors,
    scratch_file,
)
from fuzz_seeds import profile_csv_text, profile_db_bytes
from hypothesis import example, given
from hypothesis import strategies as st

from compute_profile.db import COLUMNS, ProfileDB, read_csv_rows


def _use(path, create: bool) -> None:
    with ProfileDB(path, create=create) as db:
        len(db)
        db.stats()
        db.gpus()
        for r in db.rows():
            db.get(*r.key)
        db.family("h100-sxm", "gemm", "fwd", "bf16")
        if create:
            db.put(read_csv_rows(scratch_file("seed.csv", profile_csv_text())), replace=True)


def _open_bytes(data: bytes, create: bool) -> None:
    _use(scratch_file("profile.sqlite", data), create)


def _bad_freelist() -> bytes:
    data = bytearray(profile_db_bytes())
    data[32:40] = (16777216).to_bytes(4, "big") + (1).to_bytes(4, "big")  # first freelist page past the end
    return bytes(data)


@fuzz_settings(100)
@given(mutated_bytes([profile_db_bytes()], max_mutations=4), st.booleans())
@example(_bad_freelist(), False)          # found by this fuzzer: quick_check's report was two lines
@example(b"", False)
@example(b"this is not sqlite at all" * 100, False)
def test_profile_db_bytes_only_raise_trainsim_errors(data, create):
    only_trainsim_errors(_open_bytes, data, create)


_SQL_VALUES = st.one_of(json_scalars.filter(lambda v: not isinstance(v, int) or abs(v) < 2**63),
                        st.binary(max_size=8))


@fuzz_settings(100)
@given(st.lists(st.tuples(st.sampled_from(COLUMNS), _SQL_VALUES, st.integers(1, 5)), min_size=1, max_size=4),
       st.sampled_from(["", "DROP TABLE meta", "DROP TABLE kernel_times", "DELETE FROM meta",
                        "UPDATE meta SET value='x'", "CREATE TABLE extra(x)", "ALTER TABLE kernel_times DROP COLUMN note"]),
       st.booleans())
@example([("time_s", "abc", 1)], "", False)                  # text where a number belongs
@example([("repeats", 2.5, 1)], "", False)
@example([("gpu", None, 1)], "", False)
@example([("time_s", float("inf"), 1)], "", False)
def test_profile_db_contents_only_raise_trainsim_errors(updates, statement, create):
    path = scratch_file("contents.sqlite", profile_db_bytes())
    con = sqlite3.connect(path)
    con.execute("PRAGMA ignore_check_constraints = ON")
    for col, value, rowid in updates:
        try:
            con.execute(f"UPDATE OR IGNORE kernel_times SET {col} = ? WHERE rowid = ?", (value, rowid))
        except sqlite3.IntegrityError:
            pass  # NOT NULL: the file cannot hold it
    if statement:
        try:
            con.execute(statement)
        except sqlite3.OperationalError:
            pass
    con.commit()
    con.close()
    only_trainsim_errors(_use, path, create)


def _damaged_db(name: str, *statements: str) -> str:
    """A valid profile database edited by ``statements`` (the damage a fuzz run found)."""
    path = scratch_file(name, profile_db_bytes())
    con = sqlite3.connect(path)
    for statement in statements:
        con.execute(statement)
    con.commit()
    con.close()
    return path


def test_text_that_is_not_utf8_in_the_database_is_a_format_error():
    # Found by the fuzzer (a flipped byte in a TEXT cell): sqlite3 failed to decode it.
    path = _damaged_db("not-utf8.sqlite", "UPDATE kernel_times SET note = CAST(x'ff41' AS TEXT) WHERE rowid = 1")
    only_trainsim_errors(_use, path, False)


def test_a_table_name_that_is_not_text_is_a_format_error():
    # Found by the long fuzz run (a flipped byte made a schema name a BLOB): sorting the
    # table names to list them compared bytes with str.
    path = _damaged_db("blob-name.sqlite", "PRAGMA writable_schema = ON",
                       "UPDATE sqlite_master SET name = x'6d657461' WHERE name = 'meta'")  # the bytes of 'meta'
    only_trainsim_errors(_use, path, False)


def _read_csv(text: str | bytes) -> None:
    read_csv_rows(scratch_file("profile.csv", text))


@fuzz_settings(150)
@given(mutated_text([profile_csv_text()]))
@example(profile_csv_text().replace("seed, with a comma", "x" * 200_000))   # field over csv's limit
@example(profile_csv_text().replace("seed", "\x00"))                       # NUL byte
@example(profile_csv_text().replace("0.0001", "nan"))
@example(profile_csv_text().replace("2000000000.0", "inf"))
def test_profile_csv_only_raises_trainsim_errors(text):
    only_trainsim_errors(_read_csv, text)


@fuzz_settings(50)
@given(mutated_bytes([profile_csv_text().encode()]))
@example(profile_csv_text().encode().replace(b"seed", b"\xff\xfe"))        # not UTF-8
def test_profile_csv_bytes_only_raise_trainsim_errors(data):
    only_trainsim_errors(_read_csv, data)


AIOB = """train_iter:1
Emb:
    time_gpu_max: 857
    time_gpu_min: 782
    time_gpu_avg: 799
layernorm:
    time_gpu_max: 84
    time_gpu_min: 43
    time_gpu_avg: 70
"""


@fuzz_settings(100)
@given(st.one_of(mutated_text([AIOB]), mutated_bytes([AIOB.encode()])))
@example(AIOB.replace("799", "e"))                  # matched the number pattern, not a number
@example(AIOB.replace("799", "1e400"))
@example(AIOB.encode().replace(b"Emb", b"\xff"))
def test_aiob_profile_only_raises_trainsim_errors(data):
    from compute_profile.aiob import parse_aiob

    only_trainsim_errors(parse_aiob, scratch_file("aiob.txt", data))
