"""The corpus a command reads: a CoNLL-U treebank, plain text, or the embedded sample treebank.

Checking the options and reading the files needs neither torch nor a tokenizer, so a bad
path or a malformed file is reported before any model is loaded; ``Corpus.batches`` then
tokenises (word batches: every analyzer, token- or word-level, reads the same batches).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from attnlens.errors import DataError
from attnlens.runs.io import check_input_file

if TYPE_CHECKING:
    from attnlens.data.batch import Batch
    from attnlens.data.tokenizer import Tokenizer


def check_corpus_options(
    text: str | Path | None, treebank: str | Path | None, parse: bool = False
) -> None:
    """Fail early on contradictory corpus options and on paths that are not files."""
    if text and treebank:
        raise DataError("give either --text or --treebank, not both.")
    if parse and not text:
        raise DataError("--parse parses a plain-text file; pass it with --text.")
    check_input_file(text, "--text", "text, one sentence per line")
    check_input_file(treebank, "--treebank", "CoNLL-U treebank")


@dataclass
class Corpus:
    """A corpus read from disk: dependency trees, or plain-text lines split into words."""

    name: str
    sentences: list | None = None  # DepSentence list (treebank or spaCy parse)
    texts: list[str] | None = None  # plain-text lines

    def __len__(self) -> int:
        return len(self.sentences if self.sentences is not None else self.texts or [])

    def batches(
        self, tokenizer: Tokenizer, batch_size: int = 16, max_length: int = 128,
        batch_tokens: int | None = None,
    ) -> list[Batch]:
        """Word batches for the analyzers (``treebank_batches`` or ``text_word_batches``):
        at most ``batch_size`` sentences each, and with ``batch_tokens`` at most that many
        padded tokens (``data.text.length_sorted_chunks``)."""
        from attnlens.data.words import text_word_batches, treebank_batches

        if self.sentences is not None:
            batches = treebank_batches(tokenizer, self.sentences, batch_size, max_length,
                                       batch_tokens)
        else:
            batches = text_word_batches(tokenizer, self.texts or [], batch_size, max_length,
                                        batch_tokens)
        self.check_tokens(batches)
        return batches

    def check_tokens(self, batches: list[Batch]) -> None:
        """Refuse a sentence the tokenizer turns into no token at all (a vocabulary without
        its characters and no special tokens): the model would read an empty row."""
        for batch in batches:
            empty = (batch.attention_mask.sum(dim=1) == 0).nonzero().flatten().tolist()
            if empty:
                i = batch.extra["index"][empty[0]]
                words = (self.sentences[i].words if self.sentences is not None
                         else (self.texts or [])[i].split())
                shown = " ".join(words)[:60]
                raise DataError(f"sentence {i + 1} of {self.name} ({shown!r}) gives no tokens "
                                "with this model's tokenizer (none of its characters are in "
                                "the vocabulary, and it adds no special tokens); remove such "
                                "lines, or use a model whose tokenizer covers this text.")


def load_corpus(
    text: str | Path | None = None, treebank: str | Path | None = None, parse: bool = False,
    max_sentences: int | None = None,
) -> Corpus:
    """The corpus a command was given: ``treebank`` (CoNLL-U), else ``text`` (one sentence per
    line; dependency-parsed by spaCy when ``parse``), else the embedded sample treebank; with
    ``max_sentences``, its first ``max_sentences`` sentences (``--max-sentences``)."""
    corpus = _read_corpus(text, treebank, parse)
    if max_sentences is None or len(corpus) <= max_sentences:
        return corpus
    if corpus.sentences is not None:
        return Corpus(f"{corpus.name}, first {max_sentences}",
                      sentences=corpus.sentences[:max_sentences])
    return Corpus(f"{corpus.name}, first {max_sentences}", texts=corpus.texts[:max_sentences])


def _read_corpus(text: str | Path | None, treebank: str | Path | None, parse: bool) -> Corpus:
    from attnlens.data import conllu
    from attnlens.data.text import read_text_file

    check_corpus_options(text, treebank, parse)
    if treebank:
        sentences = conllu.read_conllu(treebank)
        return Corpus(f"{treebank} ({len(sentences)} sentences)", sentences=sentences)
    if text and parse:
        sentences = conllu.parse_with_spacy(read_text_file(text))
        return Corpus(f"{text} parsed by spaCy ({len(sentences)} sentences)", sentences=sentences)
    if text:
        texts = read_text_file(text)
        return Corpus(f"{text} ({len(texts)} lines)", texts=texts)
    sentences = conllu.sample_treebank()
    return Corpus(f"built-in sample treebank ({len(sentences)} sentences)", sentences=sentences)


def corpus_batches(
    tokenizer: Tokenizer,
    text: str | Path | None = None,
    treebank: str | Path | None = None,
    parse: bool = False,
    batch_size: int = 16,
    max_length: int = 128,
) -> tuple[list[Batch], str]:
    """``load_corpus(...)`` batched in one call: (word batches, the corpus name)."""
    corpus = load_corpus(text=text, treebank=treebank, parse=parse)
    return corpus.batches(tokenizer, batch_size, max_length), corpus.name

