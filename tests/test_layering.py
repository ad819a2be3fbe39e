"""Imports flow one way: a module may import only its own unit or lower layers.

Every ``import`` and ``from ... import`` in attnlens/ and cli/ (top level, inside functions and
under ``TYPE_CHECKING`` alike) is read from the source with ``ast`` and checked against
``LAYERS``, lowest first (docs/architecture.md explains each). A unit is a package or module
path below ``attnlens`` (``*`` matches one name); a module belongs to the most specific unit
that contains it, so ``measures.*.section`` (each measure's report section) sits above
``report`` while the rest of ``measures`` sits below it. A new top-level module or package
must be placed in ``LAYERS`` before it can be imported.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Lowest first. A module may import modules of its own unit and of lower layers; units sharing
# a layer are independent of each other.
LAYERS: list[set[str]] = [
    {"errors", "lazy", "runs"},
    {"runs.io", "numeric", "head_names", "position_ids"},
    {"runs.manifest", "runs.folder_lock"},
    {"runs.outputs"},
    {"hooks", "progress", "device", "stats", "plots", "stream.threads"},
    {"model"},
    {"backends"},
    {"data"},
    {"loaders"},
    {"stream"},
    {"runs.checkpointing"},
    {"distributed"},
    {"metrics"},
    {"measures"},  # analyzers and tables: never report code
    {"report"},
    {"measures.*.section"},  # a measure's report section
    {"report.analyze"},  # the report pipeline: runs every section
    {"report.api"},
    {"viewer"},
    {"cli"},
]
RANK = {unit: rank for rank, units in enumerate(LAYERS) for unit in units}


def _contains(unit: str, parts: list[str]) -> bool:
    pattern = unit.split(".")
    return len(parts) >= len(pattern) and all(
        p in ("*", name) for p, name in zip(pattern, parts, strict=False))


def unit_of(module: str) -> str | None:
    """``attnlens.model.gates`` -> ``model``, ``attnlens.measures.heads.section`` ->
    ``measures.*.section``; the package root ``attnlens`` -> None."""
    parts = module.split(".")
    if parts[0] != "attnlens" or len(parts) < 2 or parts[1].startswith("__"):
        return None  # outside attnlens, or the package root itself (attnlens.__version__)
    units = [u for u in RANK if _contains(u, parts[1:])]
    if not units:
        return parts[1]  # not placed: reported as a unit missing from LAYERS
    return max(units, key=lambda u: len(u.split(".")))


def source_files() -> list[tuple[str, Path]]:
    """(module name, path) of every module of attnlens/ and cli/ (installed as attnlens.cli)."""
    files = []
    for folder, package in ((ROOT / "attnlens", "attnlens"), (ROOT / "cli", "attnlens.cli")):
        for path in sorted(folder.rglob("*.py")):
            parts = path.relative_to(folder).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            files.append((".".join((package, *parts)), path))
    return files


def imported_modules(path: Path, module: str) -> list[tuple[int, str]]:
    """(line, absolute module) of every import in a file; relative imports resolved."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base]) if base else ".".join(anchor)
            # `from attnlens.loaders import bert` imports the submodule attnlens.loaders.bert.
            found += [(node.lineno, f"{base}.{alias.name}") for alias in node.names]
    return sorted(found)


def violations() -> list[str]:
    found = []
    for module, path in source_files():
        unit = unit_of(module)
        if unit is None:  # the package root only names things lazily (checked below)
            continue
        if unit not in RANK:
            found.append(f"{path.relative_to(ROOT)}: unit {unit!r} is not in LAYERS")
            continue
        for line, target in imported_modules(path, module):
            other = unit_of(target)
            if other is None or other == unit:
                continue
            where = f"{path.relative_to(ROOT)}:{line} imports {target}"
            if other not in RANK:
                found.append(f"{where}: unit {other!r} is not in LAYERS")
            elif RANK[other] >= RANK[unit]:
                found.append(f"{where}: {other!r} is not below {unit!r}")
    return found


def test_imports_flow_one_way() -> None:
    assert violations() == []


# Figures are drawn in the plots package only. Outside it, matplotlib is imported by io (which
# saves a Figure) and by the report's figure pool (which loads fonts before forking workers);
# report sections and cli commands ask plots for figures.
FIGURE_MODULES = {"attnlens.runs.io", "attnlens.report.figure_pool"}


def test_figures_are_drawn_in_plots_only() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{line} imports {target}"
        for module, path in source_files()
        for line, target in imported_modules(path, module)
        if target.split(".")[0] == "matplotlib"
        and unit_of(module) != "plots"
        and module not in FIGURE_MODULES
    ]
    assert found == []


