"""``MEASURES`` is complete and true: every measure folder is registered, and every registered
measure has the section, command, findings and docs page its entry promises; the report, the
CLI and the docs index are the registry's (adding a measure = one folder + one line)."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

from attnlens.measures.registry import MEASURES, docs_index, measure_commands, report_measures

ROOT = Path(__file__).resolve().parents[1]
MEASURES_DIR = ROOT / "attnlens" / "measures"


def measure_folders() -> list[str]:
    return sorted(p.parent.name for p in MEASURES_DIR.glob("*/__init__.py"))


def test_every_measure_folder_is_registered_once():
    names = [m.name for m in MEASURES]
    assert len(names) == len(set(names)), "a measure is registered twice"
    assert sorted(names) == measure_folders(), (
        "attnlens/measures/<name>/ folders and MEASURES entries differ: add the folder's line "
        "to attnlens/measures/registry.py (or remove the entry)")


@pytest.mark.parametrize("measure", MEASURES, ids=lambda m: m.name)
def test_registered_measure_has_what_its_entry_promises(measure):
    from attnlens.report.sections import Section

    assert measure.summary and measure.docs
    assert (ROOT / "docs" / measure.docs).is_file(), f"docs/{measure.docs} is missing"
    if measure.section:
        module = importlib.import_module(measure.section_module)
        cls = getattr(module, measure.section)
        assert issubclass(cls, Section)
        assert cls.doc.about, f"{measure.section} has no explanation (SectionDoc.about)"
        assert cls.doc.command == f"attnlens {measure.command}", (
            "the page's 'on its own' command is the measure's command")
        assert isinstance(cls.for_report(), cls)
    else:
        assert not measure.report, "a measure in the report needs a section"
        assert measure.shown_in in {"", *(m.name for m in MEASURES if m.section)}
    findings = MEASURES_DIR / measure.name / "findings.py"
    assert findings.is_file() == measure.findings, (
        f"measures/{measure.name}/findings.py and the entry's findings={measure.findings} differ")
    if measure.command:
        assert (ROOT / "cli" / f"{measure.command}.py").is_file()


def test_the_report_runs_the_registered_sections_in_registry_order():
    from attnlens.report.analyze import default_sections

    sections = default_sections()
    assert [type(s).__name__ for s in sections] == [m.section for m in report_measures()]


def test_the_cli_lists_every_measure_command_in_registry_order():
    import typer
    from attnlens.cli.app import COMMAND_MODULES, app

    assert [c for c in COMMAND_MODULES if c in measure_commands()] == measure_commands()
    names = [c.name for c in typer.main.get_command(app).commands.values()]
    for command in measure_commands():
        assert command in names


def test_findings_come_from_the_registered_findings_modules():
    from attnlens.report.findings import load_finders

    finders = load_finders()
    for measure in MEASURES:
        if measure.findings:
            module = importlib.import_module(measure.findings_module)
            mine = [f for fs in finders.values() for f in fs if f.__module__ == module.__name__]
            assert mine, f"{measure.findings_module} registers no finder"
    modules = {f.__module__ for fs in finders.values() for f in fs}
    assert modules <= {m.findings_module for m in MEASURES if m.findings}


def test_docs_index_is_written_from_the_registry():
    text = (ROOT / "docs" / "README.md").read_text(encoding="utf-8")
    found = re.search(r"<!-- section:measures -->\n(.*?)<!-- /section:measures -->", text, re.S)
    assert found, "docs/README.md lacks its measures section"
    assert found.group(1) == docs_index(), (
        "docs/README.md's measures table is stale: paste attnlens.measures.registry.docs_index()")


def test_the_registry_imports_nothing_heavy():
    import subprocess
    import sys

    code = ("import sys, attnlens.measures.registry; "
            "print(sorted(m for m in ('torch', 'pandas', 'numpy', 'matplotlib') "
            "if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True)
    assert done.stdout.strip() == "[]"
