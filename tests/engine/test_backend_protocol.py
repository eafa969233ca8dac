"""The engine drives any NetworkBackend through the pull protocol (packet-style backends
answer advance_until by running); the protocol declares everything the engine uses, and
backends are found by registered name."""
import math

import pytest
from _build import SYSTEM, LinearBackend, workload

from engine import simulate
from network.backend import Completion

CASE = dict(pp=2, vpp=2, m=4, tp=2, dp=2, layers_per_chunk=2, tp_bytes=10**8, pp_bytes=10**8,
            dp_bytes=(10**9,), overlap_grad=True, opt_time=0.05, emb_bytes=10**8)


class SteppingBackend(LinearBackend):
    """Like a packet simulator: runs forward only as far as it is allowed to, and does
    not say when its next completion is."""

    def __init__(self, **kw):
        super().__init__(contention_free=False, **kw)
        self.clock = 0.0
        self.max_seen = 0.0

    def next_completion_time(self):  # pragma: no cover - the engine must not need it
        raise AssertionError("engine asked a stepping backend for its next completion")

    def submit(self, transfer, now):
        assert now >= self.clock, "submitted in the network's past"
        super().submit(transfer, now)

    def advance_until(self, t):
        first = self._heap[0][0] if self._heap else math.inf
        if first > t:
            self.clock = max(self.clock, t) if t != math.inf else self.clock
            return []
        self.clock = first
        out = []
        while self._heap and self._heap[0][0] == first:
            ft, i = __import__("heapq").heappop(self._heap)
            out.append(Completion(i, ft))
        return out


def test_advance_until_gives_the_same_iteration():
    w = workload(**CASE)
    ref = simulate(w, SYSTEM, LinearBackend(bw=1e10), all_ranks=True)
    step = simulate(w, SYSTEM, SteppingBackend(bw=1e10), all_ranks=True)
    assert step.iteration_time_s == pytest.approx(ref.iteration_time_s, rel=1e-12)
    assert step.stage_breakdowns == ref.stage_breakdowns


