"""The event queue's ordering rules (engine.loop docstring)."""
import pytest

from engine.loop import COMPLETION, START, EventLoop


def test_earlier_time_first():
    loop = EventLoop()
    loop.schedule(2.0, COMPLETION, 0, "late")
    loop.schedule(1.0, START, 0, "early")
    assert [loop.pop()[2] for _ in range(2)] == ["early", "late"]


def test_completions_before_starts_at_equal_time():
    loop = EventLoop()
    loop.schedule(1.0, START, 0, "start")
    loop.schedule(1.0, COMPLETION, 0, "done")
    assert [loop.pop()[2] for _ in range(2)] == ["done", "start"]


def test_insertion_order_breaks_remaining_ties():
    loop = EventLoop()
    for name in ("a", "b", "c"):
        loop.schedule(1.0, START, 0, name)
    assert [loop.pop()[2] for _ in range(3)] == ["a", "b", "c"]


def test_payloads_are_never_compared():
    loop = EventLoop()
    loop.schedule(1.0, START, 0, object())
    loop.schedule(1.0, START, 0, object())  # objects without ordering: must not raise
    loop.pop()
    loop.pop()


def test_counter_is_per_instance():
    a, b = EventLoop(), EventLoop()
    a.schedule(0.0, START, 0, "x")
    b.schedule(0.0, START, 0, "y")
    assert a._heap[0][2] == b._heap[0][2] == 0


def test_clock_follows_events_and_rejects_the_past():
    loop = EventLoop()
    loop.schedule(3.0, START, 0)
    assert loop.pop()[0] == loop.now == 3.0
    with pytest.raises(ValueError, match="past"):
        loop.schedule(2.0, START, 0)
    with pytest.raises(AssertionError, match="backwards"):
        loop.advance(1.0)


def test_empty_queue_peeks_infinity():
    assert EventLoop().peek_time() == float("inf")
