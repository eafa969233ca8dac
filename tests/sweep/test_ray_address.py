"""`sweep --ray ADDRESS` refuses, in one line and before any point runs, an address nothing
answers at (issue 29: ray.init retried an unreachable head for minutes). The probe is a real
TCP connection: a port this test listens on passes, a closed one is refused at once."""
from __future__ import annotations

import socket

import pytest
import yaml

from engine.commands.sweep import sweep_main
from engine.sweep.execute import check_ray_address, journal_path
from workload_gen.core.errors import ConfigError


def _closed_port() -> int:
    with socket.socket() as s:  # bound then closed: nothing listens there afterwards
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_listening_address_passes_and_a_closed_one_is_refused():
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        check_ray_address(f"127.0.0.1:{server.getsockname()[1]}")
        check_ray_address(f"ray://127.0.0.1:{server.getsockname()[1]}")
    with pytest.raises(ConfigError, match="nothing accepts a connection there within 5 s"):
        check_ray_address(f"127.0.0.1:{_closed_port()}")


@pytest.mark.parametrize("address", ["garbage", "host:", ":6379", "host:99999", "host:port"])
def test_a_malformed_address_names_the_valid_forms(address):
    with pytest.raises(ConfigError, match="expected HOST:PORT"):
        check_ray_address(address)


@pytest.mark.parametrize("address", [None, "", "auto"])
def test_no_address_is_not_probed(address):
    check_ray_address(address)


def test_the_sweep_stops_before_any_point(tmp_path, capsys):
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump({"base": {"model": "gpt3-125m", "parallel": {"world_size": 8}},
                                    "grid": [{"product": {"parallel.tp": [1, 2]}}], "output": "out.csv"}))
    assert sweep_main([str(spec), "--ray", f"127.0.0.1:{_closed_port()}", "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and err.startswith("error: --ray=")
    assert not (tmp_path / "out.csv").exists() and not journal_path(tmp_path / "out.csv").exists()
