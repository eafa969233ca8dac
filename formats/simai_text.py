"""SimAI/AICB workload text: the data model and its rendering.

SimAI (aliyun/SimAI 1.7, ``workload/Workload.cc``) reads a workload as:

* line 1: a policy word, then ``key: value`` pairs (tp, ep, pp, vpp, ga, all_gpus,
  checkpoints, checkpoint_initiates, pp_comm);
* line 2: the number of records;
* one record per line, whitespace separated (AICB writes tabs): name, dependency,
  forward compute ns, forward comm type, forward comm bytes, input-grad compute ns,
  input-grad comm type, input-grad comm bytes, weight-grad compute ns, weight-grad comm
  type, weight-grad comm bytes, update ns; plus a 13th per-record policy under
  HYBRID_CUSTOMIZED.

The model here keeps the file's values verbatim (comm type tokens included), so that
reading and writing a file gives it back unchanged. SimAI's *interpretation* of those
values (which collective, which group, the 4096-byte forward minimum) is provided by
the functions and properties below, so that the accounting and the importer agree on
it. Units: ns and bytes, as in the file; nothing else in trainsim uses ns.
"""
from __future__ import annotations

from dataclasses import field
from enum import StrEnum
from typing import TYPE_CHECKING, Literal
from workload_gen.core.record import record

if TYPE_CHECKING:  # loaded on first use: a reader or the SimAI accounting never needs the record types
    from workload_gen.core.records import CollKind

POLICIES: tuple[str, ...] = (
    "DATA",
    "HYBRID_TRANSFORMER",
    "HYBRID_TRANSFORMER_FWD_IN_BCKWD",
    "HYBRID_DLRM",
    "HYBRID_DLRM_ENHANCED",
    "MODEL",
    "HYBRID_DATA_MODEL",
    "HYBRID_MODEL_DATA",
    "HYBRID_CUSTOMIZED",
    "MICRO",
    "DISTRIBUTED_INFERENCE",
)
"""Every policy word SimAI's ``decode_parallelsim`` accepts."""

TRANSFORMER_POLICIES: frozenset[str] = frozenset({"HYBRID_TRANSFORMER", "HYBRID_TRANSFORMER_FWD_IN_BCKWD"})
"""The only policies under which SimAI reads the tp/ep/pp/vpp/ga/all_gpus keys."""

FWD_MIN_BYTES = 4096
"""Under HYBRID_TRANSFORMER_FWD_IN_BCKWD SimAI raises a forward comm of 1..4095 bytes to this."""

Column = Literal["fwd", "ig", "wg"]


class SimaiGroup(StrEnum):
    """SimAI's communication groups (MockNccl::GroupType)."""

    TP = "tp"
    EP = "ep"
    DP = "dp"
    DP_EP = "dp_ep"
    NONE = "none"
    """A collective type token with an unknown suffix: SimAI keeps the kind, no group."""


# Prefixes in the order SimAI tests them, with the name of the collective (CollKind's
# value). ALLREDUCEALLTOALL is listed by SimAI after ALLTOALL but can never match
# (ALLREDUCE catches it first); we mirror that.
_PREFIXES: tuple[tuple[str, str], ...] = (
    ("ALLREDUCE", "allreduce"),
    ("ALLTOALL", "alltoall"),
    ("ALLGATHER", "allgather"),
    ("REDUCESCATTER", "reducescatter"),
)

_KIND_TOKEN: dict[str, str] = {name: prefix for prefix, name in _PREFIXES}
"""CollKind value -> token prefix (a CollKind, a StrEnum, looks itself up here)."""


def coll_name(token: str) -> str | None:
    """The collective a comm type token names, as CollKind's value (``"allreduce"``), or None.

    :func:`comm_kind` without building the enum; the reader and the accounting use it."""
    for prefix, name in _PREFIXES:
        if token.startswith(prefix):
            return name
    return None


def comm_kind(token: str) -> CollKind | None:
    """The collective a comm type token names, or None (NONE, BROADCAST, anything else)."""
    name = coll_name(token)
    if name is None:
        return None
    from workload_gen.core.records import CollKind

    return CollKind(name)


def comm_group(token: str, column: Column) -> SimaiGroup | None:
    """SimAI's group for a comm type token in a given column; None when no collective.

    No suffix means TP in the forward and input-grad columns and DP in the weight-grad
    column; ``_EP`` is the EP group, ``_DP_EP`` the DP/EP group; any other suffix keeps
    the collective but gives it no group (SimAI then costs it as a short TP message or 0).
    """
    for prefix, _name in _PREFIXES:
        if token.startswith(prefix):
            suffix = token[len(prefix):]
            if suffix == "":
                return SimaiGroup.DP if column == "wg" else SimaiGroup.TP
            if suffix == "_EP":
                return SimaiGroup.EP
            if suffix == "_DP_EP":
                return SimaiGroup.DP_EP
            return SimaiGroup.NONE
    return None


