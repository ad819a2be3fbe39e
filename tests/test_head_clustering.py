"""Behaviour classes (vertical, diagonal, broad) and JS head clustering on hand-built patterns."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from attnlens.data.batch import Batch
from attnlens.hooks import ActivationCache
from attnlens.measures.heads.behaviour import HeadBehaviour, broad_threshold
from attnlens.measures.heads.clustering import HeadClustering, classical_mds
from attnlens.stats.bootstrap import Inference

CLS, SEP = 101, 102


def batch_of(lengths: list[int], start: int = 0) -> Batch:
    """Sentences of ``lengths`` real tokens ([CLS] words [SEP]), padded to the longest."""
    width = max(lengths)
    ids = torch.zeros(len(lengths), width, dtype=torch.long)
    for b, n in enumerate(lengths):
        ids[b, :n] = torch.tensor([CLS, *range(1000, 1000 + n - 2), SEP])
    return Batch(input_ids=ids, attention_mask=(ids != 0).long(),
                 special_mask=(ids == CLS) | (ids == SEP),
                 extra={"index": list(range(start, start + len(lengths)))})


def cache(*layers: torch.Tensor) -> ActivationCache:
    return ActivationCache({f"blocks.{i}.attn.hook_pattern": p for i, p in enumerate(layers)})


def masked_softmax(scores: torch.Tensor, batch: Batch) -> torch.Tensor:
    """Softmax over real keys only: ``[batch, head, query_pos, key_pos]``."""
    keep = batch.attention_mask.bool()[:, None, None, :]
    return torch.softmax(scores.masked_fill(~keep, -torch.inf), -1)


def test_a_head_attending_only_to_cls_is_entirely_vertical():
    batch = batch_of([6, 4])
    p = torch.zeros(2, 3, 6, 6)
    p[:, 0, :, 0] = 1.0  # head 0: every row on [CLS]
    for q in range(6):  # head 1: the previous token ([CLS] for the first word)
        p[:, 1, q, max(q - 1, 0)] = 1.0
    p[:, 2] = masked_softmax(torch.zeros(2, 1, 6, 6), batch)[:, 0]  # head 2: uniform
    behaviour = HeadBehaviour(1, 3)
    behaviour.update(batch, cache(p))
    classes = behaviour.result()["head_behaviour_classes"].set_index("head")
    assert classes.loc[0, ["vertical", "diagonal", "broad"]].tolist() == [1.0, 0.0, 0.0]
    assert classes.loc[0, "dominant"] == "vertical"
    # previous token: the first word of each sentence looks at [CLS] (vertical), the others
    # at a word one back (diagonal): rows 4 + 2 = 6 words, 2 of them first words
    assert classes.loc[1, "vertical"] == pytest.approx(2 / 6)
    assert classes.loc[1, "diagonal"] == pytest.approx(4 / 6)
    # uniform rows have the largest entropy ln n, above tau(n) = 0.783 ln n: all broad
    assert classes.loc[2, "broad"] == 1.0 and classes.loc[2, "dominant"] == "broad"


def test_broad_threshold_scales_clarks_value_with_length():
    assert broad_threshold(128).item() == pytest.approx(3.8)
    assert broad_threshold(12).item() == pytest.approx(3.8 * math.log(12) / math.log(128))
    # a row whose entropy sits just under / over tau(n) for n = 6 real tokens
    batch = batch_of([6])
    tau = broad_threshold(6).item()
    rows = []
    for target in (tau - 0.02, tau + 0.02):
        logits = torch.zeros(6)
        lo, hi = 0.0, 20.0  # bisect the peak logit for the target entropy
        for _ in range(60):
            mid = (lo + hi) / 2
            logits[1] = mid
            entropy = float(torch.special.entr(torch.softmax(logits, 0)).sum())
            lo, hi = (mid, hi) if entropy > target else (lo, mid)
        rows.append(torch.softmax(logits, 0))
    p = torch.stack([r.expand(6, 6) for r in rows])[None]  # [1, head 2, query, key]
    behaviour = HeadBehaviour(1, 2)
    behaviour.update(batch, cache(p))
    classes = behaviour.result()["head_behaviour_classes"]
    assert classes["broad"].tolist() == [0.0, 1.0]


def test_identical_heads_have_zero_js_divergence_even_across_layers():
    torch.manual_seed(0)
    batch = batch_of([7, 5])
    first = masked_softmax(3 * torch.randn(2, 3, 7, 7), batch)
    second = masked_softmax(3 * torch.randn(2, 2, 7, 7), batch)
    second[:, 1] = first[:, 2]  # layer 1 head 1 copies layer 0 head 2
    first[:, 1] = first[:, 0]  # layer 0 head 1 copies head 0
    clusters = HeadClustering(2, 3, heads_per_layer=[3, 2])
    clusters.update(batch, cache(first, second))
    js = clusters.mean_divergence()
    # identical rows: H((p + p) / 2) - H(p) is a sum of the same fp32 terms, so exactly 0
    assert js[0, 1].item() == 0.0 and js[2, 4].item() == 0.0
    assert torch.all(js.diagonal() == 0)
    assert (js[0, 2] > 0.01).item() and torch.allclose(js, js.T, rtol=0, atol=0)
    assert (js <= math.log(2) + 1e-6).all()  # JS is at most ln 2 (+ fp32 rounding of sums)
    table = clusters.result()["head_distances"]
    assert len(table) == 5 * 4 // 2  # 5 existing heads, no phantom head 2 in layer 1


def test_js_divergence_matches_a_direct_computation():
    torch.manual_seed(1)
    batch = batch_of([6, 6, 4])
    p = masked_softmax(2 * torch.randn(3, 2, 6, 6), batch)
    clusters = HeadClustering(1, 2, chunk_elements=5)  # several row chunks
    clusters.update(batch, cache(p))
    expected, rows = 0.0, 0
    for b, n in enumerate([6, 6, 4]):
        for q in range(1, n - 1):  # real, non-special query rows
            a, c = p[b, 0, q, :n].double(), p[b, 1, q, :n].double()
            m = (a + c) / 2
            expected += float((torch.special.entr(m) - torch.special.entr(a) / 2
                               - torch.special.entr(c) / 2).sum())
            rows += 1
    # fp32 terms (<= 0.37 each, 6 per row) summed over 12 rows: well inside 1e-6
    assert clusters.mean_divergence()[0, 1].item() == pytest.approx(expected / rows, abs=1e-6)


def test_clustering_merge_and_state_round_trip():
    torch.manual_seed(2)
    batches = [batch_of([5, 4]), batch_of([6, 3], start=2)]
    patterns = [masked_softmax(torch.randn(2, 2, b.input_ids.shape[1], b.input_ids.shape[1]),
                               b) for b in batches]
    whole = HeadClustering(1, 2)
    parts = [HeadClustering(1, 2), HeadClustering(1, 2)]
    for b, p, part in zip(batches, patterns, parts, strict=True):
        whole.update(b, cache(p))
        part.update(b, cache(p))
    merged = parts[0].merge(parts[1])
    # Same batches, same process and kernels: each batch adds bitwise the same float64 JS
    # sums; whole adds them as (0 + t1) + t2, the merge as t1 + t2, at most one float64
    # rounding apart (1.1e-16 relative; measured: equal). rtol 1e-12 leaves 4 orders of
    # magnitude; atol 0, so allclose's default atol (1e-8, larger than these JS means of
    # at most ln 2) does not hide a difference.
    assert torch.allclose(merged.mean_divergence(), whole.mean_divergence(), rtol=1e-12,
                          atol=0.0)
    restored = HeadClustering(1, 2)
    restored.load_state_dict(whole.state_dict())
    assert torch.equal(restored.mean_divergence(), whole.mean_divergence())
    for pooling in ("token", "sentence"):
        one = HeadClustering(1, 2, inference=Inference(pooling=pooling))
        for b, p in zip(batches, patterns, strict=True):
            one.update(b, cache(p))
        assert one.result()["head_distances"]["pooling"].unique().tolist() == [pooling]


def test_classical_mds_recovers_a_known_configuration():
    points = np.array([[0.0, 0.0], [3.0, 0.0], [0.0, 4.0], [3.0, 4.0]])
    squared = ((points[:, None] - points[None]) ** 2).sum(-1)
    coords, explained = classical_mds(squared)
    recovered = ((coords[:, None] - coords[None]) ** 2).sum(-1)
    np.testing.assert_allclose(recovered, squared, atol=1e-9)  # float64 eigh on 4 x 4
    assert explained == pytest.approx(1.0)
