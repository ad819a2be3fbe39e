"""Clark et al. (2019) / Voita et al. (2019) per-head attention statistics, at token level.

Every measure is computed on **tokens** (so it works on plain text and on treebanks alike)
and averaged over query rows that are real, non-special tokens ([CLS]/[SEP] rows excluded),
except where a measure says otherwise. Key columns are all real tokens, special ones
included. Measures (one row per layer/head/measure in the result):

- ``confidence``: mean maximum attention weight of a row (Voita);
- ``entropy``: mean entropy of a row, in nats;
- ``to_cls`` / ``to_sep``: mean weight on [CLS] (first special token: <s>, BOS) and on
  [SEP] (separator/end: </s>, EOS);
- ``to_punct``: mean weight on punctuation tokens (every character Unicode punctuation);
- ``to_self``: mean weight on the token itself;
- ``to_prev`` / ``to_next``: mean weight on the token before / after, over the rows whose
  neighbour on that side is a real, non-special token (the first word's previous token is
  [CLS], the last word's next token is [SEP]: those rows are left out, so a previous-token
  head scores what it puts on real previous tokens);
- ``distance``: mean attention distance ``sum_j p_ij |i - j|``, in tokens;
- ``sink`` (causal models): mean weight on the first real token (Gu et al. 2024's
  first-token importance), over every real query row, special tokens included.

Measures that are 0 by construction for a model are not computed (``measures_for``): under a
causal mask no query sees the next token or a trailing [SEP]/EOS, so ``to_next`` and
``to_sep`` are left out and ``sink`` replaces ``to_cls`` (a leading BOS is the first token);
``to_cls`` / ``to_sep`` need a tokenizer that adds such a token (GPT-2's adds none).

**Computation.** On the CPU a C kernel (``_stats_kernel.c``, ``TokenMeasures._kernel_rows``)
reads each row of a whole pattern once for every measure but the entropy: the row maximum
and the entries read (self, previous, next, first token) are the torch path's values; the
weights on [CLS], [SEP], punctuation and the distance are summed in float64 and rounded to
float32 once (the torch path rounds each product and partial sum to float32: the two agree
within float32 rounding). GPUs, query blocks of long inputs and builds without a compiler
take the torch path.

Sums are also kept per sentence (``sentence_sums``, ``sentence_rows``: rows counted per
sentence and measure), so the heads report gives each statistic a bootstrap interval over
sentences and can pool per sentence (``attnlens.measures.heads.head_stats_tables``).
"""

from __future__ import annotations

import unicodedata

import pandas as pd
import torch
import torch.nn.functional as F

from attnlens.errors import DataError
from attnlens.hooks import ActivationCache
from attnlens.model.transformer import HookedTransformer
from attnlens.stream.base import Batch, PatternBlock
from attnlens.stream.head_patterns import HeadPatternAnalyzer
from attnlens.stream.held_layers import HeldLayers, add_to_layers
from attnlens.stream.per_sentence import PerSentenceRows, sentence_ids_of
from attnlens.stream.threads import run_split

try:  # the C kernel (setup.py builds it where a compiler is present)
    from attnlens.measures.heads import _stats_kernel
except ImportError:  # pragma: no cover - no compiler at install time
    _stats_kernel = None

# Every statistic HeadStats can compute, in table order; ``MEASURES`` is the set of a
# bidirectional model with [CLS] and [SEP] (BERT), ``measures_for`` picks a model's own.
ALL_MEASURES = (
    "confidence",
    "entropy",
    "to_cls",
    "to_sep",
    "to_punct",
    "to_self",
    "to_prev",
    "to_next",
    "distance",
    "sink",
)
MEASURES = ALL_MEASURES[:-1]
# where each statistic lies in the C kernel's output (``_stats_kernel.c``; entropy: torch's)
KERNEL_OUTPUTS = {"confidence": 0, "to_cls": 1, "to_sep": 2, "to_punct": 3, "to_prev": 4,
                  "to_self": 5, "to_next": 6, "distance": 7, "sink": 8}
KERNEL_TIES = 9  # and the number of keys tying for each row's maximum (positional heads)
SUBWORD_MARKERS = ("##", "Ġ", "▁", "Ċ")


def is_punctuation(token: str) -> bool:
    """True for tokens made only of Unicode punctuation (subword markers stripped)."""
    # Most of a vocabulary ends in a letter or digit: not punctuation (no such character is
    # in a P* category; stripping a prefix keeps the last character or empties the token)
    if token[-1:].isalnum():
        return False
    for marker in SUBWORD_MARKERS:
        token = token.removeprefix(marker)
    return bool(token) and all(unicodedata.category(ch).startswith("P") for ch in token)