def test_plots_draw_from_tables_only() -> None:
    """The plots package imports nothing else of attnlens: a figure is drawn from a table."""
    plot_modules = [(m, p) for m, p in source_files() if unit_of(m) == "plots"]
    assert len(plot_modules) > 1  # a package of modules, one kind of figure each
    found = [
        f"{path.relative_to(ROOT)}:{line} imports {target}"
        for module, path in plot_modules
        for line, target in imported_modules(path, module)
        if target.split(".")[0] == "attnlens" and unit_of(target) != "plots"
    ]
    assert found == []


def test_plot_functions_pickle_by_name() -> None:
    """Report recipes (functools.partial of a figure function) are pickled to worker processes:
    every figure function of ``attnlens.plots`` is a module-level function found by its name."""
    import pickle

    import attnlens.plots as plots

    functions = [getattr(plots, name) for name in plots.__all__]
    functions = [f for f in functions if callable(f)]
    assert len(functions) > 20
    for function in functions:
        assert function.__module__.startswith("attnlens.plots."), function
        assert pickle.loads(pickle.dumps(function)) is function


def test_the_checker_catches_an_upward_import(tmp_path, monkeypatch) -> None:
    """The walk sees imports inside functions and resolves relative ones."""
    pkg = tmp_path / "attnlens" / "metrics"
    pkg.mkdir(parents=True)
    (tmp_path / "attnlens" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "bad.py").write_text(
        "def f():\n    from attnlens.measures.pruning.loop import prune\n"
        "from ..report import html\nfrom . import base\nfrom attnlens.model import gates\n"
    )
    (tmp_path / "cli").mkdir()
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert violations() == [
        "attnlens/metrics/bad.py:2 imports attnlens.measures.pruning.loop.prune: 'measures' is "
        "not below 'metrics'",
        "attnlens/metrics/bad.py:3 imports attnlens.report.html: 'report' is not below "
        "'metrics'",
    ]


def test_the_checker_places_sections_between_report_and_its_pipeline(tmp_path, monkeypatch):
    """A measure's section may import report code; its analyzers and tables may not, and a
    section may not import the pipeline that runs it."""
    topic = tmp_path / "attnlens" / "measures" / "mine"
    topic.mkdir(parents=True)
    for init in (tmp_path / "attnlens", topic.parent, topic):
        (init / "__init__.py").write_text("")
    (topic / "section.py").write_text(
        "from attnlens.report.sections import Section\nfrom attnlens.measures.mine import tables\n"
        "def f():\n    from attnlens.report.analyze import analyze_model\n"
    )
    (topic / "tables.py").write_text("from attnlens.report.catalog import SectionDoc\n")
    (tmp_path / "attnlens" / "newthing.py").write_text("")
    (tmp_path / "cli").mkdir()
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert violations() == [
        "attnlens/measures/mine/section.py:4 imports attnlens.report.analyze.analyze_model: "
        "'report.analyze' is not below 'measures.*.section'",
        "attnlens/measures/mine/tables.py:1 imports attnlens.report.catalog.SectionDoc: "
        "'report' is not below 'measures'",
        "attnlens/newthing.py: unit 'newthing' is not in LAYERS",
    ]


def test_analyzers_and_tables_never_import_report_code() -> None:
    """Only a measure's ``section.py`` talks to the report (also implied by ``LAYERS``)."""
    measure_modules = [(m, p) for m, p in source_files()
                       if unit_of(m) == "measures" and m != "attnlens.measures"]
    assert len(measure_modules) > 30
    found = [
        f"{path.relative_to(ROOT)}:{line} imports {target}"
        for module, path in measure_modules
        for line, target in imported_modules(path, module)
        if target.startswith("attnlens.report.") or target == "attnlens.report"
        or unit_of(target) == "measures.*.section"
    ]
    assert found == []


LAZY_ROOTS = ("attnlens", "attnlens.loaders", "attnlens.measures.pruning")


@pytest.mark.parametrize("module", ["attnlens", "attnlens.cli.app"])
def test_light_imports(module: str) -> None:
    """``import attnlens`` and the command line's start load no heavy library."""
    code = (
        f"import sys, {module}\n"
        "heavy = [m for m in ('torch', 'transformers', 'pandas', 'matplotlib', 'numpy') "
        "if m in sys.modules]\n"
        "print(','.join(heavy))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True)
    assert result.stdout.strip() == ""


@pytest.mark.parametrize("package", LAZY_ROOTS)
def test_lazy_names_resolve(package: str) -> None:
    """Every name a lazy package root promises exists in the module it points to."""
    import importlib

    root = importlib.import_module(package)
    for name, target in root._LAZY.items():
        assert hasattr(importlib.import_module(target), name), f"{package}.{name} -> {target}"
        assert unit_of(target) is not None
