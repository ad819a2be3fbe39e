"""fixed34 (issue 29, fixed costs): each fast path against the code it replaces.

The CoNLL-U reader's plain-block path (``conllu._plain_tokens``) against the ``conllu``
library's, and the word alignment (``alignment.token_words``, the word ids of
``Tokenizer.encode_text_words``) against its code before fixed34, on hand-built input, fuzzed
input and UD EWT dev.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import attnlens.data.conllu as conllu_module
from attnlens.data.conllu import parse_conllu
from attnlens.data.files import read_utf8
from attnlens.errors import AttnlensError
from tests.conftest import shared_file
from tests.test_readers_fuzz import FUZZ, NASTY, conllu_text


def _outcome(text: str, monkeypatch: pytest.MonkeyPatch, plain: bool):
    """The sentences, or the error's type and message, with or without the plain paths."""
    with monkeypatch.context() as patch:
        if not plain:
            patch.setattr(conllu_module, "_plain_tokens", lambda lines: None)
            patch.setattr(conllu_module, "_simple_sentence", lambda lines, block: None)
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


# Word alignment: token_words and encode_text_words against the code they replace ----------
def _old_token_words(offsets, added, spans, length):
    """``alignment.token_words`` before fixed34 (a character at a time)."""
    owner = [-1] * length
    for w, (start, end) in enumerate(spans):
        for c in range(start, min(end, length)):
            if owner[c] < 0:
                owner[c] = w
    starts = [start for start, _ in spans]
    result = []
    for (start, end), is_added in zip(offsets, added, strict=True):
        if is_added:
            result.append(-1)
            continue
        word = next((owner[c] for c in range(start, min(end, length)) if owner[c] >= 0), -1)
        if word < 0:
            word = next((w for w, s in enumerate(starts) if s >= start), -1)
        result.append(word)
    return result


def _old_word_ids(tok, enc, texts, spans, full_counts):
    """``Tokenizer.encode_text_words``' word ids before fixed34 (torch, a row at a time)."""
    import torch

    from attnlens.data.alignment import token_words

    special = tok.special_ids
    word_ids = torch.full_like(enc["input_ids"], -1)
    n_words, unaligned = [], []
    for b, counts in enumerate(full_counts):
        not_text = [bool(a) or i in special for i, a in zip(
            enc["input_ids"][b].tolist(), enc["special_tokens_mask"][b].tolist(), strict=True)]
        ids = token_words(enc["offset_mapping"][b].tolist(), not_text, spans[b], len(texts[b]))
        kept = torch.tensor(ids, dtype=torch.long)
        got = torch.bincount(kept[kept >= 0], minlength=len(counts))[: len(counts)]
        complete = got == torch.tensor(counts, dtype=got.dtype)
        n = int(complete.long().cumprod(0).sum())
        kept[kept >= n] = -1
        word_ids[b, : len(ids)] = kept
        n_words.append(n)
        unaligned.append([w for w in range(n) if counts[w] == 0])
    return word_ids, n_words, unaligned


SPAN_CASES = [
    # (spans, offsets, added, length)
    ([(0, 3), (4, 7)], [(0, 0), (0, 2), (2, 3), (4, 7), (0, 0)], [1, 0, 0, 0, 1], 7),
    ([(0, 6), (0, 6), (7, 8)], [(0, 3), (3, 6), (7, 8)], [0, 0, 0], 8),  # a shared span
    ([(4, 7), (0, 3)], [(0, 3), (4, 7)], [0, 0], 7),  # out of order
    ([(0, 3), (2, 5), (5, 5)], [(0, 1), (2, 3), (4, 5), (5, 5)], [0, 0, 0, 0], 5),  # overlap
    ([(-2, 1), (1, 3)], [(0, 1), (1, 2), (2, 3)], [0, 0, 0], 4),  # negative start
    ([(0, 2), (-3, -1), (3, 9)], [(0, 2), (3, 4), (3, 9)], [0, 0, 0], 5),  # beyond the text
    ([(1, 2), (3, 4)], [(0, 1), (1, 2), (2, 3), (3, 4), (4, 4), (-1, 2)], [0] * 6, 4),
    ([], [(0, 1)], [0], 2),
]


