"""fixed34 (issue 29, fixed costs): each fast path against the code it replaces.

The CoNLL-U reader's plain-block path (``conllu._plain_tokens``) against the ``conllu``
library's on hand-built blocks, fuzzed ones and UD EWT dev.
"""

from __future__ import annotations

import pytest
from hypothesis import given

import attnlens.data.conllu as conllu_module
from attnlens.data.conllu import parse_conllu
from attnlens.data.files import read_utf8
from attnlens.errors import AttnlensError
from tests.conftest import shared_file
from tests.test_readers_fuzz import FUZZ, NASTY, conllu_text


def _outcome(text: str, monkeypatch: pytest.MonkeyPatch, plain: bool):
    """The sentences, or the error's type and message, with or without the plain path."""
    with monkeypatch.context() as patch:
        if not plain:
            patch.setattr(conllu_module, "_plain_tokens", lambda lines: None)
        try:
            return parse_conllu(text, source="t.conllu")
        except AttnlensError as exc:
            return type(exc), str(exc)


def row(i, form, head, rel, misc="_", deps="_", upos="X"):
    return f"{i}\t{form}\t_\t{upos}\t_\t_\t{head}\t{rel}\t{deps}\t{misc}"


BLOCKS = [
    # multiword token, empty node, SpaceAfter=No, comments with and without values
    "\n".join(["# newdoc id = d1", "# newpar", "# sent_id = s1", "# text = She didn't go.",
               "# empty =", "# = x", row(1, "She", 4, "nsubj", deps="4:nsubj"),
               "2-3\tdidn't\t_\t_\t_\t_\t_\t_\t_\tSpaceAfter=No",
               row(2, "did", 4, "aux"), row(3, "n't", 4, "advmod"),
               row(4, "go", 0, "root", misc="SpaceAfter=No"),
               "4.1\tgo\t_\tVERB\t_\t_\t_\t_\t4:conj\t_", row(5, ".", 4, "punct")]),
    # the text comment does not match the forms; a key twice (the last wins)
    "\n".join(["# sent_id = a", "# sent_id = b", "# text = something else",
               row(1, "New York", 2, "nsubj", misc="A=1|SpaceAfter=No|B"), row(2, "x", 0, "root")]),
    # what the plain path leaves to the library: two spaces, surrounding whitespace, a range in
    # DEPS, a negative or zero-led HEAD, global.columns, an unusual ID
    "\n".join([row(1, "a  b", 2, "det"), row(2, "b", 0, "root")]),
    "\n".join([" " + row(1, "a", 2, "det"), row(2, "b", 0, "root") + " "]),
    "\n".join([row(1, "a", 2, "det", deps="3-2:det"), row(2, "b", 0, "root")]),
    "\n".join([row(1, "a", 2, "det", deps="2-3:det"), row(2, "b", 0, "root")]),
    "\n".join([row(1, "a", -1, "det"), row(2, "b", 0, "root")]),
    "\n".join([row(1, "a", "02", "det"), row(2, "b", 0, "root")]),
    "\n".join(["# global.columns = ID FORM HEAD", "1\ta\t0", "2\tb\t1"]),
    "\n".join([row("01", "a", 2, "det"), row(2, "b", 0, "root")]),
    "\n".join([row("3-2", "ab", "_", "_"), row(2, "b", 0, "root")]),
    "\n".join([row("\u0661", "a", 0, "root")]),  # an Arabic-Indic digit: not an ID
    # errors: columns, heads, relations, a cycle, two roots
    "\n".join([row(1, "a", 0, "root"), "2\tb\tb"]),
    "\n".join([row(1, "a", 2, "det"), row(2, "b", 1, "x")]),
    "\n".join([row(1, "a", 0, "root"), row(2, "b", 0, "root")]),
    "\n".join([row(1, "a", 5, "det"), row(2, "b", 0, "root")]),
    "\n".join([row(1, "a", 0, "_")]),
    "\n".join([row(1, "a", "x", "det"), row(2, "b", 0, "root")]),
    "# only a comment",
]


@pytest.mark.parametrize("block", BLOCKS)
def test_plain_conllu_blocks_read_as_the_library_reads_them(block, monkeypatch):
    text = BLOCKS[0] + "\n\n" + block + "\n\n"
    assert _outcome(text, monkeypatch, True) == _outcome(text, monkeypatch, False)


def test_plain_path_reads_the_plain_blocks_itself():
    lines = list(enumerate(BLOCKS[0].splitlines(), start=1))
    tokens = conllu_module._plain_tokens(lines)
    assert tokens is not None and len(tokens) == 7
    assert tokens.metadata == {"newdoc id": "d1", "newpar": None, "sent_id": "s1",
                               "text": "She didn't go."}
    assert [t["id"] for t in tokens] == [1, (2, "-", 3), 2, 3, 4, (4, ".", 1), 5]
    assert tokens[4]["misc"] == {"SpaceAfter": "No"}
    for block in BLOCKS[2:12]:  # left to the library
        assert conllu_module._plain_tokens(list(enumerate(block.splitlines(), 1))) is None


@FUZZ
@given(conllu_text() | NASTY)
def test_fuzzed_conllu_reads_as_the_library_reads_it(text):
    with pytest.MonkeyPatch.context() as monkeypatch:
        assert _outcome(text, monkeypatch, True) == _outcome(text, monkeypatch, False)


def test_ud_ewt_dev_reads_as_the_library_reads_it(monkeypatch):
    path = shared_file("ud-ewt/en_ewt-ud-dev.conllu")
    text = read_utf8(path)
    blocks = conllu_module._blocks(text)
    assert all(conllu_module._plain_tokens(lines) is not None for _, lines in blocks)
    plain = _outcome(text, monkeypatch, True)
    assert len(plain) == 2001
    assert plain == _outcome(text, monkeypatch, False)
