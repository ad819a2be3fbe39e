"""Dependency treebanks in CoNLL-U: sentences of words with 0-based heads and relations.

Read by the ``conllu`` library's rules (plain blocks without calling its parser:
``_plain_tokens``). Only the basic tree is used: multiword-token ranges (``3-4  don't``) and
empty nodes (``8.1``) are skipped, so a sentence's words are its syntactic words (``do``,
``n't``), numbered from 0. The root's head is -1.

Every sentence must be a tree: one root (HEAD 0), no word its own head, no cycles, each word
ID once. A malformed file is a ``DataError`` naming the file and line (``file:12``), the
sentence, the word (by its CoNLL-U ID) and the column to fix.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from attnlens.data.alignment import join_words, locate
from attnlens.data.files import read_utf8
from attnlens.errors import DataError
from attnlens.runs.io import check_input_file

ROOT = -1  # head index of the root word


def base_relation(relation: str) -> str:
    """The universal relation without its subtype: ``nmod:poss`` -> ``nmod``."""
    return relation.split(":", 1)[0]


@dataclass(frozen=True)
class DepSentence:
    """One sentence: ``heads[i]`` is the 0-based index of word i's head (-1 for the root)."""

    words: tuple[str, ...]
    heads: tuple[int, ...]
    relations: tuple[str, ...]  # full labels, subtypes kept (nmod:poss)
    upos: tuple[str, ...]
    sent_id: str = ""
    # The raw sentence and each word's character span in it (empty: words joined by spaces).
    text: str = ""
    spans: tuple[tuple[int, int], ...] = ()

    def __len__(self) -> int:
        return len(self.words)

    def surface(self) -> tuple[str, list[tuple[int, int]]]:
        """The text the model reads and each word's span in it: the sentence's own text
        when its words were located in it, else the words joined by single spaces."""
        if self.text and len(self.spans) == len(self.words):
            return self.text, list(self.spans)
        return join_words(self.words)

    @property
    def base_relations(self) -> tuple[str, ...]:
        return tuple(base_relation(r) for r in self.relations)

    def arcs(self) -> list[tuple[int, int, str]]:
        """``(dependent, head, relation)`` for every word except the root."""
        pairs = zip(self.heads, self.relations, strict=True)
        return [(d, h, r) for d, (h, r) in enumerate(pairs) if h >= 0]


COLUMNS = "ID FORM LEMMA UPOS XPOS FEATS HEAD DEPREL DEPS MISC"
LINE_FIX = f"fix that line: CoNLL-U needs 10 tab-separated columns ({COLUMNS})"


@dataclass(frozen=True)
class _Block:
    """One sentence's lines: where its messages point (``source:line, sentence n (id)``)."""

    source: str
    number: int  # 1-based, counting sentences with words
    first_line: int
    token_lines: tuple[int, ...]  # the line of each token (word, range or empty node)
    sent_id: str = ""

    def at(self, line: int | None = None) -> str:
        where = f"{self.source}:{line or self.first_line}, sentence {self.number}"
        return where + (f" ({self.sent_id})" if self.sent_id else "")


