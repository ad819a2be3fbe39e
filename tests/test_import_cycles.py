"""No import cycles: no two modules of attnlens/ and cli/ import each other, even indirectly.

Every import is read from the source with ``ast`` (top level, inside functions and under
``TYPE_CHECKING`` alike, as ``test_layering`` reads them) and resolved to the module it loads:
``from attnlens.report.folder import Report`` is an edge to ``attnlens.report.folder``,
``from attnlens.runs import io`` one to ``attnlens.runs.io``. A cycle is a strongly connected
component of that graph with more than one module (or a module importing itself).
"""

from __future__ import annotations

import sys

import tests.test_layering as layering


def import_graph() -> dict[str, set[str]]:
    """Module -> the modules of attnlens (and attnlens.cli) it imports."""
    files = layering.source_files()
    modules = {module for module, _ in files}

    def resolve(name: str) -> str | None:
        parts = name.split(".")
        for end in range(len(parts), 0, -1):  # the longest prefix that is a module
            if ".".join(parts[:end]) in modules:
                return ".".join(parts[:end])
        return None

    graph: dict[str, set[str]] = {}
    for module, path in files:
        targets = {resolve(target) for _, target in layering.imported_modules(path, module)}
        graph[module] = {t for t in targets if t is not None}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with a cycle (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1 or node in graph.get(node, ()):
                    found.append(sorted(component))
    return sorted(found)


def test_no_import_cycles() -> None:
    graph = import_graph()
    assert len(graph) > 150  # every module of the package was read
    assert cycles(graph) == []


def test_the_checker_finds_a_cycle_through_a_local_import(tmp_path, monkeypatch) -> None:
    """A dispatch through a function-local import closes a cycle like a top-level one."""
    pkg = tmp_path / "attnlens" / "measures" / "mine"
    pkg.mkdir(parents=True)
    for init in (tmp_path / "attnlens", pkg.parent, pkg):
        (init / "__init__.py").write_text("")
    (pkg / "analyzer.py").write_text(
        "def result():\n    from attnlens.measures.mine.tables import tables\n")
    (pkg / "tables.py").write_text("from .helpers import x\n")
    (pkg / "helpers.py").write_text("from attnlens.measures.mine import analyzer\n")
    (pkg / "alone.py").write_text("from attnlens.measures.mine.tables import tables\n")
    (tmp_path / "cli").mkdir()
    monkeypatch.setattr(sys.modules[layering.__name__], "ROOT", tmp_path)
    assert cycles(import_graph()) == [[
        "attnlens.measures.mine.analyzer", "attnlens.measures.mine.helpers",
        "attnlens.measures.mine.tables",
    ]]