def test_each_collective_instance_is_submitted_once_with_its_groups_ranks():
    w = workload(**CASE)
    be = LinearBackend(bw=1e10, contention_free=False)
    simulate(w, SYSTEM, be)
    ids = [t.id for t, _ in be.submitted]
    assert len(ids) == len(set(ids)) == sorted(ids)[-1] + 1
    par = w.parallel
    tp = [t for t, _ in be.submitted if t.op.group.value == "tp"]
    # every TP instance: one per TP group (world / tp groups) per op instance
    n_tp_ops = sum(1 for st in w.stages for ch in st.chunks for op in ch.forward + ch.backward
                   if getattr(op, "group", None) is not None and op.group.value == "tp")
    assert len(tp) == n_tp_ops * par.num_microbatches * (par.world_size // par.tp // par.pp)
    assert all(len(t.ranks) == par.tp for t in tp)
    pp = [t for t, _ in be.submitted if t.op.group.value == "pp"]
    assert all(len(t.ranks) == 2 for t in pp)


class PastBackend(LinearBackend):
    def advance_to(self, t):
        return [Completion(c.id, c.time - 1.0) for c in super().advance_to(t)]


def test_a_completion_in_the_past_is_caught():
    with pytest.raises(AssertionError, match="backwards"):
        simulate(workload(m=2, tp=2, tp_bytes=10**8), SYSTEM, PastBackend(bw=1e10, contention_free=False))


def _protocol_members(proto: type) -> set[str]:
    """Methods and attributes a Protocol declares (typing has no public helper in 3.11)."""
    own = {k for k in vars(proto) if not k.startswith("_")}
    return own | set(getattr(proto, "__annotations__", {}))


@pytest.mark.parametrize("name", ["analytical", "ns3"])
def test_every_registered_backend_meets_the_whole_protocol(name):
    """What the engine calls is declared, and both built-in backends define all of it
    (the engine no longer probes with getattr)."""
    import importlib
    import inspect

    from network.backend import BackendKind, NetworkBackend
    from network.registry import backend_kind

    kind = backend_kind(name)
    assert kind.name == name
    assert _protocol_members(BackendKind) <= set(dir(kind))
    create = inspect.signature(type(kind).create)
    assert list(create.parameters)[:3] == ["self", "system", "world_size"]
    cls = {"analytical": "network.analytical:AnalyticalBackend", "ns3": "network.ns3.backend:Ns3Backend"}[name]
    mod, _, attr = cls.partition(":")
    backend_cls = getattr(importlib.import_module(mod), attr)  # the class: no ns-3 is loaded
    assert _protocol_members(NetworkBackend) <= set(dir(backend_cls))
    assert backend_cls.name == name


def test_unknown_backend_name_lists_the_registered_ones():
    from network.registry import backend_names
    from workload_gen.core.errors import ConfigError

    assert backend_names()[:2] == ("analytical", "ns3")
    with pytest.raises(ConfigError, match="valid: analytical, ns3"):
        simulate(workload(m=1), SYSTEM, "nosuch")


def test_a_backend_by_name_is_the_analytical_closed_form():
    from network.registry import create_backend

    w = workload(m=2, tp=2, tp_bytes=10**8)
    by_name = simulate(w, SYSTEM, "analytical")
    by_object = simulate(w, SYSTEM, create_backend("analytical", SYSTEM, w.parallel.world_size))
    assert by_name.iteration_time_s == by_object.iteration_time_s
    assert by_name.backend == "analytical"


# --------------------------------------------------------------------------- options as data
@pytest.mark.parametrize("name", ["analytical", "ns3"])
def test_a_kinds_options_become_the_run_commands_flags(name):
    """Each declared option is a flag of the run command with its default, and the command
    hands the kind exactly the declared options by dest (what option_values gives)."""
    from engine.commands.run import backend_options, build_parser
    from network.backend import BackendOption, option_values
    from network.registry import backend_kind

    kind = backend_kind(name)
    assert kind.options and all(type(o) is BackendOption for o in kind.options)
    parser = build_parser(name)
    assert backend_options(kind, parser.parse_args([])) == option_values(kind)
    for o in kind.options:  # each flag given: its value, converted, under its dest
        if o.action == "store_true":
            argv, want = [o.flags[0]], True
        else:
            text = o.choices[-1] if o.choices else "3"
            argv, want = [o.flags[0], text], (o.type or str)(text)
        assert backend_options(kind, parser.parse_args(argv)) == option_values(kind, {o.dest: want}), o.flags


def test_the_ns3_kind_is_configured_from_plain_values():
    """No parser needed: a mapping of values configures the kind and is validated as the flags were."""
    from network.backend import option_values
    from network.registry import backend_kind
    from workload_gen.core.errors import ConfigError

    ns3 = backend_kind("ns3")
    defaults = option_values(ns3)
    assert (defaults["transport"], defaults["mtu"], defaults["nvswitch"], defaults["topology"]) == ("rdma", 9000,
                                                                                                    False, None)
    system = ns3.configure(option_values(ns3, {"oversubscription": 2.0, "topology": "fat-tree"}), SYSTEM)
    assert (system.oversubscription, system.topology) == (2.0, "fat-tree")
    with pytest.raises(ConfigError, match="dcqcn"):
        ns3.configure(option_values(ns3, {"dcqcn": "deep-incast", "cc": "hpcc"}), SYSTEM)
    with pytest.raises(ConfigError, match="spines"):
        ns3.configure(option_values(ns3, {"spines": 0}), SYSTEM)
    with pytest.raises(TypeError, match="no option"):
        option_values(ns3, {"spine": 2})


def test_the_analytical_kind_builds_from_plain_values():
    from network.backend import option_values
    from network.registry import backend_kind

    kind = backend_kind("analytical")
    net = kind.from_options(option_values(kind), SYSTEM, 16, efficiency=None, progress=None)
    assert net.name == "analytical" and net.contention_free
