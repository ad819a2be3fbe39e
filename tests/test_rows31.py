"""rows31 (issue 29): ``WordAttentionContext`` builds the token -> word pooling once per
batch and head count (``data.words.word_pooling``) and gives, bit for bit, the word
attention main computed at every layer (main's code written out below)."""

from __future__ import annotations

import pytest
import torch

from attnlens.data import words as words_module
from attnlens.data.corpus import load_corpus
from attnlens.data.words import (
    WordAttention,
    WordAttentionContext,
    assignment_matrix,
    word_attention,
)


def main_word_attention(pattern, word_ids, special_mask=None, n_words=None) -> WordAttention:
    """``word_attention`` as on main (ae55b62): the pooling rebuilt at every call and
    ``A_mean`` broadcast over the heads by the product."""
    if n_words is None:
        n_words = int(word_ids.max().item()) + 1 if word_ids.numel() else 0
    n_words = max(n_words, 0)
    assign = assignment_matrix(word_ids, n_words)
    tokens_per_word = assign.sum(-1)
    valid = tokens_per_word > 0
    from_mean = assign / tokens_per_word.clamp_min(1)[..., None]
    p = pattern.to(torch.float32)
    rows = from_mean[:, None] @ p
    n_batch, n_heads, _, n_keys = rows.shape
    stacked = rows.reshape(n_batch, n_heads * n_words, n_keys)
    weights = (stacked @ assign.transpose(1, 2)).view(n_batch, n_heads, n_words, n_words)
    return WordAttention(weights, valid, rows, special_mask)


@pytest.fixture(scope="module")
def batches_and_patterns(minilm):
    """Two batches of the sample treebank and every layer's pattern (MiniLM)."""
    model, tokenizer = minilm
    batches = load_corpus(text=None, treebank=None).batches(tokenizer, batch_size=8,
                                                            max_length=64)[:2]
    found = []
    with torch.no_grad():
        for batch in batches:
            _, cache = model.run_with_cache(
                **batch.model_inputs(), names_filter=lambda n: n.endswith("hook_pattern"))
            found.append((batch, [cache[f"blocks.{i}.attn.hook_pattern"]
                                  for i in range(model.cfg.n_layers)]))
    return found


def assert_same(found: WordAttention, expected: WordAttention) -> None:
    assert torch.equal(found.weights, expected.weights)  # bit for bit
    assert torch.equal(found.valid, expected.valid)
    assert torch.equal(found.to_special, expected.to_special)


def test_context_pools_once_per_batch_with_mains_numbers(batches_and_patterns, monkeypatch):
    built = []
    real = words_module.word_pooling
    monkeypatch.setattr(words_module, "word_pooling",
                        lambda *a: built.append(a[1:]) or real(*a))
    context = WordAttentionContext()
    for batch, patterns in batches_and_patterns:
        n_words = max(batch.extra["n_words"])
        for layer, pattern in enumerate(patterns):
            assert_same(context.get(batch, layer, pattern),
                        main_word_attention(pattern, batch.word_ids, batch.special_mask,
                                            n_words))
            # fewer heads (a pruned layer): its own pooling, the same numbers
            fewer = pattern[:, :5]
            assert_same(context.get(batch, layer, fewer),
                        main_word_attention(fewer, batch.word_ids, batch.special_mask,
                                            n_words))
        context.clear()
    heads = batches_and_patterns[0][1][0].shape[1]
    n_layers = len(batches_and_patterns[0][1])
    # one pooling per batch and head count change (12 heads, then 5, alternating by layer)
    assert len(built) == 2 * 2 * n_layers
    assert {h for _, h in built} == {heads, 5}


def test_a_new_batch_gets_its_own_pooling(batches_and_patterns):
    """Without ``clear`` between batches, the second batch's words are pooled anew (the
    pooling is keyed by the batch itself, not its shape)."""
    context = WordAttentionContext()
    for batch, patterns in batches_and_patterns:
        n_words = max(batch.extra["n_words"])
        assert_same(context.get(batch, 0, patterns[0]),
                    main_word_attention(patterns[0], batch.word_ids, batch.special_mask,
                                        n_words))


def test_word_attention_without_a_pooling_is_mains(batches_and_patterns):
    batch, patterns = batches_and_patterns[0]
    for pattern in patterns:
        assert_same(word_attention(pattern, batch.word_ids, batch.special_mask),
                    main_word_attention(pattern, batch.word_ids, batch.special_mask))


def test_a_batch_of_the_same_shape_with_other_words_is_pooled_anew(batches_and_patterns):
    import dataclasses

    batch, patterns = batches_and_patterns[0]
    merged = batch.word_ids.clone()
    merged[merged == 1] = 0  # words 0 and 1 made one word: same shape, other pooling
    other = dataclasses.replace(batch, word_ids=merged)
    context = WordAttentionContext()
    n_words = max(batch.extra["n_words"])
    context.get(batch, 0, patterns[0])
    assert_same(context.get(other, 0, patterns[0]),
                main_word_attention(patterns[0], merged, batch.special_mask, n_words))
