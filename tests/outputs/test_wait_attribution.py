"""engine.accounting's attribution of waits, by hand, and the writers' rendering of its records.

spread_waits places the wait the engine charged to one collective onto the collectives of
the same stream that were on the wire while the compute stream waited (FIFO: a collective
queued behind others starts when they end). Each expected list below is worked out from
the spans alone: a wait of x charged to a collective ending at e covered [e - x, e].
"""
from __future__ import annotations

import csv
import io

import pytest

from engine.accounting import spread_waits
from formats.run_outputs import LAYER_COLUMNS, LayerRow, SimaiLayerLine, layers_csv, simai_layers_csv


def test_a_wait_within_the_wire_time_stays_on_its_collective():
    assert spread_waits([(0.0, 2.0, 1.5)]) == [1.5]


def test_a_wait_longer_than_the_wire_moves_onto_the_collective_before_it():
    # the second collective waited 2.5 s: [0.5, 3]; it was on the wire [1, 3] (2 s), the first [0, 1]
    got = spread_waits([(0.0, 1.0, 0.0), (1.0, 3.0, 2.5)])
    assert got == pytest.approx([0.5, 2.0])
    assert sum(got) == pytest.approx(2.5)  # conserved: every waited second found a collective


def test_waited_time_with_nothing_on_the_wire_is_dropped():
    # waited [0.5, 3]: the second is on the wire [2, 3], the first [0, 1]; [1, 2] had none
    assert spread_waits([(0.0, 1.0, 0.0), (2.0, 3.0, 2.5)]) == pytest.approx([0.5, 1.0])


def test_no_collective_is_exposed_for_longer_than_its_wire_time():
    # the first already waited all its second; the second's overflow onto it is capped
    assert spread_waits([(0.0, 1.0, 1.0), (1.0, 3.0, 3.0)]) == pytest.approx([1.0, 2.0])


def test_the_overflow_goes_newest_first_through_a_queue():
    # three back to back, 1 s each; a 3 s wait on the last covers all three
    spans = [(0.0, 1.0, 0.0), (1.0, 2.0, 0.0), (2.0, 3.0, 3.0)]
    assert spread_waits(spans) == pytest.approx([1.0, 1.0, 1.0])
    # a 1.5 s wait covers the last and half of the middle one, none of the first
    spans = [(0.0, 1.0, 0.0), (1.0, 2.0, 0.0), (2.0, 3.0, 1.5)]
    assert spread_waits(spans) == pytest.approx([0.0, 0.5, 1.0])


def test_layers_csv_renders_the_records_it_is_given():
    rows = [LayerRow(stage=0, layer=-1, phase="iter", microbatches=1, compute_s=0.25),
            LayerRow(stage=0, layer=0, phase="fwd", microbatches=4, compute_s=1.0, comm_s=0.5, exposed_comm_s=0.2,
                     comm_bytes=4096, waited_comm_s=0.3)]
    got = list(csv.DictReader(io.StringIO(layers_csv(rows))))
    assert tuple(got[0]) == LAYER_COLUMNS
    assert got[0]["comm_s"] == got[0]["exposed_comm_per_microbatch_s"] == ""  # no simulation, no comm figures
    assert got[1]["compute_per_microbatch_s"] == "0.25" and got[1]["exposed_comm_per_microbatch_s"] == "0.05"
    assert got[1]["comm_bytes"] == "4096" and got[1]["waited_comm_s"] == "0.3"
    assert rows[1].as_dict()["exposed_comm_s"] == 0.2


def test_simai_layers_csv_renders_seconds_per_record():
    line = SimaiLayerLine(record=3, name="attention", fwd_compute_s=1e-3, wg_compute_s=2e-3, ig_compute_s=3e-3,
                          fwd_comm_s=4e-4, wg_comm_s=0.0, ig_comm_s=5e-4, exposed_comm_s=9e-4)
    text = simai_layers_csv([line])
    assert text == ("record,name,fwd_compute_s,wg_compute_s,ig_compute_s,fwd_comm_s,wg_comm_s,ig_comm_s,"
                    "exposed_comm_s\n3,attention,0.001,0.002,0.003,0.0004,0,0.0005,0.0009\n")
