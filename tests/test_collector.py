"""The garbage collector around the `attnlens` program (attnlens/runs/collector.py)."""

from __future__ import annotations

import gc
import sys

import pytest

from attnlens.runs import collector


@pytest.fixture
def restored():
    """Leave the test process's collector as it was."""
    enabled = gc.isenabled()
    yield
    gc.unfreeze()
    collector._STATE["held"] = False
    (gc.enable if enabled else gc.disable)()


def test_hold_then_settle_freezes_the_survivors_and_collects_again(restored) -> None:
    gc.enable()
    collector.hold()
    assert not gc.isenabled()

    class Cycle:
        pass

    garbage = Cycle()
    garbage.me = garbage  # a reference cycle: only the collector frees it
    del garbage
    kept = [object() for _ in range(100)]
    before = gc.get_freeze_count()
    collector.settle()
    assert gc.isenabled()
    # the cycle was collected before the freeze, the live objects were frozen
    assert not any(type(o).__name__ == "Cycle" for o in gc.get_objects())
    assert gc.get_freeze_count() >= before + len(kept)
    collector.settle()  # a second call changes nothing
    assert gc.isenabled()


def test_settle_without_hold_changes_nothing(restored) -> None:
    gc.enable()
    before = gc.get_freeze_count()
    collector.settle()
    assert gc.isenabled() and gc.get_freeze_count() == before


def test_hold_leaves_a_collector_turned_off_by_the_caller_off(restored) -> None:
    gc.disable()
    collector.hold()
    collector.settle()
    assert not gc.isenabled()


def test_only_the_program_itself_holds_and_freezes(monkeypatch) -> None:
    """`main()` reading sys.argv (the program) holds the collector and freezes before it
    exits; `main([...])` (a test, another caller) leaves the collector alone."""
    from attnlens.cli import app

    calls: list[str] = []
    monkeypatch.setattr(collector, "hold", lambda: calls.append("hold"))
    monkeypatch.setattr(collector, "settle", lambda: calls.append("settle"))
    monkeypatch.setattr(collector, "before_exit", lambda: calls.append("before_exit"))
    with pytest.raises(SystemExit):
        app.main(["models", "--help"])
    assert calls == []
    monkeypatch.setattr(sys, "argv", ["attnlens", "models", "--help"])
    with pytest.raises(SystemExit):
        app.main()
    assert calls[0] == "hold" and calls[-1] == "before_exit"
