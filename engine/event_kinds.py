"""The kinds of event on the engine's queue (:class:`engine.loop.EventLoop`), and their payloads.

Why a module of their own: the simulator (:mod:`engine.sim`) dispatches on them, and the
parts that schedule on its queue (:mod:`engine.communicators`,
:mod:`engine.pipeline_transfers`) must use the same numbers. Ints: the loop compares the
kind once per event.
"""
from __future__ import annotations

EV_COMPUTE_DONE = 0
"""A compute op ended; payload: its RankState."""
EV_FUTURE_DONE = 1
"""A collective or pipeline transfer the engine timed itself ended; payload: its Future."""
EV_PASS_DONE = 2
"""A memoised pass ended; payload: its RankState."""
EV_GRAD_READY = 3
"""Gradient buckets became ready inside a memoised pass; payload: (RankState, bucket ops)."""
EV_LAUNCHED = 4
"""The host has launched a collective the rank's GPU stream was waiting for (a dispatch
issued after a host synchronisation, engine.host_launch); payload: its RankState."""
EV_HOST_ISSUE = 5
"""The host has launched an overlappable collective it issues late (the EP overlap's forward
dispatch after its host synchronisation, engine.host_launch) while the rank's compute stream
ran on; payload: (RankState, (chunk, micro-batch) labels, the placeholder Future (its op) the
rank's pending list holds until then)."""
