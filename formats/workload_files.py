"""One reader for every workload file a command accepts: native text or SimAI/AICB text.

Every CLI that takes a workload file goes through :func:`open_workload` (or
:func:`read_workload`), so a new input format is one branch here instead of one per
command. The format is recognised from the file's first word: a SimAI policy word
(``HYBRID_TRANSFORMER_FWD_IN_BCKWD`` ...) means SimAI text, anything else our native
format, whose own reader names what is wrong with it.

A SimAI file describes rank 0 of a job whose size may only be in its header
(``all_gpus``), so turning it into a :class:`Workload` takes the GPU count; callers that
replay SimAI's own accounting keep the parsed records (:attr:`WorkloadFile.simai`).
"""
from __future__ import annotations

import os
from pathlib import Path

from formats.simai_text import SimaiWorkload
from workload_gen.core.errors import ConfigError
from workload_gen.core.record import record
from workload_gen.core.records import Workload

FORMATS = ("native", "simai")


@record
class WorkloadFile:
    """A parsed workload file, before a SimAI file is given its GPU count."""

    path: Path
    format: str
    """"native" or "simai"."""
    native: Workload | None = None
    simai: SimaiWorkload | None = None

    @property
    def header_gpus(self) -> int | None:
        """SimAI's ``all_gpus`` header field (None for native files, whose config has it)."""
        return self.simai.header.all_gpus if self.simai is not None else None

    def to_workload(self, gpus: int | None = None) -> Workload:
        """The Workload; a SimAI file needs ``gpus`` unless its header gives all_gpus."""
        if self.native is not None:
            return self.native
        assert self.simai is not None
        from formats.simai_convert import simai_to_workload

        n = gpus if gpus is not None else self.header_gpus
        if not n:
            raise ConfigError("gpus", n, f"{self.path}: the SimAI header has no all_gpus; give the GPU count "
                              "(--gpus N, SimAI's -g)")
        return simai_to_workload(self.simai, gpus=n)


def workload_format(path: str | os.PathLike[str]) -> str:
    """"simai" or "native", from the file's first word."""
    from formats.simai_reader import is_simai_file

    return "simai" if is_simai_file(path) else "native"


def open_workload(path: str | os.PathLike[str]) -> WorkloadFile:
    """Read a workload file of either format (ConfigError if it does not exist)."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError("workload", str(p), "no such file")
    if workload_format(p) == "simai":
        from formats.simai_reader import read_simai

        return WorkloadFile(p, "simai", simai=read_simai(p))
    from formats.native import read_native

    return WorkloadFile(p, "native", native=read_native(p))


def read_workload(path: str | os.PathLike[str], gpus: int | None = None) -> Workload:
    """A Workload from a native or SimAI/AICB file (``gpus``: see WorkloadFile.to_workload)."""
    return open_workload(path).to_workload(gpus)
