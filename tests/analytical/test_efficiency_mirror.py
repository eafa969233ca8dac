"""The shipped efficiency table's JSON mirror (network/data/efficiency.json) is current:
same content as efficiency.yaml, hash of that file; a stale mirror is never used."""
from __future__ import annotations

import json
import zlib

from network import efficiency
from workload_gen.core.yaml_file import read_yaml_mapping


def test_the_shipped_mirror_matches_the_yaml():
    mirror = json.loads(efficiency.JSON_MIRROR.read_text())
    raw = efficiency.DEFAULT_TABLE.read_bytes()
    assert mirror["source_crc32"] == zlib.crc32(raw), (
        "network/data/efficiency.yaml changed: run "
        "python -c 'from network.efficiency import write_json_mirror; write_json_mirror()'")
    assert mirror["data"] == read_yaml_mapping(efficiency.DEFAULT_TABLE, "table")


def test_a_stale_mirror_is_ignored(tmp_path, monkeypatch):
    yaml_copy = tmp_path / "efficiency.yaml"
    yaml_copy.write_text(efficiency.DEFAULT_TABLE.read_text().replace("half_time_s: 7.792e-5", "half_time_s: 1.0e-3", 1))
    mirror = tmp_path / "efficiency.json"
    mirror.write_text(efficiency.JSON_MIRROR.read_text())  # hash of the original: stale now
    monkeypatch.setattr(efficiency, "DEFAULT_TABLE", yaml_copy)
    monkeypatch.setattr(efficiency, "JSON_MIRROR", mirror)
    data = efficiency._shipped_table_data()
    assert data["default"]["nvlink"]["half_time_s"] == 1.0e-3