def _sentence_from_tokens(tokens, block: _Block) -> DepSentence:
    for t, line in zip(tokens, block.token_lines, strict=False):
        if len(t) != 10:
            raise DataError(
                f"{block.at(line)}: token {t.get('form', '?')!r} has {len(t)} columns; "
                f"{LINE_FIX}."
            )
    # Words only: skips 3-4 ranges and 8.1 nodes, each word kept with its line.
    words, lines = [], []
    for t, line in zip(tokens, block.token_lines, strict=True):
        if isinstance(t["id"], int):
            words.append(t)
            lines.append(line)
    if not words:
        raise DataError(f"{block.at()}: a sentence has no words; check the file is CoNLL-U.")
    index: dict[int, int] = {}
    for i, (t, line) in enumerate(zip(words, lines, strict=True)):
        if t["id"] in index:
            raise DataError(
                f"{block.at(line)}: word ID {t['id']} appears twice (lines "
                f"{lines[index[t['id']]]} and {line}), so a HEAD of {t['id']} would point at "
                "either word; fix the ID column: number the words 1, 2, 3, ... once each."
            )
        index[t["id"]] = i
    heads, relations = [], []
    for t, line in zip(words, lines, strict=True):
        head, relation = t["head"], t["deprel"]
        if not isinstance(head, int) or (head not in index and head != 0):
            raise DataError(
                f"{block.at(line)}: word {t['id']} ({t['form']!r}) has head {head!r}, which is "
                f"not a word of the sentence; fix the HEAD column."
            )
        if not relation or relation == "_":
            raise DataError(f"{block.at(line)}: word {t['id']} ({t['form']!r}) has no DEPREL; "
                            "fix the DEPREL column (the relation to its head, e.g. nsubj).")
        heads.append(ROOT if head == 0 else index[head])
        relations.append(str(relation))
    _check_tree(heads, lambda i: _word(words, i), block.at())
    text, spans = _surface(tokens, words)
    return DepSentence(
        words=tuple(str(t["form"]) for t in words),
        heads=tuple(heads),
        relations=tuple(relations),
        upos=tuple(str(t["upos"] or "_") for t in words),
        sent_id=str(tokens.metadata.get("sent_id", "")),
        text=text,
        spans=tuple(spans),
    )


def _surface(tokens, words) -> tuple[str, list[tuple[int, int]]]:
    """The sentence's raw text and each syntactic word's span in it.

    The text is the ``# text`` line when the surface tokens (multiword tokens such as
    ``didn't`` whole, not their words ``did`` + ``n't``) follow one another in it, else the
    surface tokens joined with a space unless ``SpaceAfter=No``. A multiword token's words
    split its span when their forms spell it (``did`` + ``n't``); otherwise they all share
    it (its first word then holds its tokens, see ``attnlens.data.alignment``).
    """
    units: list[tuple[str, list[int], bool]] = []  # (surface form, word positions, space)
    position = {t["id"]: i for i, t in enumerate(words)}
    inside: set[int] = set()
    for t in tokens:
        ident, misc = t["id"], t["misc"] or {}
        space = misc.get("SpaceAfter") != "No"
        if isinstance(ident, tuple) and len(ident) == 3 and ident[1] == "-":
            members = [position[i] for i in range(ident[0], ident[2] + 1) if i in position]
            if members:
                units.append((str(t["form"]), members, space))
                inside.update(range(ident[0], ident[2] + 1))
        elif isinstance(ident, int) and ident not in inside:
            units.append((str(t["form"]), [position[ident]], space))
    forms = [form for form, _, _ in units]
    text = str(tokens.metadata.get("text") or "")
    located = locate(text, forms) if text else None
    if located is None:
        text = "".join(form + (" " if space else "") for form, _, space in units).rstrip()
        located = locate(text, forms)
    if located is None:  # a form with leading whitespace or empty: words joined by spaces
        return join_words([str(t["form"]) for t in words])
    spans: list[tuple[int, int]] = [(0, 0)] * len(words)
    for (form, members, _), (start, end) in zip(units, located, strict=True):
        parts = [str(words[m]["form"]) for m in members]
        spelled = "".join(parts)
        if len(spelled) == len(form) and spelled.lower() == form.lower():
            for m, part in zip(members, parts, strict=True):
                spans[m] = (start, start + len(part))
                start += len(part)
        else:
            for m in members:
                spans[m] = (start, end)
    return text, spans


def _word(words, i: int) -> str:
    return f"word {words[i]['id']} ({words[i]['form']!r})"