@pytest.mark.parametrize(("spans", "offsets", "added", "length"), SPAN_CASES)
def test_token_words_as_before(spans, offsets, added, length):
    from attnlens.data.alignment import token_words

    assert token_words(offsets, added, spans, length) == _old_token_words(
        offsets, added, spans, length)


SPAN = st.tuples(st.integers(-3, 12), st.integers(-3, 12))


@FUZZ
@given(st.lists(SPAN, max_size=6), st.lists(st.tuples(SPAN, st.booleans()), max_size=8),
       st.integers(0, 10))
def test_fuzzed_token_words_as_before(spans, tokens, length):
    from attnlens.data.alignment import token_words

    def outcome(function):
        try:
            return function(offsets, added, spans, length)
        except IndexError:  # a negative span reaching before the text, before as now
            return IndexError

    offsets, added = [o for o, _ in tokens], [a for _, a in tokens]
    assert outcome(token_words) == outcome(_old_token_words)


def _check_encoding(tok, texts, spans, max_length):
    counts = tok.tokens_per_text_word(texts, spans)
    batch = tok.encode_text_words(texts, spans, max_length=max_length, full_counts=counts)
    enc = tok._encode_offsets(texts, padding=True, truncation=True, max_length=max_length,
                              return_tensors="pt")
    word_ids, n_words, unaligned = _old_word_ids(tok, enc, texts, spans, counts)
    assert batch.word_ids.dtype == word_ids.dtype and batch.word_ids.equal(word_ids)
    assert (batch.n_words, batch.unaligned) == (n_words, unaligned)
    assert batch.n_cut_words == [len(c) - n for c, n in zip(counts, n_words, strict=True)]


@pytest.mark.parametrize("max_length", [4, 7, 128])
def test_encode_text_words_as_before(minilm, max_length):
    from attnlens.data.alignment import join_words

    _, tok = minilm
    words = [["Hello", "world", "!"], ["un", "believably", "long", "words", "[SEP]", "here"],
             ["a"], ["x", "", "y"], ["supercalifragilistic", "token", "pieces", "cut"]]
    joined = [join_words(w) for w in words]
    _check_encoding(tok, [t for t, _ in joined], [s for _, s in joined], max_length)


def test_encode_text_words_as_before_on_ud_ewt_dev(minilm):
    _, tok = minilm
    sentences = conllu_module.read_conllu(shared_file("ud-ewt/en_ewt-ud-dev.conllu"))
    surfaces = [s.surface() for s in sentences]
    for first in range(0, len(surfaces), 256):
        chunk = surfaces[first:first + 256]
        _check_encoding(tok, [t for t, _ in chunk], [list(s) for _, s in chunk], 48)


# Student's t: the continued fraction in NumPy against torch's, bit for bit ------------------
def _old_continued_fraction(a, b, x):
    """``student_t._continued_fraction`` before fixed34 (torch operations)."""
    from attnlens.stats.student_t import EPS, MAX_TERMS, TINY

    dd = 1 - (a + b) * x / (a + 1)
    dd = torch.where(dd.abs() < TINY, TINY, dd)
    dd = 1 / dd
    cc = torch.ones_like(x)
    f = dd.clone()
    active = torch.ones_like(x, dtype=torch.bool)
    m = 0
    while bool(active.any()):
        m += 1
        assert m <= MAX_TERMS
        change = torch.zeros_like(x)
        for step in (0, 1):
            if step == 0:
                d = m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m))
            else:
                d = -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))
            dd = 1 + d * dd
            dd = 1 / torch.where(dd.abs() < TINY, TINY, dd)
            cc = 1 + d / cc
            cc = torch.where(cc.abs() < TINY, TINY, cc)
            factor = torch.where(active, dd * cc, 1.0)
            f = f * factor
            change = torch.maximum(change, (factor - 1).abs())
        active = active & (change > EPS)
    return f


def _fraction_inputs(nu: torch.Tensor, t: torch.Tensor):
    """(a, b, x) as ``student_t._upper`` hands them to the fraction."""
    r = t / nu.sqrt()
    a, b = nu / 2, torch.full_like(nu, 0.5)
    x, y = 1 / (1 + r * r), 1 / (1 + 1 / (r * r))
    direct = x < (a + 1) / (a + b + 2)
    return (torch.where(direct, a, b), torch.where(direct, b, a), torch.where(direct, x, y))