def special_id_sets(tokenizer) -> tuple[set[int], set[int]]:
    """(ids counted as [CLS], ids counted as [SEP]) for a ``Tokenizer``."""
    hf = tokenizer.hf
    cls_ids = {i for i in (hf.cls_token_id, hf.bos_token_id) if i is not None}
    sep_ids = {i for i in (hf.sep_token_id, hf.eos_token_id) if i is not None} - cls_ids
    return cls_ids, sep_ids


def measures_for(causal: bool, leading_special: bool = True,
                 trailing_special: bool = True) -> tuple[str, ...]:
    """The statistics that are not 0 by construction for a model (module docstring)."""
    left_out = set()
    if causal:
        left_out |= {"to_next", "to_sep", "to_cls"}
    else:
        left_out.add("sink")
    if not leading_special:
        left_out.add("to_cls")
    if not trailing_special:
        left_out.add("to_sep")
    return tuple(m for m in ALL_MEASURES if m not in left_out)


def model_is_causal(model) -> bool:
    """True when the model's (first) attention stack is causally masked."""
    cfg = getattr(model, "cfg", None)
    return bool(getattr(cfg, "causal", False))


def punctuation_ids(tokenizer) -> set[int]:
    """Vocabulary ids of punctuation tokens (special tokens excluded).

    Read from the vocabulary once per tokenizer (a report asks three times: head statistics,
    head examples, the null model's head statistics); read again when the vocabulary's size
    or the special tokens change."""
    special = tokenizer.special_ids
    key = (len(tokenizer.hf), frozenset(special))
    cached = getattr(tokenizer, "_punctuation_ids", None)
    if cached is None or cached[0] != key:
        cached = (key, frozenset(i for tok, i in tokenizer.hf.get_vocab().items()
                                 if i not in special and is_punctuation(tok)))
        tokenizer._punctuation_ids = cached
    return set(cached[1])


def uses_kernel(block: PatternBlock) -> bool:
    """Whether the C kernel computes the per-row values of ``block``: built, a whole pattern
    (query blocks of long inputs keep the torch path) on the CPU."""
    return _stats_kernel is not None and block.is_whole and block.pattern.device.type == "cpu"