def _check_tree(heads: list[int], word: Callable[[int], str], where: str) -> None:
    """Refuse a sentence that is not a tree (0-based ``heads``, ROOT for HEAD 0); ``word(i)``
    names word i in the message (``word 3 ('go')``)."""
    fix = "fix the HEAD column"
    roots = [i for i, h in enumerate(heads) if h == ROOT]
    if not roots:
        raise DataError(f"{where}: no word has HEAD 0, so the sentence has no root; {fix}.")
    if len(roots) > 1:
        named = ", ".join(word(i) for i in roots[:4])
        raise DataError(f"{where}: {len(roots)} words have HEAD 0 ({named}); a tree has one "
                        f"root; {fix}.")
    for i, h in enumerate(heads):
        if h == i:
            raise DataError(f"{where}: {word(i)} is its own head; {fix}.")
    reaches_root = {roots[0]}
    for start in range(len(heads)):
        path, node = [], start
        while node not in reaches_root:
            if node in path:
                cycle = " -> ".join(word(j) for j in [*path[path.index(node):], node])
                raise DataError(f"{where}: {cycle} form a cycle (no path to the root); {fix}.")
            path.append(node)
            node = heads[node]
        reaches_root.update(path)


def _blocks(text: str) -> list[tuple[int, list[tuple[int, str]]]]:
    """``(first line, [(line number, line), ...])`` of every blank-line separated block."""
    blocks, current = [], []
    for number, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            current.append((number, line))
        elif current:
            blocks.append((current[0][0], current))
            current = []
    if current:
        blocks.append((current[0][0], current))
    return blocks


_PARSE_ERRORS = (ValueError, KeyError, IndexError, TypeError, AttributeError)


class _Tokens(list):
    """One sentence's tokens with its comments' ``metadata``, as ``conllu.TokenList`` has them."""

    def __init__(self, tokens: list[dict], metadata: dict) -> None:
        super().__init__(tokens)
        self.metadata = metadata


def _plain_int(value: str) -> int | None:
    """``value`` as an int when it is ASCII digits without a leading zero, else None."""
    if value.isascii() and value.isdigit() and (value[0] != "0" or value == "0"):
        return int(value)
    return None


def _plain_rows(lines: list[tuple[int, str]]) -> tuple[dict, list[list[str]]] | None:
    """A plain block's comments (by the library's ``parse_comment_line``) and its token lines'
    columns: every line without surrounding whitespace or a double space, 10 tab-separated
    columns, no range in DEPS (there it may be an error), no ``global.columns`` comment; None
    for any other block."""
    from conllu.parser import parse_comment_line

    metadata: dict = {}
    rows = []
    for _, line in lines:
        if line != line.strip() or "  " in line:
            return None
        if line.startswith("#"):
            if line.startswith("# global.columns = "):
                return None
            for key, value in parse_comment_line(line):
                metadata[key] = value
            continue
        columns = line.split("\t")
        if len(columns) != 10 or "-" in columns[8]:
            return None
        rows.append(columns)
    return metadata, rows


def _plain_tokens(lines: list[tuple[int, str]]) -> _Tokens | None:
    """One block read without the ``conllu`` library, where it is plain (``_plain_rows``) and
    its IDs and HEADs are ones the library reads without an error. The fields attnlens
    reads (ID, FORM, UPOS, HEAD, DEPREL, MISC, the comments) have the library's values, by
    its own functions where a value is not a plain number; the others are kept as written.
    None for any other block: ``_parse_block`` reads it (and names what is wrong)."""
    from conllu.exceptions import ParseException
    from conllu.parser import parse_dict_value, parse_id_value

    plain = _plain_rows(lines)
    if plain is None:
        return None
    metadata, rows = plain
    tokens = []
    for columns in rows:
        ident, head = _plain_int(columns[0]), _plain_int(columns[6])
        if ident is None:
            try:
                ident = parse_id_value(columns[0])  # a range, an empty node, or "_"
            except ParseException:
                return None
        if head is None and columns[6] != "_":
            return None
        tokens.append(dict(zip(_FIELDS, columns, strict=True), id=ident, head=head,
                           misc=parse_dict_value(columns[9])))
    return _Tokens(tokens, metadata)


