"""Input files checked before anything heavy runs: a readable file, UTF-8, real text.

Every reader of user data (text corpora, CoNLL-U treebanks, sentence-pair CSVs) starts
here, so a folder given as a file, a binary or non-UTF-8 file, NUL bytes or a file of
control characters end in the same kind of one-line ``DataError``. Imports nothing heavy.
"""

from __future__ import annotations

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
