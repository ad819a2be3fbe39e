"""Property-based tests (hypothesis) of the readers and the word alignment: any input ends in
a result that keeps the reader's promises, or in an ``AttnlensError``; never another
exception."""

from __future__ import annotations

import math
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from attnlens.data.conllu import ROOT, parse_conllu, read_conllu
from attnlens.data.pairs import MIN_PAIRS, read_pairs
from attnlens.data.text import read_text_file
from attnlens.errors import AttnlensError

# derandomize: the same examples on every run (a failure is reproducible in CI);
# deadline off: the machine is shared and timings vary.
FUZZ = settings(max_examples=300, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow])


def _file(data: bytes, suffix: str) -> Path:
    handle = tempfile.NamedTemporaryFile(suffix=suffix, delete=False)  # noqa: SIM115
    with handle:
        handle.write(data)
    return Path(handle.name)


def _read(reader, data: bytes, suffix: str):
    path = _file(data, suffix)
    try:
        return reader(path)
    except AttnlensError as exc:
        assert str(exc).strip() and "\n" not in str(exc).strip()  # one line for the CLI
        return None
    finally:
        path.unlink()


# Nasty text: control characters, NUL, BOM, separators, surrogate-free unicode, CRs.
NASTY = st.text(alphabet=st.characters(codec="utf-8"), max_size=200) | st.sampled_from([
    "\ufeffHello.\n", "\0", "\r\n\r\n", "\u2028\u2029\x85", "a\rb\rc", "\x1c\x1d\x1e",
    "\u200b\u200d\n", "\ue000\n",
])
BYTES = st.binary(max_size=300) | NASTY.map(lambda t: t.encode("utf-8"))


# Plain text -------------------------------------------------------------------------------
@FUZZ
@given(BYTES)
def test_text_reader_gives_real_lines_or_a_data_error(data):
    lines = _read(read_text_file, data, ".txt")
    if lines is not None:
        assert lines and all(line == line.strip() and line for line in lines)
        assert all("\0" not in line and "\n" not in line for line in lines)


# CoNLL-U ----------------------------------------------------------------------------------
FIELD = st.sampled_from(["_", "x", "NOUN", "", " ", "a=b|c=d", "3", "0", "-1", "1-2", "2.1",
                         "root", "nsubj", "\t", "#"]) | st.text(max_size=6)
HEAD = st.integers(-2, 8).map(str) | st.sampled_from(["_", "", "x", "1.5"])


@st.composite
def conllu_text(draw) -> str:
    """Sentences of rows that are nearly CoNLL-U: right or wrong IDs, heads, column counts."""
    blocks = []
    for _ in range(draw(st.integers(0, 3))):
        rows = []
        if draw(st.booleans()):
            rows.append(f"# sent_id = {draw(st.text(max_size=5))}")
        for i in range(1, draw(st.integers(0, 6)) + 1):
            cols = [draw(st.sampled_from([str(i), str(i), f"{i}-{i + 1}", f"{i}.1", "x"])),
                    draw(FIELD), "_", draw(FIELD), "_", "_", draw(HEAD),
                    draw(st.sampled_from(["root", "nsubj", "_", "", "obj:x"])), "_", "_"]
            cut = draw(st.sampled_from([10, 10, 10, 9, 11, 3]))
            rows.append("\t".join((cols + ["_"] * 2)[:cut]))
        blocks.append("\n".join(rows))
    return "\n\n".join(blocks) + draw(st.sampled_from(["\n\n", "\n", ""]))


def _is_tree(heads: tuple[int, ...]) -> bool:
    if sum(h == ROOT for h in heads) != 1:
        return False
    for start in range(len(heads)):
        node, steps = start, 0
        while node != ROOT:
            if steps > len(heads) or not ROOT <= heads[node] < len(heads) or heads[node] == node:
                return False
            node, steps = heads[node], steps + 1
    return True


def _parse(text: str):
    try:
        return parse_conllu(text, source="fuzz.conllu")
    except AttnlensError:
        return None


@FUZZ
@given(conllu_text() | NASTY)
def test_conllu_parser_gives_trees_or_a_data_error(text):
    sentences = _parse(text)
    if sentences is not None:
        assert sentences
        for sentence in sentences:
            assert len(sentence.words) == len(sentence.heads) == len(sentence.relations) > 0
            assert _is_tree(sentence.heads), sentence