def _simple_sentence(lines: list[tuple[int, str]], block: _Block) -> DepSentence | None:
    """A plain block (``_plain_tokens``) of words only, numbered 1, 2, 3, ... with HEADs and
    DEPRELs a sentence accepts, read straight into its sentence: what ``_plain_tokens`` and
    ``_sentence_from_tokens`` give it, without a dict per token. None for any other block
    (a multiword token, an empty node, a comment-only block, an error but a tree's)."""
    from conllu.parser import parse_dict_value

    plain = _plain_rows(lines)
    if plain is None:
        return None
    metadata, rows = plain
    forms, upos, heads, relations, spaces = [], [], [], [], []
    for columns in rows:
        if columns[0] != str(len(forms) + 1):
            return None
        head, relation = _plain_int(columns[6]), columns[7]
        if head is None or not relation or relation == "_":
            return None
        forms.append(columns[1])
        upos.append(columns[3] or "_")
        heads.append(head - 1 if head else ROOT)
        relations.append(relation)
        misc = columns[9]  # SpaceAfter read as the library reads MISC, only where it is named
        spaces.append("SpaceAfter" not in misc
                      or (parse_dict_value(misc) or {}).get("SpaceAfter") != "No")
    if not forms or max(heads) >= len(forms):
        return None
    sent_id = metadata.get("sent_id")
    if sent_id:
        block = _Block(block.source, block.number, block.first_line, block.token_lines,
                       str(sent_id))
    _check_tree(heads, lambda i: f"word {i + 1} ({forms[i]!r})", block.at())
    text, spans = _words_surface(str(metadata.get("text") or ""), forms, spaces)
    return DepSentence(words=tuple(forms), heads=tuple(heads), relations=tuple(relations),
                       upos=tuple(upos), sent_id=str(metadata.get("sent_id", "")), text=text,
                       spans=tuple(spans))


def _words_surface(text: str, forms: list[str],
                   spaces: list[bool]) -> tuple[str, list[tuple[int, int]]]:
    """``_surface`` of a sentence without multiword tokens: each word its own unit."""
    located = locate(text, forms) if text else None
    if located is None:
        text = "".join(form + (" " if space else "")
                       for form, space in zip(forms, spaces, strict=True)).rstrip()
        located = locate(text, forms)
    if located is None:
        return join_words(forms)
    return text, located


_FIELDS = ("id", "form", "lemma", "upos", "xpos", "feats", "head", "deprel", "deps", "misc")


def _parse_block(lines: list[tuple[int, str]], source: str):
    """One block through the ``conllu`` library; an error names the line that caused it."""
    import conllu
    from conllu.exceptions import ParseException

    def parse(part: list[tuple[int, str]]):
        return conllu.parse("\n".join(line for _, line in part) + "\n\n")

    try:
        return parse(lines)
    except (ParseException, *_PARSE_ERRORS) as exc:
        failing = lines[0][0]
        for number, line in lines:  # the first line that fails on its own
            try:
                parse([(number, line)])
            except (ParseException, *_PARSE_ERRORS):
                failing = number
                break
        reason = " ".join(str(exc).split())[:200] or type(exc).__name__
        raise DataError(f"{source}:{failing} is not valid CoNLL-U: {reason.rstrip('.')}; "
                        f"{LINE_FIX}.") from exc


def parse_conllu(text: str, source: str = "<string>") -> list[DepSentence]:
    """Parse CoNLL-U text into sentences; malformed input raises ``DataError`` naming the
    file, the line and what to fix."""
    sentences = []
    for _, lines in _blocks(text):
        token_lines = tuple(n for n, line in lines if not line.startswith("#"))
        simple = _simple_sentence(lines, _Block(source, len(sentences) + 1,
                                                token_lines[0] if token_lines else 0,
                                                token_lines))
        if simple is not None:
            sentences.append(simple)
            continue
        plain = _plain_tokens(lines)
        for tokens in [plain] if plain is not None else _parse_block(lines, source):
            if not len(tokens):
                continue  # a block of comments only (e.g. a file header)
            sent_id = tokens.metadata.get("sent_id")
            block = _Block(source, len(sentences) + 1, token_lines[0], token_lines,
                           str(sent_id) if sent_id else "")
            sentences.append(_sentence_from_tokens(tokens, block))
    if not sentences:
        raise DataError(f"{source} contains no sentences; is it a CoNLL-U treebank?")
    return sentences