@pytest.mark.parametrize("n", [1, 7, 8, 9, 17, 648, 2000])
def test_continued_fraction_as_torch_computed_it(n):
    from attnlens.stats.student_t import _continued_fraction

    gen = torch.Generator().manual_seed(n)
    nu = torch.exp(torch.rand(n, generator=gen, dtype=torch.float64) * 18)  # 1 .. 6.6e7
    t = torch.randn(n, generator=gen, dtype=torch.float64).abs() * torch.exp(
        torch.rand(n, generator=gen, dtype=torch.float64) * 6) + 1e-3
    a, b, x = _fraction_inputs(nu, t)
    new, old = _continued_fraction(a, b, x), _old_continued_fraction(a, b, x)
    assert new.dtype == old.dtype == torch.float64 and torch.equal(new, old)


def test_p_values_of_the_ewt_heads_as_torch_computed_them(monkeypatch):
    """Every role test's p-value of the heads section on MiniLM's real shapes: the same."""
    import attnlens.stats.student_t as student_t
    from attnlens.stats.bootstrap import p_above

    gen = torch.Generator().manual_seed(0)
    reps = torch.rand(1000, 648, generator=gen) * 0.2 + 0.4  # [replicate, share] float32
    estimate = reps.double().mean(0) + torch.randn(648, generator=gen, dtype=torch.float64) / 20
    df = torch.randint(2, 2000, (648,), generator=gen).double()
    new = p_above(estimate, reps, 0.1, df)
    monkeypatch.setattr(student_t, "_continued_fraction", _old_continued_fraction)
    assert torch.equal(new, p_above(estimate, reps, 0.1, df))


# Markdown tables: the columns' values by tolist() -----------------------------------------
def _old_markdown_table(df, float_format="{:.4g}", markup=True):
    """``io.markdown_table`` before fixed34 (every column iterated cell by cell)."""
    import numpy as np

    from attnlens.runs.io import markdown_cell

    def text(value):
        return markdown_cell(str(value)) if markup else str(value).replace("|", "\\|")

    number = float_format.format

    def column_cells(column):
        kind = column.dtype.kind if isinstance(column.dtype, np.dtype) else ""
        if kind == "f":
            return [number(v) for v in column]
        if kind and kind in "iub":
            return [str(v) for v in column]
        return [text(v) if type(v) is str else number(v) if isinstance(v, float) else text(v)
                for v in column]

    header = "| " + " | ".join(text(c) for c in df.columns) + " |"
    rule = "|" + "|".join("---" for _ in df.columns) + "|"
    columns = [column_cells(df.iloc[:, k]) for k in range(df.shape[1])]
    cells = zip(*columns, strict=True) if columns else [()] * len(df)
    return "\n".join([header, rule, *["| " + " | ".join(r) + " |" for r in cells]]) + "\n"


def test_markdown_tables_as_before():
    import numpy as np
    import pandas as pd

    from attnlens.runs.io import markdown_table

    n = 7
    df = pd.DataFrame({
        "f64": [0.1, -0.0, np.nan, np.inf, 1e-300, 123456.789, 2 / 3],
        "f32": np.array([0.1, 2, 3, np.nan, 5, 6, 7], dtype=np.float32),
        "int": np.arange(n), "u8": np.arange(n, dtype=np.uint8),
        "bool": [True, False] * 3 + [True],
        "str": pd.array(["a|b", "<x>", None, "a|b", "&", "", "é"], dtype="str"),
        "obj": pd.Series(["t", 1, 2.5, None, np.nan, True, ("a", 1)], dtype=object),
        "cat": pd.Categorical(["x", "y", "x", None, "y", "x", "z"]),
        "Int64": pd.array([1, None, 3, 4, 5, 6, 7], dtype="Int64"),
        "when": pd.date_range("2026-11-27", periods=n),
    })
    for markup in (True, False):
        assert markdown_table(df, markup=markup) == _old_markdown_table(df, markup=markup)
    assert markdown_table(df.iloc[:0]) == _old_markdown_table(df.iloc[:0])


