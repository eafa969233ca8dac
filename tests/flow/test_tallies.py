"""The tallies the flow network keeps incrementally (instead of recounting every draining
flow per event) equal a count from scratch, all through a contended run.

Why: the link loads feed the local max-min re-solve (:mod:`network.flow.local`) and the
NIC users the round-robin shares; a tally that drifted from the flows it counts would
give wrong rates with no other symptom than slightly wrong times.
"""
from __future__ import annotations

import numpy as np

from network.backend import Transfer
from network.flow.backend import FlowBackend
from network.flow.network import DEAD
from workload_gen.core.records import CollectiveOp, CollKind, Group, Phase
from workload_gen.core.system import load_system


def test_kept_link_loads_nic_users_and_fabric_subset_equal_a_recount():
    """A ring all-gather and an all-to-all at once on a 4:1 fat-tree (hundreds of flow
    arrivals, NIC departures and completions, fabric and NVLink): after every slice of
    simulated time, the kept per-resource loads (rtol 1e-12 of the largest capacity), NIC
    users and fabric row count equal a recount over the draining rows."""
    be = FlowBackend(load_system("h100"), 16, topology="fat-tree", oversubscription=4, nodes_per_rack=1)
    for tid, kind in enumerate((CollKind.ALL_GATHER, CollKind.ALL_TO_ALL)):
        op = CollectiveOp(f"c{tid}", 0, Phase.ITERATION, kind, Group.DP, 16, 4 << 20)
        be.submit(Transfer(tid, op, tuple(range(16))), 0.0)
    net = be.net
    n_res = net.pad + 1
    finite = net.capacity[np.isfinite(net.capacity)]
    checks = 0
    while not net.idle:
        net.run_until(net.now + 2e-6, stop_on_transfer=False)
        ids, paths, rates = net.draining()
        load = np.bincount(paths.ravel(), weights=np.repeat(rates, paths.shape[1]), minlength=n_res)
        load[net.pad] = 0.0
        np.testing.assert_allclose(net._load, load, rtol=0, atol=1e-12 * finite.max())
        live = net._act_group != DEAD
        unsent = net._act_unsent & live
        users = np.bincount(net._act_path[unsent, 0], minlength=n_res)
        np.testing.assert_array_equal(net._nic_users, users)
        np.testing.assert_array_equal(net._act_nic_link[unsent], net._act_path[unsent, 0])
        assert (net._act_nic_link[~unsent] == net.pad).all()
        fab_rows = np.flatnonzero(net._act_group == 0)
        sub = net._fab
        used = np.flatnonzero(sub.row >= 0)
        assert sub.free == sub.row.size - used.size
        np.testing.assert_array_equal(np.sort(sub.row[used]), fab_rows)
        np.testing.assert_array_equal(sub.path[used], net._act_path[sub.row[used]])
        np.testing.assert_array_equal(net._act_fab[sub.row[used]], used)
        assert (sub.path[sub.row < 0] == net.pad).all()
        assert np.count_nonzero(net._act_fab >= 0) == used.size
        checks += int(ids.size > 0)
    assert checks > 20
    assert len(net.take_done()) == 2
