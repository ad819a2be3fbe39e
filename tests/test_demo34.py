"""The demo's fixed costs (issue 29, demo34): no sympy in the first forward, OpenMP threads
that wait passively in the program, the sections waiting for the probes written last."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
import torch

from attnlens.model.attention import _adds_in_place
from attnlens.report import analyze as report
from attnlens.report.null_run import NullResult
from attnlens.report.sections import SectionOutput
from attnlens.runs import openmp

FIRST_FORWARD = """
import sys, torch
from attnlens.loaders import load_model
model = load_model(sys.argv[1])
before = "torch.fx.experimental.symbolic_shapes" in sys.modules
ids = torch.tensor([[1, 5, 6, 2, 0], [1, 7, 2, 0, 0]])
with torch.no_grad():
    model.run_with_hooks(input_ids=ids, attention_mask=(ids != 0).long(),
                         fwd_hooks=[("blocks.0.attn.hook_pattern", lambda x, hook: x)])
print(before, "torch.fx.experimental.symbolic_shapes" in sys.modules)
"""


def test_a_forward_with_a_padding_mask_does_not_import_torch_fx_symbolic_shapes(
        tmp_path) -> None:
    """torch.broadcast_shapes imported torch.fx's symbolic shapes and sympy (~0.7 s) in the
    first forward of every process: the parent's corpus pass and the probes' child."""
    import transformers

    from attnlens.loaders.parity_inputs import save_tiny
    from attnlens.loaders.verify import tiny_config

    save_tiny(transformers.BertModel, tiny_config("bert"), tmp_path)
    done = subprocess.run([sys.executable, "-c", FIRST_FORWARD, str(tmp_path)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[-2:] == ["False", "False"]  # not after loading, nor after


@pytest.mark.parametrize(("scores", "mask", "dtype"), [
    ((2, 3, 4, 4), (2, 1, 1, 4), torch.float32),  # padding mask
    ((2, 3, 4, 4), (4, 4), torch.float32),  # causal mask
    ((2, 3, 4, 4), (2, 3, 4, 4), torch.float32),
    ((1, 3, 4, 4), (2, 1, 4, 4), torch.float32),  # the sum is larger: not in place
    ((2, 3, 4, 4), (1, 2, 3, 4, 4), torch.float32),  # more dims: not in place
    ((2, 3, 4, 4), (2, 1, 1, 4), torch.float64),  # promotes: not in place
])
def test_adds_in_place_agrees_with_torch_broadcast_shapes(scores, mask, dtype) -> None:
    s, m = torch.zeros(scores), torch.zeros(mask, dtype=dtype)
    expected = (torch.promote_types(s.dtype, m.dtype) == s.dtype
                and torch.broadcast_shapes(s.shape, m.shape) == s.shape)
    assert _adds_in_place(s, m) == expected


def test_passive_waits_set_only_before_torch_and_never_over_the_users_choice(
        monkeypatch) -> None:
    monkeypatch.delitem(sys.modules, "torch")  # restored after the test
    environ: dict[str, str] = {}
    assert openmp.passive_waits(environ) and environ == {"OMP_WAIT_POLICY": "PASSIVE"}
    for chosen in ({"OMP_WAIT_POLICY": "ACTIVE"}, {"GOMP_SPINCOUNT": "100000"}):
        environ = dict(chosen)
        assert not openmp.passive_waits(environ) and environ == chosen
    monkeypatch.setitem(sys.modules, "torch", torch)
    environ = {}
    assert not openmp.passive_waits(environ) and environ == {}  # too late: torch is loaded


PROGRAM = """
import atexit, os, sys
sys.argv = ["attnlens", "--help"]
from attnlens.cli.app import main
atexit.register(lambda: print("policy", os.environ.get("OMP_WAIT_POLICY")))
main()
"""


@pytest.mark.parametrize(("env", "expected"), [({}, "PASSIVE"),
                                               ({"OMP_WAIT_POLICY": "ACTIVE"}, "ACTIVE")])
def test_the_attnlens_program_waits_passively_unless_told_otherwise(env, expected) -> None:
    environ = {k: v for k, v in os.environ.items()
               if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    done = subprocess.run([sys.executable, "-c", PROGRAM], capture_output=True, text=True,
                          timeout=120, env={**environ, **env})
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[-2:] == ["policy", expected]


def test_main_called_with_arguments_leaves_the_wait_policy_alone(monkeypatch) -> None:
    from attnlens.cli import app

    calls = []
    monkeypatch.setattr(app.openmp, "passive_waits", lambda: calls.append(1))
    with pytest.raises(SystemExit):
        app.main(["--help"])
    assert calls == []


class _Section:
    """A section that records when it writes; ``lm`` as the head-roles section has it."""

    def __init__(self, name: str, order: list[str], lm=None) -> None:
        self.name, self.title, self.lm, self._order = name, name.title(), lm, order
        self.doc = SimpleNamespace(to_json=lambda: {})

    def write(self, model, group, staging: Path, formats) -> SectionOutput:
        self._order.append(self.name)
        table = pd.DataFrame({"layer": [0], "head": [0], "value": [1.0]})
        return SectionOutput(self.name, tables={f"{self.name}_table": table},
                             summary=self.name)


def _sections(order: list[str]) -> list[_Section]:
    lm = _Section("lm_heads", order)
    return [_Section("heads", order, lm=lm), lm, _Section("spectrum", order),
            _Section("sparse", order)]


def test_the_sections_reading_the_probes_are_those_of_the_language_model_heads() -> None:
    sections = _sections([])
    assert report._probe_readers(sections, probes=None) == set()
    assert report._probe_readers(sections, probes=object()) == {"heads", "lm_heads"}
    assert report._probe_readers(sections[2:], probes=object()) == set()
    assert report.write_order(sections, {"heads", "lm_heads"}) == [2, 3, 0, 1]
    assert report.write_order(sections) == [0, 1, 2, 3]


def test_sections_waiting_for_the_probes_write_last_and_are_recorded_in_report_order(
        tmp_path, monkeypatch) -> None:
    order: list[str] = []
    sections = _sections(order)
    joined: list[str] = []

    def join(section, output, result):  # as join_null: the changed names, also in result
        names = list(output.tables)
        joined.append(section.name)
        result.changed += names
        return names

    monkeypatch.setattr(report, "join_null", join)
    null = NullResult()
    model = SimpleNamespace(cfg=SimpleNamespace())
    outputs, records = report._write_sections(
        model, sections, [[] for _ in sections], tmp_path, ("svg",), {}, null,
        last={"heads", "lm_heads"})
    assert order == joined == ["spectrum", "sparse", "heads", "lm_heads"]
    assert [o.title for o in outputs] == ["heads", "lm_heads", "spectrum", "sparse"]
    assert [r.name for r in records] == ["heads", "lm_heads", "spectrum", "sparse"]
    assert null.changed == ["heads_table", "lm_heads_table", "spectrum_table", "sparse_table"]
    assert sorted(p.name for p in (tmp_path / "tables").iterdir()) == sorted(
        f"{s.name}_table.csv" for s in sections)


class _Making:
    """A section whose ``analyzers`` records its name (and fails when told to)."""

    def __init__(self, name: str, log: list[str], fails: bool = False) -> None:
        self.name, self._log, self._fails = name, log, fails

    def analyzers(self, model, tokenizer) -> list[str]:
        self._log.append(self.name)
        if self._fails:
            raise RuntimeError("no analyzers")
        return [f"{self.name} analyzer"]


class _Job:
    def __init__(self, log: list[str]) -> None:
        self._log = log

    def cancel(self) -> None:
        self._log.append("cancelled")


def test_the_probes_start_once_the_language_model_analyzers_exist_before_the_others(
        monkeypatch) -> None:
    log: list[str] = []
    monkeypatch.setattr(report, "_probes_beside",
                        lambda model, sections, forked: log.append("probes started")
                        or _Job(log))
    sections = [_Making(name, log) for name in ("heads", "lm_heads", "spectrum")]
    per_section, job = report._analyzers_and_probes(None, None, sections, forked=True)
    assert log == ["lm_heads", "probes started", "heads", "spectrum"]
    assert per_section == [["heads analyzer"], ["lm_heads analyzer"], ["spectrum analyzer"]]
    assert isinstance(job, _Job)
    log.clear()
    sections = [_Making("heads", log, fails=True), _Making("lm_heads", log)]
    with pytest.raises(RuntimeError, match="no analyzers"):
        report._analyzers_and_probes(None, None, sections, forked=True)
    assert log == ["lm_heads", "probes started", "heads", "cancelled"]


@pytest.mark.parametrize("forked", [False, True])
def test_long_probes_left_to_this_process_give_the_same_result(tmp_path, forked) -> None:
    """``synthetic_runs(long=False)`` elsewhere (a child) and the long probes run here
    (``use_synthetic_runs(..., long_here=True)``) give the tables, role tests and facts of
    the whole runs done here, bitwise, the facts in the same order."""
    import functools

    import transformers

    from attnlens.loaders import load_model
    from attnlens.loaders.parity_inputs import save_tiny
    from attnlens.loaders.verify import tiny_config
    from attnlens.report import side_work
    from tests.lm_heads_toys import assert_same_measure, fed_lm_heads

    if forked and not side_work.side_workers_allowed(torch.nn.Linear(1, 1)):
        pytest.skip("side workers fork on Linux with 2+ CPUs")
    save_tiny(transformers.GPT2LMHeadModel, tiny_config("gpt2"), tmp_path)

    def measured(split: bool):
        model = load_model(tmp_path)
        lm = fed_lm_heads(model)
        if split:
            job = side_work.side_job("probes", functools.partial(lm.synthetic_runs, model,
                                                                 long=False), forked)
            lm.use_synthetic_runs(job.result, long_here=True)
        return lm.compute(model)

    whole, split = measured(split=False), measured(split=True)
    assert_same_measure(whole, split)