class TokenMeasures:
    """How each statistic is read from one layer's patterns: the rows it averages over and
    its value on every query row (shared by ``HeadStats`` and the examples analyzer)."""

    def __init__(self, measures: tuple[str, ...], cls_ids: set[int], sep_ids: set[int],
                 punct_ids: set[int]) -> None:
        unknown = [m for m in measures if m not in ALL_MEASURES]
        if unknown or not measures:
            raise ValueError(f"unknown head statistics {unknown}; choose from {ALL_MEASURES}.")
        self.measures = tuple(m for m in ALL_MEASURES if m in measures)  # table order
        self.id_sets = [  # [CLS], [SEP], punctuation ids as sorted tensors, built once
            torch.tensor(sorted(s), dtype=torch.long) for s in (cls_ids, sep_ids, punct_ids)
        ]
        # names the id sets in a block's shared quantities (``PatternBlock.shared``): two
        # readers with the same sets (head statistics, head examples) share each row value
        self.ids_key = tuple(tuple(sorted(s)) for s in (cls_ids, sep_ids, punct_ids))

    def prepare(self, batch: Batch) -> None:
        """Masks of one batch: ``rows`` (real, non-special queries), ``row_weight``
        ``[measure, batch, 1, query_pos]`` (the rows each measure averages)."""
        real = batch.attention_mask.bool()  # [batch, pos]
        special = (batch.special_mask if batch.special_mask is not None
                   else torch.zeros_like(real))
        rows = real & ~special  # [batch, pos]: the query rows most measures average
        ids = batch.input_ids
        self.targets = torch.stack(
            [torch.isin(ids, s.to(ids.device)) & real for s in self.id_sets], -1
        ).to(torch.float32)  # [batch, key_pos, 3]: is [CLS], is [SEP], is punctuation
        has_prev = rows & F.pad(rows[:, :-1], (1, 0), value=False)  # a real previous word token
        has_next = rows & F.pad(rows[:, 1:], (0, 1), value=False)
        self.first = real.to(torch.int8).argmax(1)  # [batch] first real token
        counted = {"to_prev": has_prev, "to_next": has_next, "sink": real}
        self.rows = rows
        self._key_bits = None  # the kernel's key sets, made on its first use in the batch
        self.row_weight = torch.stack(
            [counted.get(m, rows) for m in self.measures]
        ).to(torch.float32)[:, :, None, :]  # [measure, batch, 1, query_pos]

    def per_row(self, pattern: torch.Tensor | PatternBlock) -> torch.Tensor:
        """``[measure, batch, head, rows]``: each measure's value on every query row of a
        block (a whole pattern ``[batch, head, query_pos, key_pos]`` is one block).

        Each measure's rows are computed once per block (``PatternBlock.shared``) and shared
        with every reader of the same block and id sets (``prepare`` with the same batch).
        A whole CPU pattern's are the C kernel's (``uses_kernel``; entropy stays torch's, the
        value head behaviour compares with its threshold), which also hands the block its
        row maxima and how many keys tie for each (``PatternBlock.offer_row_max``: amax's
        values and ``max_count``'s counts, for the positional heads)."""
        block = pattern if isinstance(pattern, PatternBlock) else PatternBlock.whole(pattern, 0)
        p = block.p  # [batch, head, rows, key_pos]
        if uses_kernel(block):
            found = block.shared(("token measures kernel", self.ids_key),
                                 lambda: self._kernel_rows(p))  # [10, batch, head, rows]
            block.offer_row_max(found[KERNEL_OUTPUTS["confidence"]], found[KERNEL_TIES])
            return torch.stack([
                block.entropy if m == "entropy" else found[KERNEL_OUTPUTS[m]]
                for m in self.measures
            ])

        def targets() -> torch.Tensor:  # [batch, head, rows, 3]: weight on [CLS], [SEP], punct.
            return block.shared(("token targets", self.ids_key),
                                lambda: p @ self.targets[:, None])

        def first() -> torch.Tensor:  # A[i, first real token]
            index = self.first[:, None, None, None].expand(-1, p.shape[1], p.shape[2], 1)
            return p.gather(-1, index)[..., 0]

        compute = {
            "confidence": lambda: block.row_max,
            "entropy": lambda: block.entropy,  # -sum p log p, 0 log 0 = 0
            "to_cls": lambda: targets()[..., 0],
            "to_sep": lambda: targets()[..., 1],
            "to_punct": lambda: targets()[..., 2],
            "to_self": lambda: block.diagonal(p, 0),  # p[i, i]
            "to_prev": lambda: block.diagonal(p, -1),  # p[i, i-1], 0 on the first row
            "to_next": lambda: block.diagonal(p, 1),  # p[i, i+1], 0 on the last row
            "distance": lambda: (p * block.distance).sum(-1),
            "sink": first,
        }
        depends_on_ids = ("to_cls", "to_sep", "to_punct")
        return torch.stack([
            block.shared(("token measure", m, self.ids_key if m in depends_on_ids else None),
                         compute[m])
            for m in self.measures
        ])

    def _kernel_rows(self, p: torch.Tensor) -> torch.Tensor:
        """``[10, batch, head, rows]`` float32: ``KERNEL_OUTPUTS`` and the ties of each row's
        maximum (``KERNEL_TIES``) of every row of a whole CPU pattern ``p [batch, head, rows,
        key_pos]`` by the C kernel (``_stats_kernel.c``: each row read once, sums in float64
        rounded to float32 once). The (sentence, head) pairs
        are split between the intra-op threads (the kernel releases the GIL)."""
        if self._key_bits is None:  # [batch, key_pos] uint8: bit 0 [CLS], 1 [SEP], 2 punct.
            weights = torch.tensor([1, 2, 4], dtype=torch.float32)
            self._key_bits = (self.targets @ weights).to(torch.uint8).numpy()
        p = p.detach().contiguous()
        batch, heads, rows, keys = p.shape
        out = torch.empty(KERNEL_TIES + 1, batch, heads, rows, dtype=torch.float32)
        args = (p.numpy(), self._key_bits, self.first.numpy(), batch, heads, rows, keys)
        found = out.numpy()
        run_split(lambda first, stop: _stats_kernel.rows(*args, first, stop, found),
                  batch * heads)
        return out

    def key_of(self, measure: str, p: torch.Tensor, query: torch.Tensor) -> torch.Tensor:
        """``[batch, head]`` the key a measure's value on row ``query [batch, head]`` is about
        (the previous token for ``to_prev``, the most-attended [CLS] for ``to_cls``, ...)."""
        index = query[..., None, None].expand(-1, -1, 1, p.shape[-1])
        row = p.gather(2, index)[:, :, 0, :]  # [batch, head, key_pos]
        if measure == "to_prev":
            return (query - 1).clamp_min(0)
        if measure == "to_next":
            return (query + 1).clamp_max(p.shape[-1] - 1)
        if measure == "to_self":
            return query
        if measure == "sink":
            return self.first[:, None].expand_as(query)
        if measure in ("to_cls", "to_sep", "to_punct"):
            k = ("to_cls", "to_sep", "to_punct").index(measure)
            row = row * self.targets[:, None, :, k]
        elif measure == "distance":
            pos = torch.arange(p.shape[-1], device=p.device)
            row = row * (pos[None, None, :] - query[..., None]).abs()
        return row.argmax(-1)

    def keys_at(self, p: torch.Tensor, query: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
        """``[measure, head, k]``: ``key_of`` for every measure at once, on the query rows
        ``query [measure, head, k]`` of batch rows ``rows [measure, head, k]`` of ``p [batch,
        head, query_pos, key_pos]`` (only those rows read: one flat ``index_select`` and one
        argmax for the measures that pick their key by weight)."""
        n_heads, n = p.shape[1], p.shape[-1]
        fixed = {"to_prev": lambda i: (query[i] - 1).clamp_min(0),
                 "to_next": lambda i: (query[i] + 1).clamp_max(n - 1),
                 "to_self": lambda i: query[i],
                 "sink": lambda i: self.first[rows[i]]}
        weighed = [i for i, m in enumerate(self.measures) if m not in fixed]
        keys = [None] * len(self.measures)
        if weighed:
            at, of = query[weighed], rows[weighed]  # [measure', head, k]
            pos = torch.arange(n, device=p.device)
            heads = torch.arange(n_heads, device=p.device)[None, :, None]  # [1, head, 1]
            start = ((of * n_heads + heads) * n + at) * n  # [measure', head, k]
            index = (start[..., None] + pos).view(-1)
            cells = p.contiguous().view(-1).index_select(0, index).view(*at.shape, n)
            scale = []  # what each measure weighs its row by, [head, k, key_pos]
            for j, i in enumerate(weighed):
                measure = self.measures[i]
                if measure in ("to_cls", "to_sep", "to_punct"):
                    k = ("to_cls", "to_sep", "to_punct").index(measure)
                    scale.append(self.targets[..., k][of[j]])
                elif measure == "distance":
                    scale.append((pos - at[j][..., None]).abs().to(p.dtype))
                else:  # the row's own largest weight
                    scale.append(p.new_ones(1, 1, 1).expand_as(cells[j]))
            picked = (cells * torch.stack(scale)).argmax(-1)  # [measure', head, k]
            for j, i in enumerate(weighed):
                keys[i] = picked[j]
        for i, measure in enumerate(self.measures):
            if measure in fixed:
                keys[i] = fixed[measure](i)
        return torch.stack(keys)


class HeadStats(PerSentenceRows, HeadPatternAnalyzer):
    """Streaming token-level statistics per head (see the module docstring)."""

    name = "head_stats"
    reads_blocks = True
    state_fields = ("sums", "rows", "measure_rows", "sentences", "sentence_sums",
                    "sentence_rows")
    row_fields = ("sentence_sums", "sentence_rows")

    def __init__(
        self,
        n_layers: int,
        n_heads: int,
        cls_ids: set[int],
        sep_ids: set[int],
        punct_ids: set[int],
        heads_per_layer: list[int] | None = None,
        measures: tuple[str, ...] = MEASURES,
    ) -> None:
        self.reader = TokenMeasures(measures, cls_ids, sep_ids, punct_ids)
        self.measures = self.reader.measures
        self.set_heads(heads_per_layer, n_layers, n_heads)
        self.cls_ids, self.sep_ids, self.punct_ids = set(cls_ids), set(sep_ids), set(punct_ids)
        m = len(self.measures)
        self.sums = torch.zeros(m, n_layers, n_heads, dtype=torch.float64)
        self.rows = 0  # real, non-special query rows
        self.measure_rows = torch.zeros(m, dtype=torch.float64)  # rows each measure averages
        self.sentences: list[int] = []  # corpus index of every sentence seen
        self.sentence_sums: list[torch.Tensor] = []  # per batch [sentence, measure, layer, head]
        self.sentence_rows: list[torch.Tensor] = []  # per batch [sentence, measure] rows

    @classmethod
    def for_model(cls, model: HookedTransformer, tokenizer, **options) -> HeadStats:
        """The statistics this model and tokenizer can give (``measures_for``)."""
        cls_ids, sep_ids = special_id_sets(tokenizer)
        before, after = _special_layout(tokenizer)
        options.setdefault("measures", measures_for(model_is_causal(model), bool(before),
                                                    bool(after)))
        return super().for_model(model, cls_ids=cls_ids, sep_ids=sep_ids,
                                 punct_ids=punctuation_ids(tokenizer), **options)

    def row_width(self, field: str) -> tuple[int, ...]:
        if field == "sentence_sums":
            return (len(self.measures), self.n_layers, self.n_heads)
        return (len(self.measures),)

    def settings(self) -> dict:
        return {
            "n_layers": self.n_layers, "n_heads": self.n_heads,
            "heads_per_layer": self.heads_per_layer, "cls_ids": self.cls_ids,
            "sep_ids": self.sep_ids, "punct_ids": self.punct_ids, "measures": list(self.measures),
        }

    def begin_batch(self, batch: Batch) -> None:
        self.move_state(batch.attention_mask.device)
        reader = self.reader
        reader.prepare(batch)
        self.sentences += sentence_ids_of(batch, self.next_sentence_id())
        self.sentence_rows.append(reader.row_weight[:, :, 0, :].sum(-1).T)  # [sentence, measure]
        self._plain_rows = reader.rows.sum()
        # [sentence, measure, layer, head], float64: a sentence of thousands of rows sums
        # values up to its length (distance) without float32's rounding of large sums
        self._scratch = torch.zeros(batch.size, len(self.measures), self.n_layers,
                                    self.n_heads, dtype=torch.float64,
                                    device=batch.input_ids.device)
        self._held = HeldLayers()

    def update_block(self, batch: Batch, layer: int, block: PatternBlock,
                     cache: ActivationCache) -> None:
        per_row = self.reader.per_row(block)  # [measure, batch, head, rows]
        if block.is_whole:  # held, then weighed and summed for several layers at once
            if self._held.add(layer, per_row):
                self._fold_held()
            return
        weight = block.query_rows(self.reader.row_weight)  # [measure, batch, 1, rows]
        per_sentence = (per_row.double() * weight).sum(3)  # [measure, batch, head]
        self._scratch[:, :, layer, : block.n_heads] += per_sentence.transpose(0, 1)

    def _fold_held(self) -> None:
        """The held layers' rows ``[measure, batch, layer * head, query_pos]``, each (measure,
        sentence, head) summed over its own rows as per layer, into the scratch."""
        by_layer = self._scratch.permute(2, 0, 1, 3)  # [layer, batch, measure, head] (a view)
        for layers, (per_row,) in self._held.take(dims=(2,)):
            per_sentence = (per_row.double() * self.reader.row_weight).sum(3)  # [m, b, l * h]
            per_sentence = per_sentence.unflatten(2, (len(layers), -1))  # [m, b, layer, head]
            add_to_layers(by_layer, layers, per_sentence.permute(2, 1, 0, 3))

    def end_batch(self, batch: Batch) -> None:
        if self._held:
            self._fold_held()
        # the running sums and the per-sentence rows stay on the model's device (move_state)
        self.sums += self._scratch.sum(0)
        self.rows += int(self._plain_rows)  # one read per batch
        self.measure_rows += self.sentence_rows[-1].sum(0).to(self.measure_rows.dtype)
        self.sentence_sums.append(self._scratch)
        self._scratch = None

    def result(self) -> dict[str, pd.DataFrame]:
        means = (self.sums.cpu() / self.measure_rows.cpu().clamp_min(1)[:, None, None]).numpy()
        records = [
            {
                "layer": layer,
                "head": head,
                "measure": measure,
                "value": float(means[m, layer, head]),
                "level": "token",
            }
            for m, measure in enumerate(self.measures)
            for layer in range(self.n_layers)
            for head in range(self.heads_per_layer[layer])  # only heads the model has
        ]
        return {"head_stats": pd.DataFrame.from_records(records)}


def _special_layout(tokenizer) -> tuple[list[str], list[str]]:
    """The special tokens the tokenizer adds before and after a text (both, when unknown)."""
    try:
        return tokenizer.special_layout
    except (AttributeError, DataError):  # no probe-able layout: assume BERT's
        return ["[CLS]"], ["[SEP]"]
