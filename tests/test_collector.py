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


def test_freeze_imports_freezes_without_collecting_and_settle_collects_only_the_rest(
        restored) -> None:
    """The imports' objects are frozen as they are (no full collection: their cycles stay);
    settle then collects what came after them (the model load's garbage) and freezes the
    rest."""
    gc.enable()
    collector.hold()

    class ImportCycle:
        pass

    class LoadCycle:
        pass

    early = ImportCycle()
    early.me = early  # a cycle dropped by the imports: frozen, not collected
    del early
    before = gc.get_freeze_count()
    collector.freeze_imports()
    assert not gc.isenabled()
    assert gc.get_freeze_count() > before
    late = LoadCycle()
    late.me = late  # a cycle dropped by the model load: settle collects it
    del late
    collector.settle()
    assert gc.isenabled()
    gc.unfreeze()  # every object the collector tracks, frozen or not
    names = {type(o).__name__ for o in gc.get_objects()}
    assert "ImportCycle" in names and "LoadCycle" not in names


def test_freeze_imports_without_hold_changes_nothing(restored) -> None:
    gc.enable()
    before = gc.get_freeze_count()
    collector.freeze_imports()
    assert gc.get_freeze_count() == before


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
