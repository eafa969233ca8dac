"""The one interface between the engine and any network backend.

Pull-shaped (STYLE.md section 3) so that both kinds of backend fit: the analytical one
computes finish times in closed form, the ns-3 one runs its own scheduler up to the
requested time and reports the flows that completed. The engine owns the clock; a
backend never calls back into the engine.

Units: seconds, bytes.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Literal, Protocol, TextIO

from workload_gen.core.record import record

if TYPE_CHECKING:  # annotations only: importing the records' dataclasses costs every command start
    from workload_gen.core.records import CollectiveOp
    from workload_gen.core.system import SystemConfig


@record
class Transfer:
    """One instance of a collective (or a point-to-point send) on the wire."""

    id: int
    """Unique per engine run; assigned by the engine in submission order."""
    op: CollectiveOp
    ranks: tuple[int, ...]
    """Global ranks taking part, in ring order. For SEND_RECV: (src, dst)."""


@record
class Completion:
    """A finished transfer as a backend reports it: the id the engine gave it and when it
    finished, so the engine can release whatever waited on it."""
    id: int
    time: float
    """Finish time, seconds since the start of the iteration."""


class NetworkBackend(Protocol):
    """Everything the engine asks of a network model; nothing is discovered by ``getattr``.

    A new backend implements these members and registers a :class:`BackendKind` under a
    name (:mod:`network.registry`); the engine only ever sees this protocol.
    """

    name: str
    """Stable short name, reported in RunResult.backend and summary.json."""
    contention_free: bool
    """True when concurrent transfers never slow each other (closed-form backends). The
    engine then simulates one representative rank per stage and may memoise passes; when
    False it simulates every rank, because congestion breaks the symmetry."""

    def collective_time(self, op: CollectiveOp, ranks: tuple[int, ...]) -> float:
        """Seconds ``op`` takes on these global ranks (ring order; (src, dst) for send/recv)
        on an otherwise idle network. The engine asks this only of a contention-free
        backend, to time a pass once and reuse it."""

    def submit(self, transfer: Transfer, now: float) -> None:
        """Start a transfer at time ``now`` (all members have reached it)."""

    def next_completion_time(self) -> float:
        """Earliest finish among the transfers in flight; ``math.inf`` if idle."""

    def advance_to(self, t: float) -> list[Completion]:
        """Move the network's clock to ``t``; return transfers finished by then, in time order."""

    def advance_until(self, t: float) -> list[Completion]:
        """Run up to ``t`` or up to the first completion, whichever is earlier, and return the
        completions found there (empty when none by ``t``). A closed-form backend answers
        from its next completion time; a packet backend, which cannot know its next
        completion without running, runs its own scheduler."""


@record(kw_only=True)
class BackendOption:
    """One command-line option of a backend kind, declared as data.

    Why data: no library module parses arguments. The run command (engine/commands/run.py)
    turns each option into a flag of its parser, and hands the kind the parsed values as a
    mapping keyed by :attr:`dest`; the kind never sees the parser or its namespace. The
    fields are argparse's ``add_argument`` keywords of the same names, limited to what a
    backend needs."""

    flags: tuple[str, ...]
    """Option strings, e.g. ``("--topology",)``; the first long one names :attr:`dest`."""
    help: str
    action: Literal["store", "store_true"] = "store"
    """``store``: takes a value; ``store_true``: a switch, False unless given."""
    type: Callable[[str], Any] | None = None
    """Converts the text given (``int``, ``float``); None keeps it a string."""
    choices: tuple[str, ...] | None = None
    default: Any = None
    """The value when the flag is not given (a switch: False)."""
    metavar: str | None = None

    @property
    def dest(self) -> str:
        """The key of the option's value in the mapping a kind receives (argparse's rule)."""
        long = next((f for f in self.flags if f.startswith("--")), self.flags[0])
        return long.lstrip("-").replace("-", "_")


def option_values(kind: BackendKind, given: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Every option of ``kind`` by dest: the value in ``given``, else the option's default
    (what the run command would pass without the flag). For callers that configure a kind
    without a command line; an unknown key is a TypeError, as for a misspelt keyword."""
    given = dict(given or {})
    values = {}
    for opt in kind.options:
        default = False if opt.action == "store_true" else opt.default
        values[opt.dest] = given.pop(opt.dest, default)
    if given:
        raise TypeError(f"{kind.name} backend has no option {', '.join(sorted(given))}")
    return values


class BackendKind(Protocol):
    """A registered kind of network backend: how to make one, and its command-line face.

    ``run-analytical`` and ``run-ns3`` are one command (engine/commands/run.py) parameterised by a
    BackendKind, so a third backend brings its own options (as :class:`BackendOption` data)
    and extra outputs here instead of a copy of the command.
    """

    name: str
    description: str
    """One line for ``--help``."""

    def create(self, system: SystemConfig, world_size: int, **options: Any) -> NetworkBackend:
        """A backend for ``world_size`` GPUs of ``system``; options are backend-specific."""

    options: tuple[BackendOption, ...]
    """This backend's own command-line options, as data (the run command makes them flags)."""
    options_title: str | None
    """The help section its options are listed under; None: among the command's own."""

    def configure(self, options: Mapping[str, Any], system: SystemConfig) -> SystemConfig:
        """The system after this backend's options (e.g. ``oversubscription``); validates them.
        ``options``: every option's value by dest (:func:`option_values`)."""

    def from_options(self, options: Mapping[str, Any], system: SystemConfig, world_size: int, *,
                     efficiency: str | None, progress: TextIO | None) -> NetworkBackend:
        """The backend the options describe. ``efficiency``: the run's collective-efficiency
        table (a YAML path; None: the shipped one); ``progress``: where to say what takes
        long (None: silent)."""

    output_files: tuple[str, ...]
    """Names of the files render_outputs may produce (the run directory owns them)."""

    def render_outputs(self, backend: NetworkBackend, iteration_time_s: float) -> dict[str, str | bytes]:
        """Backend-specific files for the run directory, rendered in memory, so the run
        command writes them in the same all-or-nothing swap as the shared files."""

    def report(self, backend: NetworkBackend) -> dict[str, Any]:
        """Backend statistics for summary.json's extras (flows, bytes, CPU seconds...)."""

    def finish(self, backend: NetworkBackend, progress: TextIO | None) -> None:
        """After the run: a closing progress line (if any) and release what the backend
        holds (a simulator instance, threads)."""