@FUZZ
@given(BYTES)
def test_conllu_file_reader_never_raises_another_exception(data):
    _read(read_conllu, data, ".conllu")


# Sentence pairs ---------------------------------------------------------------------------
SCORE = st.floats(allow_nan=True, allow_infinity=True).map(repr) | st.sampled_from(
    ["nan", "inf", "-0", "1e400", "5.0000001", "", " 3 ", "1_0", "0x1", "three"])
CELL = st.text(max_size=20) | st.sampled_from(['"', '""', "a,b", "\n", "\0", "\r"])


@st.composite
def pairs_csv(draw) -> bytes:
    rows = []
    for _ in range(draw(st.integers(0, 6))):
        width = draw(st.sampled_from([3, 3, 3, 2, 4, 1]))
        cells = [draw(CELL) for _ in range(width - 1)] + [draw(SCORE)]
        rows.append(",".join(cells))
    return ("\n".join(rows) + "\n").encode("utf-8")


@FUZZ
@given(pairs_csv() | BYTES)
def test_pairs_reader_gives_defined_scores_or_a_data_error(data):
    pairs = _read(read_pairs, data, ".csv")
    if pairs is not None:
        assert len(pairs) >= MIN_PAIRS == 3
        assert all(math.isfinite(s) and 0.0 <= s <= 5.0 for s in pairs.scores)
        assert max(pairs.scores) > min(pairs.scores)
        assert len(pairs.first) == len(pairs.second) == len(pairs.scores)


# Word alignment ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tokenizer():
    from attnlens.data.tokenizer import Tokenizer
    from attnlens.loaders.checkpoint import default_model_path

    return Tokenizer.from_pretrained(default_model_path())


WORD = st.text(alphabet=st.characters(codec="utf-8"), max_size=12) | st.sampled_from(
    ["", " ", "\x00", "\u200b", "don't", "naïve", "日本語", "🙂", "[CLS]", "[SEP]", "##s"])


@settings(max_examples=150, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(sentences=st.lists(st.lists(WORD, max_size=12), min_size=1, max_size=4),
       max_length=st.integers(4, 24), batch_size=st.integers(1, 3))
def test_word_alignment_gives_consistent_word_ids_or_a_data_error(
    tokenizer, sentences, max_length, batch_size
):
    from attnlens.data.words import word_attention, word_batches

    try:
        batches = word_batches(tokenizer, sentences, batch_size=batch_size, max_length=max_length)
    except AttnlensError:
        return
    seen = []
    for batch in batches:
        assert batch.input_ids.shape[1] <= max_length
        for row, index in enumerate(batch.extra["index"]):
            seen.append(index)
            n = batch.extra["n_words"][row]
            assert 0 <= n <= len(sentences[index])
            ids = batch.word_ids[row].tolist()
            assert all(-1 <= w < n for w in ids)
            # a word's tokens are contiguous and in word order
            words = [w for w in ids if w >= 0]
            assert words == sorted(words)
            positions = {w: [p for p, v in enumerate(ids) if v == w] for w in set(words)}
            assert all(p[-1] - p[0] + 1 == len(p) for p in positions.values())
        # the word-level pattern of a uniform token pattern keeps rows within [0, 1]
        import torch

        mask = batch.attention_mask.float()  # [batch, pos]
        pattern = (mask[:, None, None, :] / mask.sum(-1)[:, None, None, None]).expand(
            -1, 1, mask.shape[1], -1)  # [batch, head, query_pos, key_pos]
        words = word_attention(pattern, batch.word_ids, batch.special_mask)
        totals = words.weights.sum(-1) + words.to_special  # [batch, head, query_word]
        assert bool((totals <= 1 + 1e-5).all())  # fp32 sums of <= 24 terms of <= 1
        assert bool(torch.isfinite(words.weights).all())
    assert sorted(seen) == list(range(len(sentences)))


def test_an_unknown_word_is_a_word_not_a_special_token(tokenizer):
    """Found by the property above: [UNK] is among the tokenizer's special ids, so an unknown
    word's token was counted both as the word and as a special token (rows summed to 4/3)."""
    from attnlens.data.words import word_batches

    (batch,) = word_batches(tokenizer, [["Ƣ", "cat"]], max_length=8)
    assert tokenizer.hf.unk_token_id in batch.input_ids[0].tolist()
    assert batch.word_ids[0].tolist()[:4] == [-1, 0, 1, -1]
    assert batch.special_mask[0].tolist()[:4] == [True, False, False, True]
