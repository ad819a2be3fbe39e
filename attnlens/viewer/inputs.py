"""`attnlens view`'s inputs, checked before the model loads (plain Python: no torch): the
text and MODEL from the arguments, --heads, and the --out file."""

from __future__ import annotations

import sys
from pathlib import Path

VIEWS = ("head", "text", "model", "matrix")


def parse_heads(value: str | None, layer: int | None) -> tuple[list[int] | None, int | None]:
    """``--heads`` as head numbers of one layer: ``0,3,7`` or ``L2H0,L2H8`` (which sets the
    layer; ``2.8`` and ``2-8`` are read as L2H8 too)."""
    from attnlens.errors import ConfigError
    from attnlens.head_names import is_head, parse_head
    from attnlens.numeric import check_number

    if value is None:
        return None, layer
    heads, layers = [], set()
    for item in (v.strip() for v in value.split(",") if v.strip()):
        if item.isdigit():
            heads.append(check_number("--heads", int(item), integer=True, low=0))
            continue
        if not is_head(item):
            raise ConfigError(f"--heads {value!r}: give head numbers like 0,3,7 or heads like "
                              "L2H8 (layer 2, head 8).")
        numbers = [check_number("--heads", n, integer=True, low=0) for n in parse_head(item)]
        layers.add(numbers[0])
        heads.append(numbers[1])
    if not heads:
        raise ConfigError(f"--heads {value!r}: give head numbers (from 0) like 0,3,7.")
    if layers:
        if len(layers) > 1 or (layer is not None and layer not in layers):
            raise ConfigError(f"--heads {value!r}: the heads shown first belong to one layer "
                              f"(--layer {layer if layer is not None else 'or L…H…'}).")
        layer = layers.pop()
    return heads, layer


def check_out_file(out_file: Path, force: bool) -> None:
    """Refuse to replace a non-empty --out file unless --force (an empty one is no loss)."""
    from attnlens.errors import ConfigError

    if out_file.is_dir():
        raise ConfigError(f"--out {out_file} is a folder; give a file name such as view.html.")
    if not out_file.parent.exists():
        raise ConfigError(f"--out {out_file}: folder {out_file.parent} does not exist.")
    if out_file.exists() and not out_file.is_file():
        raise ConfigError(f"--out {out_file} is not a regular file; give a file name such as "
                          "view.html.")
    if not force and out_file.is_file() and out_file.stat().st_size > 0:
        raise ConfigError(f"--out {out_file} already exists and is not empty; choose a new file "
                          "name, or add --force to replace it.")


def check_not_in_model(out_file: Path, model: str | None) -> None:
    """The source model's folder is never written into, under any flag (as for folders)."""
    from attnlens.errors import ConfigError
    from attnlens.loaders.checkpoint import resolve_checkpoint

    source = resolve_checkpoint(model).resolve()
    if source in out_file.resolve().parents:
        raise ConfigError(f"--out {out_file} is inside the source model ({source}); attnlens "
                          "never writes there: choose another file.")


def read_text(source: str) -> str:
    """The text of ``--file`` (or TEXT ``-``): a UTF-8 file, or standard input for ``-``."""
    from attnlens.errors import DataError

    if source == "-":
        return sys.stdin.read()
    path = Path(source).expanduser()
    if path.is_dir():
        raise DataError(f"--file {path} is a folder; pass a UTF-8 text file.")
    if not path.is_file():
        raise DataError(f"--file {path} does not exist; pass a UTF-8 text file (- : standard "
                        "input).")
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise DataError(f"--file {path} is not UTF-8 text (byte {exc.start}); convert it, e.g. "
                        "iconv -t utf-8.") from exc
    except OSError as exc:
        raise DataError(f"--file {path} cannot be read: {exc.strerror}.") from exc


def _is_path(text: str) -> bool:
    """``text`` names an existing file or folder (a long text is no path: the OS says so)."""
    try:
        return Path(text).expanduser().exists()
    except (OSError, ValueError):
        return False


def model_and_text(first: str | None, second: str | None, file: str | None
                    ) -> tuple[str | None, str]:
    """(MODEL, the text) from the arguments; a lone argument that names an existing file or
    model folder is refused with what to write instead."""
    from attnlens.errors import ConfigError

    if file is not None:
        if second is not None:
            raise ConfigError("give the text once: TEXT or --file, not both.")
        return first, read_text(file)
    if first is None:
        raise ConfigError("give the text to look at: attnlens view [MODEL] TEXT, or --file "
                          "PATH (- : standard input).")
    if second is None:
        if first != "-" and _is_path(first):
            path = Path(first).expanduser()
            if (path / "config.json").is_file():
                raise ConfigError(f"{first} is a model folder, not a text: give the text after "
                                  f"it (attnlens view {first} \"TEXT\") or --file PATH.")
            raise ConfigError(f"{first} is an existing path, not a text: to look at the text "
                              f"of a file, use --file {first}.")
        return None, read_text("-") if first == "-" else first
    return first, read_text("-") if second == "-" else second


def check_options(start_view: str, heads: str | None, layer: int | None,
                  generate: int | None, pair: str | None, out_file: Path, force: bool
                  ) -> tuple[list[int] | None, int | None]:
    """--view, --heads (with --layer), --generate against --pair and the --out file;
    returns ``(head numbers or None, layer)``."""
    from attnlens.errors import ConfigError
    from attnlens.runs.io import WORK_SUFFIX_BYTES, check_writable_target

    if start_view not in VIEWS:
        raise ConfigError(f"--view {start_view!r}: choose head, text, model or matrix.")
    chosen, layer = parse_heads(heads, layer)
    if generate is not None and pair is not None:
        raise ConfigError("--generate continues one text; leave out --pair.")
    if out_file.is_dir():
        raise ConfigError(f"--out {out_file} is a folder; give a file name such as view.html.")
    if not out_file.parent.exists() and not out_file.parent.is_symlink():
        raise ConfigError(f"--out {out_file}: folder {out_file.parent} does not exist.")
    check_writable_target(out_file, "--out", added=WORK_SUFFIX_BYTES)
    check_out_file(out_file, force)
    return chosen, layer
