"""The words C kernel (``attnlens/data/_words_kernel.c``): word pooling of whole CPU patterns
and the syntactic and rare-word heads' credits, against the torch path (kept for GPUs and
query blocks).

The kernel repeats the torch path's float32 operations in their order (the rows' fused
multiply-adds as MKL's float32 matmul computes them, the columns' adds token by token), so
its hits must equal the torch path's bit for bit. On patterns of multiples of 1/64 and
words of 1, 2 or 4 tokens every sum and mean is exact, whatever order or kernel set adds
them: the kernel must give the torch path's exact hits on every CPU and kernel set, with
ties everywhere. On real MiniLM attention the word matrices equal the torch path's where
its matmul uses FMA (MKL's default code path; its generic path, ``MKL_CBWR=COMPATIBLE``,
rounds a few sums differently): they are checked against a float64 pooling to float32
rounding, and the hits against the torch path's.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

import attnlens.data.words as words_module
from attnlens.data.batch import Batch
from attnlens.data.conllu import ROOT, DepSentence, sample_treebank
from attnlens.data.rarity import WordRarity
from attnlens.data.words import WordAttentionContext, word_attention
from attnlens.hooks import ActivationCache
from attnlens.measures.heads.rare_words import RareWordHeads
from attnlens.measures.heads.syntactic import SyntacticHeads
from tests.kernel_builds import (
    LEVEL_BUILDS,
    build_kernel,
    needs_builds,
    skip_unless_cpu_has,
)

KERNEL = words_module._words_kernel
SOURCE = Path(words_module.__file__).with_name("_words_kernel.c")
pytestmark = pytest.mark.skipif(KERNEL is None, reason="the words kernel is not built")
RARITY = WordRarity.from_counts({"the": 50, "a": 40, "dog": 3, "cat": 2, "zebra": 1})


def token_batch(sentences: list[DepSentence], tokens: list[list[int]],
                n_words: list[int] | None = None) -> Batch:
    """[CLS] words' tokens [SEP] [PAD]..: ``tokens[b][i]`` tokens for word i (0: a word
    without a token of its own, listed in ``unaligned``); ``n_words``: words kept."""
    n_words = n_words or [len(s) for s in sentences]
    lengths = [sum(t[:k]) + 2 for t, k in zip(tokens, n_words, strict=True)]
    length = max(lengths)
    word_ids = torch.full((len(sentences), length), -1)
    mask = torch.zeros(len(sentences), length, dtype=torch.long)
    special = torch.zeros(len(sentences), length, dtype=torch.bool)
    for b, (counts, kept) in enumerate(zip(tokens, n_words, strict=True)):
        ids = [w for w in range(kept) for _ in range(counts[w])]
        word_ids[b, 1 : 1 + len(ids)] = torch.tensor(ids, dtype=torch.long)
        mask[b, : lengths[b]] = 1
        special[b, [0, lengths[b] - 1]] = True
    return Batch(
        input_ids=torch.where(mask.bool(), 1000, 0), attention_mask=mask, word_ids=word_ids,
        words=[list(s.words) for s in sentences], special_mask=special,
        extra={"heads": [s.heads for s in sentences],
               "relations": [s.relations for s in sentences], "n_words": n_words,
               "unaligned": [[i for i, c in enumerate(t[:k]) if c == 0]
                             for t, k in zip(tokens, n_words, strict=True)],
               "index": list(range(len(sentences)))})


def dyadic_data(seed: int, n_heads: int = 3, n_layers: int = 2):
    """Padded batches of sample-treebank sentences, words of 1, 2 or 4 tokens (some without
    a token, some cut), and patterns of multiples of 1/64 (a tenth of the rows all 0): every
    mean and sum exact, ties everywhere."""
    gen = np.random.default_rng(seed)
    sentences = sample_treebank()[:20]
    out = []
    for start in range(0, len(sentences), 7):
        chunk = sentences[start : start + 7]
        tokens = [[int(gen.choice([1, 1, 1, 2, 4, 0] if i % 5 else [1, 2, 4]))
                   for i in range(len(s))] for s in chunk]
        n_words = [len(s) - (b == 1) for b, s in enumerate(chunk)]  # one sentence cut
        batch = token_batch(chunk, tokens, n_words)
        length = batch.input_ids.shape[1]
        layers = {}
        for layer in range(n_layers):
            p = gen.integers(0, 8, size=(len(chunk), n_heads, length, length)) / 64
            p[gen.random(p.shape[:3]) < 0.1] = 0
            layers[f"blocks.{layer}.attn.hook_pattern"] = torch.tensor(p, dtype=torch.float32)
        out.append((batch, ActivationCache(layers)))
    return out


def fed(data, kernel, rare_self="include", n_heads=3, n_layers=2):
    """Syntactic and rare-word heads over ``data`` (shared word rows), ``kernel`` or None."""
    saved = words_module._words_kernel
    words_module._words_kernel = kernel
    try:
        words = WordAttentionContext()
        found = [SyntacticHeads(n_layers, n_heads, min_examples=1, words=words),
                 RareWordHeads(n_layers, n_heads, rarity=RARITY, rare_self=rare_self,
                               words=words)]
        for batch, cache in data:
            for analyzer in found:
                analyzer.update(batch, cache)
    finally:
        words_module._words_kernel = saved
    return found


def hits(found) -> tuple[torch.Tensor, torch.Tensor]:
    syntactic, rare = found
    return torch.cat(syntactic.pair_hits), torch.cat(rare.sentence_hits)


@pytest.mark.parametrize("rare_self", ["include", "exclude"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_exact_inputs_give_the_torch_paths_hits_bit_for_bit(seed, rare_self):
    data = dyadic_data(seed)
    kernel, torch_path = hits(fed(data, KERNEL, rare_self)), hits(fed(data, None, rare_self))
    for mine, theirs in zip(kernel, torch_path, strict=True):
        assert torch.equal(mine, theirs)
    assert (torch_path[0] % 1 != 0).any()  # ties shared the credit (fractions)


def test_exact_inputs_pool_to_the_torch_paths_word_rows():
    for batch, cache in dyadic_data(3):
        pattern = cache["blocks.0.attn.hook_pattern"]
        context = WordAttentionContext()
        mine = context.kernel_weights(batch, 0, pattern)
        theirs = word_attention(pattern, batch.word_ids, n_words=max(batch.extra["n_words"]))
        assert torch.equal(mine, theirs.weights)
        assert context.kernel_weights(batch, 0, pattern) is mine  # once per layer


def test_known_answers_of_a_hand_built_sentence():
    # words the(1 token) zebra(2) dog(1); the -> zebra (nsubj), dog -> zebra (obj)
    sentence = DepSentence(("the", "zebra", "dog"), (1, ROOT, 1), ("nsubj", "root", "obj"),
                           ("X",) * 3)
    batch = token_batch([sentence], [[1, 2, 1]])
    p = torch.zeros(1, 1, 6, 6)  # [CLS] the zebra zebra dog [SEP]
    p[0, 0, 1] = torch.tensor([0, 0.25, 0.125, 0.125, 0.25, 0.25])  # the: 1/4 each word
    p[0, 0, 2] = torch.tensor([0, 0.5, 0.25, 0, 0.25, 0])  # zebra, mean of two rows:
    p[0, 0, 3] = torch.tensor([0, 0.5, 0, 0.25, 0.25, 0])  # the 1/2, zebra 1/4, dog 1/4
    p[0, 0, 4] = torch.tensor([0, 0.125, 0.25, 0.25, 0.125, 0.25])  # dog: zebra 1/2
    data = [(batch, ActivationCache({"blocks.0.attn.hook_pattern": p}))]
    for kernel in (KERNEL, None):
        syntactic, rare = fed(data, kernel, n_heads=1, n_layers=1)
        by_relation = dict(zip(syntactic.pair_relation, syntactic.pair_hits[0][:, :, 0, 0],
                               strict=True))
        # the: its maximum (itself left out) tied zebra / dog, zebra's row tops at the,
        # and the's column tops at zebra; dog: its row tops at zebra, zebra's does not at
        # dog, and dog's column is tied between the and zebra
        assert by_relation["nsubj"].tolist() == [0.5, 1.0, 1.0]
        assert by_relation["obj"].tolist() == [1.0, 0.0, 0.5]
        # rarest: zebra; the's row (itself included) is a three-way tie, dog's tops at zebra
        rarest, two_rarest = rare.sentence_hits[0][0, :, 0, 0].tolist()
        assert rarest == pytest.approx(1 / 3 + 1, abs=1e-7)
        assert two_rarest == pytest.approx(2 / 3, abs=1e-7)  # the: zebra and dog, 2 of 3
        excluded = fed(data, kernel, rare_self="exclude", n_heads=1, n_layers=1)[1]
        assert excluded.sentence_hits[0][0, :, 0, 0].tolist() == [1.5, 1.0]


@pytest.fixture(scope="module")
def minilm_data(minilm):
    model, tokenizer = minilm
    from attnlens.data.corpus import load_corpus

    batches = load_corpus(text=None, treebank=None).batches(tokenizer, batch_size=16,
                                                             max_length=64)[:4]
    with torch.no_grad():
        caches = [model.run_with_cache(**b.model_inputs())[1] for b in batches]
    return model, [(b, ActivationCache({k: v for k, v in c.items() if k.endswith("pattern")}))
                   for b, c in zip(batches, caches, strict=True)]


def test_minilm_word_rows_agree_with_a_float64_pooling(minilm_data):
    """Each word entry is a float32 sum of at most (tokens of the row) x (tokens of the
    column) terms, each rounded once; with at most 8 tokens a word and entries at most 1,
    that is within 16 x 2^-24 < 1e-6 of the float64 pooling."""
    _, data = minilm_data
    for batch, cache in data:
        pattern = cache["pattern", 3]
        n_words = max(batch.extra["n_words"])
        mine = WordAttentionContext().kernel_weights(batch, 3, pattern)
        assign = (batch.word_ids[:, None, :] == torch.arange(n_words)[None, :, None]).double()
        tokens = assign.sum(-1)
        assert tokens.max() <= 8
        mean = assign / tokens.clamp_min(1)[..., None]  # [batch, word, pos]
        reference = mean[:, None] @ pattern.double() @ assign[:, None].transpose(-1, -2)
        torch.testing.assert_close(mine.double(), reference, rtol=0, atol=1e-6)


def test_minilm_hits_equal_the_torch_paths(minilm_data):
    model, data = minilm_data
    n_layers, n_heads = model.cfg.n_layers, model.cfg.n_heads
    kernel = hits(fed(data, KERNEL, n_heads=n_heads, n_layers=n_layers))
    torch_path = hits(fed(data, None, n_heads=n_heads, n_layers=n_layers))
    for mine, theirs in zip(kernel, torch_path, strict=True):
        assert torch.equal(mine, theirs)


def test_split_between_threads_gives_the_same_bits():
    from attnlens.stream import threads

    data = dyadic_data(4)
    results, split = [], threads.run_split
    modules = (words_module, __import__("attnlens.measures.heads.words_kernel",
                                        fromlist=["run_split"]))
    for count in (1, 2, 3):
        try:
            for module in modules:
                module.run_split = lambda work, n, _c=count: split(work, n, threads=_c)
            results.append(hits(fed(data, KERNEL)))
        finally:
            for module in modules:
                module.run_split = split
    for other in results[1:]:
        for mine, theirs in zip(results[0], other, strict=True):
            assert torch.equal(mine, theirs)


def test_wrong_sizes_are_refused():
    i32, f32 = np.int32, np.float32
    starts = np.array([[0, 1, 3]], i32)  # two words: token 1, tokens 2 and 3
    positions = np.array([[1, 2, 3, 0]], i32)
    W = np.zeros((1, 1, 2, 2), f32)
    KERNEL.pool(np.zeros((1, 1, 4, 4), f32), starts, positions, 1, 1, 4, 2, 0, 1, W)
    with pytest.raises(ValueError, match="pattern holds"):
        KERNEL.pool(np.zeros((1, 1, 4, 3), f32), starts, positions, 1, 1, 4, 2, 0, 1, W)
    with pytest.raises(ValueError, match="word tokens out of range"):
        KERNEL.pool(np.zeros((1, 1, 4, 4), f32), starts, np.array([[1, 2, 9, 0]], i32),
                    1, 1, 4, 2, 0, 1, W)
    with pytest.raises(ValueError, match="pair range"):
        KERNEL.pool(np.zeros((1, 1, 4, 4), f32), starts, positions, 1, 1, 4, 2, 0, 2, W)
    out = np.zeros((1, 3, 1), f32)
    arcs, arc_start = np.array([[0, 0, 1, 0]], i32), np.array([0, 1], i32)
    KERNEL.syntactic(W, starts, arcs, arc_start, 1, 1, 2, 0, 1, out)
    with pytest.raises(ValueError, match="items"):  # a word past the sentence's words
        KERNEL.syntactic(W, starts, np.array([[0, 0, 2, 0]], i32), arc_start, 1, 1, 2, 0, 1,
                         out)
    with pytest.raises(ValueError, match="items"):  # a pair past the output
        KERNEL.syntactic(W, starts, np.array([[0, 0, 1, 1]], i32), arc_start, 1, 1, 2, 0, 1,
                         out)
    rows = np.array([[0, 0, 0, 1, 1, 0]], i32)
    KERNEL.rare(W, starts, rows, arc_start, 6, 0, 1, 1, 2, 0, 1, np.zeros((2, 1), f32))
    with pytest.raises(ValueError, match="items"):  # more targets than the row holds
        KERNEL.rare(W, starts, np.array([[0, 0, 0, 3, 1, 0]], i32), arc_start, 6, 0, 1, 1,
                    2, 0, 1, np.zeros((2, 1), f32))


BUILDS = LEVEL_BUILDS


@needs_builds
@pytest.mark.parametrize("name", list(BUILDS))
def test_each_build_gives_the_installed_bits(tmp_path, minilm_data, name):
    """Each x86-64 level built alone (``KERNEL_NO_CLONES``; the installed build holds all
    three and runs the CPU's): fmaf rounds once on every build (an instruction, or libm's
    exact fmaf on plain x86-64) and nothing else is contracted or reordered."""
    flags, needs = BUILDS[name]
    skip_unless_cpu_has(needs)
    module = build_kernel(SOURCE, tmp_path, flags)
    model, data = minilm_data
    shape = {"n_heads": model.cfg.n_heads, "n_layers": model.cfg.n_layers}
    for mine, theirs in zip(hits(fed(data, module, **shape)), hits(fed(data, KERNEL, **shape)),
                            strict=True):
        assert torch.equal(mine, theirs)
    batch, cache = data[0]
    built = words_module._words_kernel
    try:
        words_module._words_kernel = module
        weights = WordAttentionContext().kernel_weights(batch, 0, cache["pattern", 0])
    finally:
        words_module._words_kernel = built
    assert torch.equal(weights, WordAttentionContext().kernel_weights(batch, 0,
                                                                      cache["pattern", 0]))
