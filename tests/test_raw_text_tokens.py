"""The model reads each corpus line exactly as its tokenizer tokenises it (issue 23, item 1).

Word batching used to tokenise pre-split words and ask for ``add_prefix_space=True`` as a
call keyword, which transformers 5 ignores: byte-level BPE (GPT-2, RoBERTa) then saw the words
glued together (``WhatifGoogle...``). Now every corpus path tokenises the raw line and finds
the words from the tokens' character offsets. The tokens are compared with the tokenizer's
own encoding of the raw line, as they are (nothing stripped), for WordPiece (MiniLM), byte-
level BPE with and without a prefix space, and SentencePiece-style Metaspace tokenizers
(Unigram like T5, BPE like Llama), all built offline with the ``tokenizers`` library.
"""

from __future__ import annotations

import pandas as pd
import pytest
from attnlens.cli.app import app
from typer.testing import CliRunner

from attnlens.data import words as words_module
from attnlens.data.conllu import DepSentence, parse_conllu
from attnlens.data.tokenizer import Tokenizer
from attnlens.data.words import text_word_batches, treebank_batches

LINES = [
    "What if Google morphed into GoogleOS?",
    "The  cat sat on the mat, didn't it?!",
    "Attention heads are small; 1984 was a year.",
    "Sesquipedalian lecturers pause (rarely) at café doors.",
    "tokenizers split rare words into pieces",
]
TRAINING = LINES * 3 + [
    "the cat sat on the mat", "attention is all you need", "google morphed into something",
]

CONLLU = """# sent_id = s1
# text = She didn't like the movie's ending.
1\tShe\tshe\tPRON\t_\t_\t4\tnsubj\t_\t_
2-3\tdidn't\t_\t_\t_\t_\t_\t_\t_\t_
2\tdid\tdo\tAUX\t_\t_\t4\taux\t_\t_
3\tn't\tnot\tPART\t_\t_\t4\tadvmod\t_\t_
4\tlike\tlike\tVERB\t_\t_\t0\troot\t_\t_
5\tthe\tthe\tDET\t_\t_\t6\tdet\t_\t_
6\tmovie\tmovie\tNOUN\t_\t_\t8\tnmod:poss\t_\tSpaceAfter=No
7\t's\t's\tPART\t_\t_\t6\tcase\t_\t_
8\tending\tending\tNOUN\t_\t_\t4\tobj\t_\tSpaceAfter=No
9\t.\t.\tPUNCT\t_\t_\t4\tpunct\t_\t_

# sent_id = s2
1\tWhat\twhat\tPRON\t_\t_\t0\troot\t_\t_
2\tif\tif\tSCONJ\t_\t_\t4\tmark\t_\t_
3\tGoogle\tGoogle\tPROPN\t_\t_\t4\tnsubj\t_\t_
4\tmorphed\tmorph\tVERB\t_\t_\t1\tadvcl\t_\tSpaceAfter=No
5\t?\t?\tPUNCT\t_\t_\t1\tpunct\t_\t_

"""
TEXTS = ["She didn't like the movie's ending.", "What if Google morphed?"]