def read_conllu(path: str | Path) -> list[DepSentence]:
    """Read a CoNLL-U file (UTF-8) into sentences of words with heads and relations."""
    path = check_input_file(path, "--treebank", "CoNLL-U treebank")
    return parse_conllu(read_utf8(path), source=str(path))


def sample_treebank() -> list[DepSentence]:
    """The embedded sample: English sentences written and annotated (UD v2) by attnlens."""
    text = resources.files("attnlens.data").joinpath("sample.conllu").read_text("utf-8")
    return parse_conllu(text, source="attnlens sample.conllu")


def tree_problems(sentence: DepSentence) -> list[str]:
    """What makes ``sentence`` not a well-formed tree (empty list when it is one)."""
    problems = []
    n = len(sentence)
    roots = [i for i, h in enumerate(sentence.heads) if h == ROOT]
    if len(roots) != 1:
        problems.append(f"{len(roots)} roots")
    for i, (h, r) in enumerate(zip(sentence.heads, sentence.relations, strict=True)):
        if not ROOT <= h < n or h == i:
            problems.append(f"word {i} has head {h}")
        if (h == ROOT) != (r == "root"):
            problems.append(f"word {i} has relation {r} with head {h}")
    if problems:
        return problems
    for start in range(n):  # follow heads upwards; more than n steps means a cycle
        node, steps = start, 0
        while node != ROOT and steps <= n:
            node, steps = sentence.heads[node], steps + 1
        if node != ROOT:
            problems.append(f"word {start} is on a cycle")
            break
    return problems


def relation_counts(sentences: Sequence[DepSentence], base: bool = False) -> dict[str, int]:
    """Number of arcs per relation (full labels, or base labels when ``base``)."""
    counts: dict[str, int] = {}
    for sentence in sentences:
        for _, _, relation in sentence.arcs():
            key = base_relation(relation) if base else relation
            counts[key] = counts.get(key, 0) + 1
    return counts


def parse_with_spacy(texts: Sequence[str], pipeline: str = "en_core_web_sm") -> list[DepSentence]:
    """Parse plain text with spaCy (optional extra). Labels are the pipeline's own
    (ClearNLP style for English: ``dobj``, ``prep``, ``pobj``...), not UD."""
    try:
        import spacy
    except ImportError as exc:
        raise DataError(
            "--parse needs spaCy: pip install 'attnlens[spacy]' and an English pipeline "
            f"(python -m spacy download {pipeline}), or pass a CoNLL-U file with --treebank."
        ) from exc
    try:
        nlp = spacy.load(pipeline)
    except OSError as exc:
        raise DataError(
            f"spaCy pipeline {pipeline!r} is not installed; run python -m spacy download "
            f"{pipeline}, or pass a CoNLL-U file with --treebank."
        ) from exc
    sentences = []
    for doc in nlp.pipe(texts):
        for sent in doc.sents:
            tokens = [t for t in sent if not t.is_space]
            index = {t.i: n for n, t in enumerate(tokens)}
            heads = [ROOT if t.head.i == t.i else index.get(t.head.i, ROOT) for t in tokens]
            pairs = zip(tokens, heads, strict=True)
            relations = ["root" if h == ROOT else t.dep_.lower() for t, h in pairs]
            sentences.append(DepSentence(
                words=tuple(t.text for t in tokens), heads=tuple(heads),
                relations=tuple(relations), upos=tuple(t.pos_ for t in tokens),
                text=sent.text, spans=tuple((t.idx - sent.start_char,
                                             t.idx - sent.start_char + len(t.text))
                                            for t in tokens),
            ))
    if not sentences:
        raise DataError("spaCy found no sentences in the text.")
    return sentences
