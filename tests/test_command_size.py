"""Every command module is thin: at most ``BUDGET`` lines apart from its option declarations.

A command parses its options and calls a library function a Python user can call too (issue
25). Counted: every non-blank, non-comment line of ``cli/<command>.py`` except option
declarations, which are module-level ``typer.Option`` / ``typer.Argument`` values (and the
help-text strings and option-building helpers they use), the command function's parameters
and its docstring (the command's help text).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

CLI = Path(__file__).resolve().parents[1] / "cli"
BUDGET = 80


def _command_modules() -> list[str]:
    from attnlens.cli.app import COMMAND_MODULES

    return COMMAND_MODULES


def _is_option_value(node: ast.AST) -> bool:
    """``typer.Option(...)``, ``typer.Argument(...)``, a call of a helper that makes one
    (``_synthetic_option(...)``), a string or a tuple/dict of strings (help texts)."""
    if isinstance(node, ast.Call):
        func = ast.unparse(node.func)
        return func in ("typer.Option", "typer.Argument") or func.endswith("_option")
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return True
    if isinstance(node, ast.JoinedStr | ast.BinOp):
        return all(_is_option_value(n) for n in ast.iter_child_nodes(node)
                   if not isinstance(n, ast.operator))
    if isinstance(node, ast.Tuple | ast.Dict):
        return all(_is_option_value(n) for n in ast.iter_child_nodes(node))
    return False


def _option_lines(tree: ast.Module, command: str) -> set[int]:
    lines: set[int] = set()

    def span(node: ast.AST) -> range:
        return range(node.lineno, node.end_lineno + 1)

    for node in tree.body:
        if isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None and (
                _is_option_value(node.value)):
            lines.update(span(node))
        elif isinstance(node, ast.FunctionDef) and node.name.endswith("_option"):
            lines.update(span(node))  # a helper building options of one kind
        elif isinstance(node, ast.FunctionDef) and node.args.args and (
                node.args.args[0].arg == "run" or node.name == command):  # a command
            first = node.body[0]
            lines.update(range(node.lineno, first.lineno))  # the signature
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                lines.update(span(first))  # the docstring: the command's help
    return lines


def counted_lines(path: Path) -> int:
    """Lines of ``path`` apart from blank lines, comments and option declarations."""
    source = path.read_text(encoding="utf-8")
    skip = _option_lines(ast.parse(source), path.stem)
    return sum(1 for number, line in enumerate(source.splitlines(), start=1)
               if line.strip() and not line.strip().startswith("#") and number not in skip)


@pytest.mark.parametrize("name", _command_modules())
def test_command_module_is_thin(name: str) -> None:
    path = CLI / f"{name}.py"
    assert counted_lines(path) <= BUDGET, (
        f"cli/{name}.py has {counted_lines(path)} lines besides its option declarations "
        f"(budget {BUDGET}): move the work into the library")


def test_the_count_leaves_out_option_declarations_only(tmp_path: Path) -> None:
    module = tmp_path / "probe.py"
    module.write_text(
        '"""A probe."""\n'
        "import typer\n\n"
        'HELP = ("a " "b")\n'
        'XOpt = typer.Option(1, "--x", help=HELP)\n\n\n'
        "def probe(\n    run,\n    x: int = XOpt,\n) -> None:\n"
        '    """Help text."""\n'
        "    # a comment\n"
        "    y = x + 1\n"
        "    print(y)\n", encoding="utf-8")
    # counted: the module docstring, the import, `y = x + 1`, `print(y)`
    assert counted_lines(module) == 4


def _commands():
    """(command path, its click command, the body function in cli/<module>.py)."""
    import importlib

    import typer
    from attnlens.cli.app import app

    found = []
    for name, command in typer.main.get_command(app).commands.items():
        module = importlib.import_module(f"attnlens.cli.{name}")
        subcommands = getattr(command, "commands", None)
        for sub, leaf in (subcommands or {name: command}).items():
            found.append((f"{name} {sub}" if subcommands else name, leaf,
                          getattr(module, sub if subcommands else name)))
    return found


def test_every_option_is_declared_in_the_command_signature() -> None:
    """Reading cli/<command>.py shows every option: the runner adds none."""
    import inspect

    for path, command, body in _commands():
        declared = [p for p in inspect.signature(body).parameters if p != "run"]
        assert [p.name for p in command.params] == declared, path
        assert "treebank" not in declared or "text" in declared
    heads = {p.name for p in next(c for n, c, _ in _commands() if n == "heads").params}
    assert {"treebank", "text", "out", "device", "quiet", "margin"} <= heads