def byte_level_bpe(prefix_space: bool) -> Tokenizer:
    """GPT-2 (no prefix space, no special tokens) or RoBERTa style (prefix space, <s> </s>)."""
    from tokenizers import Tokenizer as RustTokenizer
    from tokenizers import decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    rust = RustTokenizer(models.BPE())
    rust.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=prefix_space)
    rust.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=["<s>", "</s>", "<pad>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    rust.train_from_iterator(TRAINING, trainer)
    if prefix_space:
        rust.post_processor = processors.RobertaProcessing(
            ("</s>", rust.token_to_id("</s>")), ("<s>", rust.token_to_id("<s>")),
            trim_offsets=True, add_prefix_space=True)
        return Tokenizer(PreTrainedTokenizerFast(tokenizer_object=rust, bos_token="<s>",
                                                 eos_token="</s>", pad_token="<pad>"))
    return Tokenizer(PreTrainedTokenizerFast(tokenizer_object=rust, eos_token="</s>"))


def metaspace(model: str) -> Tokenizer:
    """SentencePiece style: a Metaspace pre-tokenizer (``▁`` marks word starts) over a
    Unigram model with </s> after the text (T5) or a BPE model with <s> before it (Llama)."""
    from tokenizers import Tokenizer as RustTokenizer
    from tokenizers import decoders, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    specials = ["<pad>", "<s>", "</s>", "<unk>"]
    if model == "unigram":
        rust = RustTokenizer(models.Unigram())
        trainer = trainers.UnigramTrainer(vocab_size=200, special_tokens=specials,
                                          unk_token="<unk>")
        template = "$A </s>"
    else:
        rust = RustTokenizer(models.BPE(unk_token="<unk>"))
        trainer = trainers.BpeTrainer(vocab_size=200, special_tokens=specials)
        template = "<s> $A"
    rust.normalizer = normalizers.NFKC()
    rust.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    rust.decoder = decoders.Metaspace()
    rust.train_from_iterator(TRAINING, trainer)
    rust.post_processor = processors.TemplateProcessing(
        single=template, special_tokens=[(t, rust.token_to_id(t)) for t in ("<s>", "</s>")])
    return Tokenizer(PreTrainedTokenizerFast(tokenizer_object=rust, bos_token="<s>",
                                             eos_token="</s>", pad_token="<pad>",
                                             unk_token="<unk>"))


@pytest.fixture(params=["wordpiece", "bpe", "bpe-prefix-space", "unigram", "metaspace-bpe"])
def tokenizer(request, minilm) -> Tokenizer:
    if request.param == "wordpiece":
        return minilm[1]
    if request.param.startswith("bpe"):
        return byte_level_bpe(prefix_space=request.param == "bpe-prefix-space")
    return metaspace("unigram" if request.param == "unigram" else "bpe")


def _real_tokens(batches, texts) -> dict[int, list[int]]:
    """The ids the model reads for each sentence (by corpus index), padding dropped."""
    seen = {}
    for batch in batches:
        for b, index in enumerate(batch.extra["index"]):
            n = int(batch.attention_mask[b].sum())
            seen[index] = batch.input_ids[b, :n].tolist()
            assert texts[index]  # every sentence maps to its own text
    return seen


def _check_words(batches) -> None:
    """Each kept word owns a run of consecutive tokens, in word order, or is unaligned."""
    for batch in batches:
        for b in range(batch.size):
            spans = [[p for p in range(batch.input_ids.shape[1]) if batch.word_ids[b, p] == w]
                     for w in range(batch.extra["n_words"][b])]
            assert [w for w, s in enumerate(spans) if not s] == batch.extra["unaligned"][b]
            firsts = [s[0] for s in spans if s]
            assert firsts == sorted(firsts)
            for span in spans:
                assert span == list(range(span[0], span[0] + len(span))) if span else True


def test_text_lines_are_tokenised_as_the_tokenizer_does(tokenizer):
    batches = text_word_batches(tokenizer, LINES, batch_size=2, max_length=128)
    seen = _real_tokens(batches, LINES)
    for i, line in enumerate(LINES):
        expected = tokenizer.hf(line)["input_ids"]
        assert tokenizer.decode_tokens(seen[i]) == tokenizer.decode_tokens(expected)
        assert seen[i] == expected
    _check_words(batches)


def test_treebank_sentences_are_tokenised_from_their_text(tokenizer):
    sentences = parse_conllu(CONLLU)
    # s2 has no "# text": its text is rebuilt from the forms and SpaceAfter=No
    assert [s.surface()[0] for s in sentences] == TEXTS
    batches = treebank_batches(tokenizer, sentences, batch_size=2)
    seen = _real_tokens(batches, TEXTS)
    for i, text in enumerate(TEXTS):
        assert seen[i] == tokenizer.hf(text)["input_ids"]
    _check_words(batches)
    # Words built in code (no text) are read joined by single spaces.
    built = DepSentence(("Dogs", "bark", "."), (1, -1, 1), ("nsubj", "root", "punct"),
                        ("X",) * 3)
    (batch,) = treebank_batches(tokenizer, [built])
    n = int(batch.attention_mask[0].sum())
    assert batch.input_ids[0, :n].tolist() == tokenizer.hf("Dogs bark .")["input_ids"]


def test_multiword_tokens_split_their_span_and_words_keep_their_tokens():
    she = parse_conllu(CONLLU)[0]
    assert she.words[1:3] == ("did", "n't")
    assert she.spans[1:3] == ((4, 7), (7, 10))  # "didn't" split as did + n't
    assert she.spans[5:7] == ((20, 25), (25, 27))  # "movie" + "'s" (SpaceAfter=No)
    tok = byte_level_bpe(prefix_space=False)
    (batch,) = treebank_batches(tok, [she])
    spelled = []
    for w in range(len(she.words)):
        ids = batch.input_ids[0][batch.word_ids[0] == w].tolist()
        spelled.append(tok.hf.convert_tokens_to_string(tok.decode_tokens(ids)))
    # byte-level BPE is lossless: the words' tokens in word order spell the text, spaces kept
    assert "".join(spelled) == she.text
    for w in (0, 3, 7):  # She, like, ending: whole tokens of their own
        assert spelled[w].strip() == she.words[w]


def test_a_token_spanning_two_words_leaves_the_second_unaligned():
    from attnlens.data.alignment import token_words

    # "cannot" read as one token for the treebank words "can" + "not"; then " it"
    spans = [(0, 3), (3, 6), (7, 9)]
    owners = token_words([(0, 6), (6, 7), (7, 9)], [0, 0, 0], spans, 9)
    assert owners == [0, 2, 2]  # the space token marks the word after it
    assert token_words([(0, 0), (0, 6), (0, 0)], [1, 0, 1], spans[:2], 6) == [-1, 0, -1]


def test_unaligned_words_are_left_out_of_syntactic_arcs():
    from attnlens.measures.heads.syntactic import SyntacticHeads

    minimal = parse_conllu(CONLLU)[:1]
    analyzer = SyntacticHeads(n_layers=1, n_heads=1)
    (batch,) = treebank_batches(byte_level_bpe(prefix_space=False), minimal)
    batch.extra["unaligned"] = [[2]]  # pretend "n't" had no token of its own
    analyzer.begin_batch(batch)
    arcs = analyzer._arcs[:, 1:3].tolist()  # (dependent, head)
    assert [2, 3] not in arcs and [0, 3] in arcs  # n't -> like skipped, She -> like kept


@pytest.fixture(scope="module")
def gpt2_folder(tmp_path_factory):
    """A tiny GPT-2 with a byte-level BPE tokenizer without prefix space (as GPT-2's)."""
    from transformers import GPT2Config, GPT2Model

    from tests.parity_utils import save_tiny

    tok = byte_level_bpe(prefix_space=False)
    path = tmp_path_factory.mktemp("tiny_gpt2_bpe")
    config = GPT2Config(vocab_size=len(tok.hf), n_embd=32, n_layer=2, n_head=4,
                        n_positions=64)
    save_tiny(GPT2Model, config, path)
    tok.hf.save_pretrained(str(path))
    return path


@pytest.fixture
def recorded(monkeypatch):
    """Every word batch a command builds (the model reads these)."""
    made = []
    original = words_module.word_batches

    def record(*args, **kwargs):
        batches = original(*args, **kwargs)
        made.extend(batches)
        return batches

    monkeypatch.setattr(words_module, "word_batches", record)
    return made


@pytest.mark.parametrize("command", ["rollout", "heads"])
@pytest.mark.parametrize("corpus", ["--text", "--treebank"])
def test_commands_read_the_raw_lines_on_a_gpt2(gpt2_folder, tmp_path, recorded, command,
                                                corpus):
    if corpus == "--text":
        texts = LINES
        (tmp_path / "lines.txt").write_text("\n".join(LINES) + "\n", encoding="utf-8")
        source = tmp_path / "lines.txt"
    else:
        texts = TEXTS
        source = tmp_path / "trees.conllu"
        source.write_text(CONLLU, encoding="utf-8")
    out = tmp_path / "out"
    result = CliRunner().invoke(app, [command, str(gpt2_folder), corpus, str(source),
                                      "--out", str(out), "-q"])
    assert result.exit_code == 0, result.output
    tok = Tokenizer.from_pretrained(gpt2_folder)
    seen = _real_tokens(recorded, texts)
    assert len(seen) == len(texts)
    for i, text in enumerate(texts):
        assert seen[i] == tok.hf(text)["input_ids"], text
    if command == "rollout":  # the written table shows the same tokens
        table = pd.read_csv(out / "tables" / "rollout.csv", keep_default_na=False)
        for i, text in enumerate(texts):
            rows = table[(table["sentence"] == i) & (table["layer"] == 0)
                         & (table["query"] == 0)].sort_values("key")
            assert rows["key_token"].tolist() == tok.hf.tokenize(text)