# Held-out sentences' arcs: membership by a table instead of torch.isin ---------------------
@pytest.mark.parametrize(("values", "keep"), [
    ([3, 0, 7, 7, 2], [7, 0]), ([3, 0, 7], [9, 11]), ([], [1]), ([4, 5], []),
    ([5, -1, 2], [2, -1]), ([2, 2, 2], [2, 2]),
])
def test_members_as_isin(values, keep):
    from attnlens.measures.heads.syntactic_arcs import _members

    values, keep = torch.tensor(values, dtype=torch.long), torch.tensor(keep, dtype=torch.long)
    assert torch.equal(_members(values, keep), torch.isin(values, keep))


def test_members_as_isin_on_random_indices():
    from attnlens.measures.heads.syntactic_arcs import _members

    gen = torch.Generator().manual_seed(0)
    values = torch.randint(0, 3000, (25_000,), generator=gen)
    keep = torch.randperm(3000, generator=gen)[:1000]
    assert torch.equal(_members(values, keep), torch.isin(values, keep))


# Bootstrap weights gathered by index ops -----------------------------------------------------
def _old_poisson_weights(sentence_ids, n, seed):
    """``bootstrap.poisson_weights`` before fixed34 (advanced indexing)."""
    from attnlens.stats import bootstrap

    ids = torch.as_tensor(sentence_ids, dtype=torch.long).reshape(-1).cpu()
    out = torch.empty(n, len(ids), dtype=torch.float32)
    if n == 0 or not len(ids):
        return out
    blocks = ids // bootstrap.BLOCK
    for block in torch.unique(blocks).tolist():
        cols = (blocks == block).nonzero()[:, 0]
        out[:, cols] = bootstrap._block_draws(seed, block, n)[:, ids[cols] % bootstrap.BLOCK]
    return out


@pytest.mark.parametrize("ids", [list(range(2001)), [700, 3, 3, 900, 2, 255, 256],
                                 sorted(range(0, 6000, 7)), [5]])
def test_poisson_weights_as_before(ids):
    from attnlens.stats.bootstrap import poisson_weights

    for n, seed in ((1000, 0), (7, 3)):
        assert torch.equal(poisson_weights(ids, n, seed), _old_poisson_weights(ids, n, seed))


def test_bootstrap_columns_as_before():
    from attnlens.measures.heads.syntactic_tables import _columns_of

    sentences = torch.arange(0, 4000, 2)
    weights = torch.rand(50, len(sentences))
    ids = sentences[torch.randperm(len(sentences))[:300]].sort().values
    assert torch.equal(_columns_of(sentences, weights, ids),
                       weights[:, torch.searchsorted(sentences, ids)])


# Held-out selection: the accuracies without the tests it never reads -------------------------
def test_relation_stats_without_tests_keeps_the_accuracies():
    import numpy as np

    from attnlens.measures.heads.syntactic_arcs import RelationArcs
    from attnlens.measures.heads.syntactic_tables import relation_stats
    from attnlens.stats.bootstrap import Inference, poisson_weights

    gen = torch.Generator().manual_seed(1)
    n = 40
    arcs = torch.randint(0, 6, (n,), generator=gen).double()
    hits = (torch.rand(n, 3, 2, 4, generator=gen) * arcs[:, None, None, None]).floor()
    offsets = torch.tensor([-2, -1, 1, 3])
    counts = torch.rand(n, 4, generator=gen) * arcs[:, None]
    group = RelationArcs(torch.arange(n) * 3, arcs, hits, offsets, counts)
    for inference in (Inference(bootstrap=200), Inference(bootstrap=200, pooling="sentence"),
                      Inference(bootstrap=0)):
        weights = (poisson_weights(group.sentences, inference.bootstrap, 0)
                   if inference.bootstrap else None)
        full = relation_stats(group, inference, weights, 0.1)
        lean = relation_stats(group, inference, weights, 0.1, tests=False)
        for field in ("accuracy", "ci_low", "ci_high"):
            assert np.array_equal(getattr(full, field), getattr(lean, field), equal_nan=True)
        assert (lean.baseline, lean.baseline_offset, lean.examples, lean.n_sentences) == (
            full.baseline, full.baseline_offset, full.examples, full.n_sentences)
        assert np.isnan(lean.p_value).all() and np.isnan(lean.excess_low).all()
