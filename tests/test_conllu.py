"""CoNLL-U reading: words, 0-based heads, multiword tokens, empty nodes, errors, the sample."""

from __future__ import annotations

import pytest

from attnlens.data.conllu import (
    ROOT,
    DepSentence,
    base_relation,
    parse_conllu,
    read_conllu,
    relation_counts,
    sample_treebank,
    tree_problems,
)
from attnlens.errors import DataError


def row(i, form, head, rel, upos="X"):
    return f"{i}\t{form}\t_\t{upos}\t_\t_\t{head}\t{rel}\t_\t_"


# "She didn't go." with a multiword token (2-3) and an empty node (4.1) before the period.
MWT_TEXT = "\n".join([
    "# sent_id = s1",
    "1\tShe\tshe\tPRON\t_\t_\t4\tnsubj\t_\t_",
    "2-3\tdidn't\t_\t_\t_\t_\t_\t_\t_\t_",
    "2\tdid\tdo\tAUX\t_\t_\t4\taux\t_\t_",
    "3\tn't\tnot\tPART\t_\t_\t4\tadvmod\t_\t_",
    "4\tgo\tgo\tVERB\t_\t_\t0\troot\t_\t_",
    "4.1\tgo\tgo\tVERB\t_\t_\t_\t_\t4:conj\t_",
    "5\t.\t.\tPUNCT\t_\t_\t4\tpunct\t_\t_",
    "",
    "# sent_id = s2",
    row(1, "my", 2, "nmod:poss"),
    row(2, "cat", 0, "root"),
    "",
])


def test_multiword_tokens_and_empty_nodes_are_skipped():
    first, second = parse_conllu(MWT_TEXT)
    assert first.words == ("She", "did", "n't", "go", ".")
    assert first.heads == (3, 3, 3, ROOT, 3)  # 1-based ids 4,4,4,0,4 -> 0-based
    assert first.relations == ("nsubj", "aux", "advmod", "root", "punct")
    assert first.upos == ("PRON", "AUX", "PART", "VERB", "PUNCT")
    assert first.sent_id == "s1"
    assert first.arcs() == [(0, 3, "nsubj"), (1, 3, "aux"), (2, 3, "advmod"), (4, 3, "punct")]
    assert second.words == ("my", "cat")
    assert second.heads == (1, ROOT)


def test_subtypes_are_kept_and_base_relation_is_exposed():
    (_, second) = parse_conllu(MWT_TEXT)
    assert second.relations == ("nmod:poss", "root")
    assert second.base_relations == ("nmod", "root")
    assert base_relation("obl:agent") == "obl"
    assert base_relation("det") == "det"
    sentences = parse_conllu(MWT_TEXT)
    assert relation_counts(sentences)["nmod:poss"] == 1
    assert relation_counts(sentences, base=True) == {
        "nsubj": 1, "aux": 1, "advmod": 1, "punct": 1, "nmod": 1
    }


def test_header_comment_block_is_ignored():
    text = "# a file header\n\n" + "\n".join([row(1, "Hi", 0, "root"), ""])
    (sentence,) = parse_conllu(text)
    assert sentence.words == ("Hi",)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("1\tonly\tthree\n\n", "needs 10 tab-separated columns"),
        ("x\ty\t_\tX\t_\t_\t0\troot\t_\t_\n\n", "not valid CoNLL-U.*not a valid ID"),
        ("\n".join([row(1, "a", 5, "det"), row(2, "b", 0, "root"), ""]), "head 5"),
        ("\n".join([row(1, "a", 0, "_"), ""]), "no DEPREL"),
        ("\n\n", "no sentences"),
    ],
)
def test_malformed_input_raises_data_error(text, message):
    with pytest.raises(DataError, match=message):
        parse_conllu(text, source="bad.conllu")