def comm_token(kind: CollKind | None, group: SimaiGroup | None, column: Column) -> str:
    """The token SimAI reads back as ``(kind, group)`` in ``column``; inverse of the two above."""
    if kind is None:
        return "NONE"
    if kind not in _KIND_TOKEN:
        raise ValueError(f"SimAI has no token for collective {kind}")
    base = _KIND_TOKEN[kind]
    default = SimaiGroup.DP if column == "wg" else SimaiGroup.TP
    if group == default:
        return base
    if group == SimaiGroup.EP:
        return base + "_EP"
    if group == SimaiGroup.DP_EP:
        return base + "_DP_EP"
    raise ValueError(f"SimAI cannot express group {group} in the {column} column")


@record
class SimaiComm:
    """One comm slot of a record: the type token as written, and its bytes."""

    token: str = "NONE"
    bytes: int = 0

    @property
    def kind(self) -> CollKind | None:
        return comm_kind(self.token)


@record
class SimaiRecord:
    """One SimAI layer record (times in ns, sizes in bytes)."""

    name: str
    fwd_compute_ns: int
    fwd_comm: SimaiComm
    ig_compute_ns: int
    ig_comm: SimaiComm
    wg_compute_ns: int
    wg_comm: SimaiComm
    update_ns: int = 0
    """Delay SimAI adds after each of this record's collectives (ns-3 mode only)."""
    dependency: int = -1
    """Parsed and never used by SimAI; AICB writes -1."""
    policy: str | None = None
    """The 13th field: per-record policy, HYBRID_CUSTOMIZED files only."""

    def group(self, column: Column) -> SimaiGroup | None:
        return comm_group(self.comm(column).token, column)

    def comm(self, column: Column) -> SimaiComm:
        return {"fwd": self.fwd_comm, "ig": self.ig_comm, "wg": self.wg_comm}[column]


@record
class SimaiHeader:
    """Line 1. ``None`` means the key was absent from the file."""

    policy: str
    tp: int | None = None
    """``model_parallel_NPU_group``."""
    ep: int | None = None
    pp: int | None = None
    vpp: int | None = None
    """SimAI uses it as virtual stages in its bubble formula; AICB writes layers per stage here."""
    ga: int | None = None
    all_gpus: int | None = None
    """Informational: SimAI takes the GPU count from its ``-g`` flag."""
    checkpoints: tuple[int, ...] = ()
    checkpoint_initiates: tuple[int, ...] = ()
    pp_comm: int | None = None
    """PP message bytes (read for any policy)."""

    @property
    def fwd_in_bckwd(self) -> bool:
        return self.policy == "HYBRID_TRANSFORMER_FWD_IN_BCKWD"


@record
class SimaiWorkload:
    """A SimAI workload file as read: its header and records, kept in SimAI's own terms (ns,
    its group names) until simai_convert turns it into a Workload."""
    header: SimaiHeader
    records: tuple[SimaiRecord, ...]
    source: str = field(default="", compare=False)
    """Path the workload was read from, for messages."""

    def effective_bytes(self, record: SimaiRecord, column: Column) -> int:
        """Bytes SimAI actually moves: a 1..4095-byte forward comm counts as 4096 under FWD_IN_BCKWD."""
        size = record.comm(column).bytes
        if column == "fwd" and self.header.fwd_in_bckwd and 0 < size < FWD_MIN_BYTES:
            return FWD_MIN_BYTES
        return size


def render_header(header: SimaiHeader) -> str:
    """Line 1 in AICB's key order (keys that are None are left out)."""
    parts = [header.policy]
    for key, value in (
        ("model_parallel_NPU_group:", header.tp),
        ("ep:", header.ep),
        ("pp:", header.pp),
        ("vpp:", header.vpp),
        ("ga:", header.ga),
        ("all_gpus:", header.all_gpus),
    ):
        if value is not None:
            parts += [key, str(value)]
    parts += ["checkpoints:", str(len(header.checkpoints)), *map(str, header.checkpoints)]
    parts += ["checkpoint_initiates:", str(len(header.checkpoint_initiates)), *map(str, header.checkpoint_initiates)]
    if header.pp_comm is not None:
        parts += ["pp_comm:", str(header.pp_comm)]
    return " ".join(parts)


def render_record(rec: SimaiRecord) -> str:
    fields_ = [
        rec.name, str(rec.dependency),
        str(rec.fwd_compute_ns), rec.fwd_comm.token, str(rec.fwd_comm.bytes),
        str(rec.ig_compute_ns), rec.ig_comm.token, str(rec.ig_comm.bytes),
        str(rec.wg_compute_ns), rec.wg_comm.token, str(rec.wg_comm.bytes),
        str(rec.update_ns),
    ]
    if rec.policy is not None:
        fields_.append(rec.policy)
    return "\t".join(fields_)


def render_simai(workload: SimaiWorkload) -> str:
    """The whole file text, tab-separated records as AICB writes them."""
    lines = [render_header(workload.header), str(len(workload.records))]
    lines += [render_record(r) for r in workload.records]
    return "\n".join(lines) + "\n"
