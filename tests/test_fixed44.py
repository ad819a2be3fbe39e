"""fixed44 (issue 29, fixed costs): the CoNLL-U reader's simple-block path
(``conllu._simple_sentence``: words only, IDs 1, 2, 3, ...) against the plain-block path it
skips (``_plain_tokens`` then ``_sentence_from_tokens``), on hand-built, fuzzed and UD EWT
dev input: the same sentences, or the same error."""

from __future__ import annotations

import pytest
from hypothesis import given

import attnlens.data.conllu as conllu_module
from attnlens.data.conllu import parse_conllu
from attnlens.data.files import read_utf8
from attnlens.errors import AttnlensError
from tests.conftest import shared_file
from tests.test_fixed34 import BLOCKS, row
from tests.test_readers_fuzz import FUZZ, NASTY, conllu_text


def _outcome(text: str, monkeypatch: pytest.MonkeyPatch, simple: bool):
    """The sentences, or the error's type and message, with or without the simple path."""
    with monkeypatch.context() as patch:
        if not simple:
            patch.setattr(conllu_module, "_simple_sentence", lambda lines, block: None)
        try:
            return parse_conllu(text, source="t.conllu")
        except AttnlensError as exc:
            return type(exc), str(exc)


SIMPLE = [
    # SpaceAfter named in MISC: No, something else, a key twice, a prefix of another key
    "\n".join(["# sent_id = s2", "# text = Hi there!", row(1, "Hi", 2, "discourse"),
               row(2, "there", 0, "root", misc="SpaceAfter=No|A=1"),
               row(3, "!", 2, "punct", misc="SpaceAfter=Yes")]),
    "\n".join(["# text = no match", row(1, "a", 2, "det", misc="SpaceAfter=No|SpaceAfter=x"),
               row(2, "b", 0, "root", misc="SpaceAfterX=No")]),
    "\n".join([row(1, "a", 2, "det", misc="SpaceAfter"), row(2, "", 0, "root")]),
    "\n".join([row(1, "a", 2, "det", upos=""), row(2, "b", 0, "root:sub")]),
    # IDs not 1, 2, 3, ...: out of order, from 2, repeated
    "\n".join([row(2, "b", 0, "root"), row(1, "a", 2, "det")]),
    "\n".join([row(2, "b", 0, "root"), row(3, "a", 2, "det")]),
    "\n".join([row(1, "a", 0, "root"), row(1, "b", 1, "det")]),
    # tree errors raised by the simple path itself, sentence ids in the message
    "\n".join(["# sent_id = cyc", row(1, "a", 2, "det"), row(2, "b", 3, "x"),
               row(3, "c", 2, "x")]),
    "\n".join(["# sent_id", row(1, "a", 1, "det"), row(2, "b", 0, "root")]),
    "\n".join([row(1, "a", 2, "det"), row(2, "b", 1, "x")]),
    "\n".join([row(1, "a", 3, "det"), row(2, "b", 0, "root")]),
]


@pytest.mark.parametrize("block", BLOCKS + SIMPLE)
def test_simple_blocks_read_as_the_plain_path_reads_them(block, monkeypatch):
    text = SIMPLE[0] + "\n\n" + block + "\n\n" + BLOCKS[0] + "\n"
    assert _outcome(text, monkeypatch, True) == _outcome(text, monkeypatch, False)


def test_simple_path_reads_blocks_of_words_only():
    def simple(block: str):
        lines = list(enumerate(block.splitlines(), start=1))
        return conllu_module._simple_sentence(lines, conllu_module._Block("t", 1, 1, ()))

    sentence = simple(SIMPLE[0])
    assert sentence is not None and sentence.words == ("Hi", "there", "!")
    assert (sentence.text, sentence.spans) == ("Hi there!", ((0, 2), (3, 8), (8, 9)))
    assert simple(BLOCKS[0]) is None  # a multiword token and an empty node
    assert all(simple(block) is None for block in [*BLOCKS[2:13], *SIMPLE[4:7], "# x"])


@FUZZ
@given(conllu_text() | NASTY)
def test_fuzzed_conllu_reads_as_the_plain_path_reads_it(text):
    with pytest.MonkeyPatch.context() as monkeypatch:
        assert _outcome(text, monkeypatch, True) == _outcome(text, monkeypatch, False)


def test_ud_ewt_dev_reads_as_the_plain_path_reads_it(monkeypatch):
    text = read_utf8(shared_file("ud-ewt/en_ewt-ud-dev.conllu"))
    blocks = conllu_module._blocks(text)
    block = conllu_module._Block("t", 1, 1, ())
    assert sum(conllu_module._simple_sentence(lines, block) is not None
               for _, lines in blocks) == 1696
    simple = _outcome(text, monkeypatch, True)
    assert len(simple) == 2001
    assert simple == _outcome(text, monkeypatch, False)