def test_read_conllu_errors(tmp_path):
    with pytest.raises(DataError, match="does not exist"):
        read_conllu(tmp_path / "missing.conllu")
    latin = tmp_path / "latin.conllu"
    latin.write_bytes("1\tcaf\xe9\t_\tX\t_\t_\t0\troot\t_\t_\n\n".encode("latin-1"))
    with pytest.raises(DataError, match="not UTF-8"):
        read_conllu(latin)
    good = tmp_path / "good.conllu"
    good.write_text(MWT_TEXT, encoding="utf-8")
    assert len(read_conllu(good)) == 2


def test_tree_problems_finds_cycles_and_extra_roots():
    ok = DepSentence(("a", "b"), (1, ROOT), ("det", "root"), ("DET", "NOUN"))
    assert tree_problems(ok) == []
    cycle = DepSentence(("a", "b", "c"), (1, 0, ROOT), ("x", "y", "root"), ("X",) * 3)
    assert any("cycle" in p for p in tree_problems(cycle))
    two_roots = DepSentence(("a", "b"), (ROOT, ROOT), ("root", "root"), ("X", "X"))
    assert "2 roots" in tree_problems(two_roots)
    self_loop = DepSentence(("a", "b"), (0, ROOT), ("det", "root"), ("X", "X"))
    assert tree_problems(self_loop)


REQUIRED_RELATIONS = [
    "nsubj", "obj", "iobj", "amod", "advmod", "det", "nmod", "nmod:poss", "case", "aux", "cop",
    "mark", "compound", "conj", "cc", "punct", "root",
]


def test_embedded_sample_is_a_valid_ud_style_treebank():
    sentences = sample_treebank()
    assert len(sentences) >= 40
    for sentence in sentences:
        assert tree_problems(sentence) == [], (sentence.sent_id, tree_problems(sentence))
        assert sum(h == ROOT for h in sentence.heads) == 1
        assert all(ROOT <= h < len(sentence) for h in sentence.heads)
        assert sentence.sent_id.startswith("attnlens-sample-")
        # punctuation is PUNCT and attached with punct; PUNCT words are punctuation
        for word, upos, rel in zip(sentence.words, sentence.upos, sentence.relations, strict=True):
            assert (upos == "PUNCT") == (rel == "punct"), (sentence.sent_id, word)
    counts = relation_counts(sentences)
    counts["root"] = len(sentences)
    missing = [r for r in REQUIRED_RELATIONS if counts.get(r, 0) == 0]
    assert not missing
    # the multiword tokens of the sample are split into syntactic words
    assert ("did", "n't") in {tuple(s.words[1:3]) for s in sentences}


# Issue 23: duplicate word IDs, and errors that name the file and line ------------------------
def test_duplicate_word_ids_are_refused_with_both_lines():
    """Before: HEAD 2 pointed at whichever word 2 came last, and the tree was analysed."""
    text = "\n".join(["# sent_id = s1", row(1, "a", 0, "root"), row(2, "b", 1, "x"),
                      row(2, "c", 1, "y"), ""])
    with pytest.raises(DataError, match=r"bad.conllu:4, sentence 1 \(s1\): word ID 2 appears "
                                        r"twice \(lines 3 and 4\).*fix the ID column"):
        parse_conllu(text, source="bad.conllu")


@pytest.mark.parametrize(("text", "where"), [
    (row(1, "a", 0, "root") + "\n\n" + "x\ty\t_\tX\t_\t_\t0\troot\t_\t_\n\n", "bad.conllu:3 "),
    (row(1, "a", 0, "root") + "\n\n# c\n" + row(1, "a", 0, "root") + "\n" + row(2, "b", 9, "x")
     + "\n", "bad.conllu:5, sentence 2"),
    (row(1, "a", 0, "root") + "\n" + "2\tb\tb\n", "bad.conllu:2, sentence 1"),
    (row(1, "a", 0, "_") + "\n", "bad.conllu:1, sentence 1"),
])
def test_errors_name_the_file_and_line_and_the_fix(text, where):
    with pytest.raises(DataError, match="fix") as error:
        parse_conllu(text, source="bad.conllu")
    assert str(error.value).startswith(where), str(error.value)
