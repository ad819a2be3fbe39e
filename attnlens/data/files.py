"""Input files checked before anything heavy runs: a readable file, UTF-8, real text.

Every reader of user data (text corpora, CoNLL-U treebanks, sentence-pair CSVs) starts
here, so a folder given as a file, a binary or non-UTF-8 file, NUL bytes or a file of
control characters end in the same kind of one-line ``DataError``. Imports nothing heavy.
"""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

from attnlens.errors import DataError


def decode_utf8(data: bytes, source: str) -> str:
    """UTF-8 (a leading byte-order mark is dropped); NUL bytes are refused."""
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise DataError(
            f"{source} is not UTF-8 text (byte {exc.start}: {exc.reason}); convert it, "
            "e.g. iconv -f LATIN1 -t UTF-8."
        ) from None
    if "\x00" in text:
        line = text.count("\n", 0, text.index("\x00")) + 1
        raise DataError(f"{source} holds NUL bytes (line {line}), so it is not a text file; "
                        "pass a UTF-8 text file.")
    return text


def read_utf8(path: Path) -> str:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise DataError(f"cannot read {path}: {exc.strerror}.") from exc
    return decode_utf8(data, str(path))


def has_real_text(line: str) -> bool:
    """True when ``line`` holds a letter, digit, punctuation mark or symbol.

    Whitespace, control and format characters, and unassigned or private code points
    alone are not text.
    """
    return any(unicodedata.category(ch)[0] in "LNPS" and unicodedata.category(ch) != "Co"
               for ch in line)


def text_lines(text: str) -> list[str]:
    """The stripped lines of ``text`` that hold real text (see ``has_real_text``)."""
    lines = (line.strip() for line in text.splitlines())
    return [line for line in lines if has_real_text(line)]


_CONLLU_ID = re.compile(r"\d+(?:-\d+|\.\d+)?")  # 3, 3-4 (a multiword token), 8.1 (empty node)


def looks_like_conllu(text: str) -> bool:
    """True when most lines that are neither blank nor ``#`` comments are CoNLL-U word lines
    (10 tab-separated columns, the first an ID): a treebank given where text, sentence pairs
    or labelled rows are expected would otherwise be read one word line per example."""
    lines = [line for line in text.splitlines()[:2000]
             if line.strip() and not line.startswith("#")]
    words = sum(1 for line in lines
                if line.count("\t") == 9 and _CONLLU_ID.fullmatch(line.split("\t", 1)[0]))
    return bool(lines) and words * 2 > len(lines)


def refuse_conllu(text: str, source: str, option: str, expected: str) -> None:
    """A ``DataError`` when ``text`` (read from ``source`` for ``option``) is a treebank."""
    if not looks_like_conllu(text):
        return
    fix = ("pass it with --treebank instead" if option == "--text" else
           f"give a file of {expected} (for a treebank's sentences: its FORM column, one "
           "sentence per line)")
    raise DataError(f"{option} {source} is a CoNLL-U treebank, but {option} takes {expected}; "
                    f"{fix}.")
