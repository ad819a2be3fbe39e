"""HeadStats on hand-built patterns whose statistics are known; atomic writers."""

from __future__ import annotations

import math
import os
import stat

import pandas as pd
import pytest
import torch

from attnlens.hooks import ActivationCache
from attnlens.measures.heads.head_stats import HeadStats
from attnlens.runs.io import atomic_open, write_table
from attnlens.stream.base import Batch

CLS, SEP = 101, 102


def batch_and_cache(pattern: torch.Tensor, ids: torch.Tensor, mask: torch.Tensor):
    special = torch.isin(ids, torch.tensor([CLS, SEP]))
    batch = Batch(input_ids=ids, attention_mask=mask, special_mask=special)
    return batch, ActivationCache({"blocks.0.attn.hook_pattern": pattern})


def values(stats: HeadStats) -> dict[str, float]:
    table = stats.result()["head_stats"]
    return dict(
        zip(table["measure"] + "." + table["head"].astype(str), table["value"], strict=True)
    )


def test_known_patterns_give_known_statistics() -> None:
    # One sentence: [CLS] a b c [SEP] <pad>; head 0 looks at [CLS], head 1 uniform over the
    # 5 real tokens, head 2 looks one token back.
    ids = torch.tensor([[CLS, 5, 6, 7, SEP, 0]])
    mask = torch.tensor([[1, 1, 1, 1, 1, 0]])
    p = torch.zeros(1, 3, 6, 6)
    p[0, 0, :, 0] = 1.0
    p[0, 1, :, :5] = 0.2
    for i in range(6):
        p[0, 2, i, max(i - 1, 0)] = 1.0
    stats = HeadStats(n_layers=1, n_heads=3, cls_ids={CLS}, sep_ids={SEP}, punct_ids={7})
    stats.update(*batch_and_cache(p, ids, mask))
    v = values(stats)
    assert stats.rows == 3  # a, b, c: special rows and padding excluded
    # Default rel_tol 1e-9 (abs 0) below: exact, the patterns are 0/1 and sums of them.
    assert math.isclose(v["to_cls.0"], 1.0) and math.isclose(v["confidence.0"], 1.0)
    assert math.isclose(v["entropy.0"], 0.0, abs_tol=1e-6)  # -1 log 1 = 0 exactly (measured 0)
    assert math.isclose(v["distance.0"], (1 + 2 + 3) / 3)
    # fp32 entr(0.2) x 5 with the kernel set's vectorised log (a few ulps of 0.32 each) and fp32
    # sums, against float64 log 5: 5 x 3 x 3e-8 / 1.6 ~ 3e-7 relative -> 1e-5 (measured 1.9e-8)
    assert math.isclose(v["entropy.1"], math.log(5), rel_tol=1e-5)
    # single fp32 0.2s averaged: 0.2f is 1.5e-8 relative off 0.2 (measured 4e-8 of rel_tol)
    assert math.isclose(v["to_sep.1"], 0.2, rel_tol=1e-6)
    assert math.isclose(v["confidence.1"], 0.2, rel_tol=1e-6)
    assert math.isclose(v["distance.2"], 1.0)
    assert math.isclose(v["to_cls.2"], 1 / 3)  # only token a's previous token is [CLS]
    assert math.isclose(v["to_prev.2"], 1.0) and math.isclose(v["to_self.2"], 0.0)
    assert math.isclose(v["to_punct.1"], 0.2, rel_tol=1e-6)  # token 7 counts as punctuation


def test_merge_of_two_halves_equals_the_whole() -> None:
    torch.manual_seed(1)
    ids = torch.tensor([[CLS, 5, 6, 7, SEP], [CLS, 8, 9, SEP, 0]])
    mask = (ids != 0).long()
    p = torch.softmax(torch.randn(2, 4, 5, 5), dim=-1)
    whole = HeadStats(1, 4, {CLS}, {SEP}, {7})
    whole.update(*batch_and_cache(p, ids, mask))
    first, second = HeadStats(1, 4, {CLS}, {SEP}, {7}), HeadStats(1, 4, {CLS}, {SEP}, {7})
    first.update(*batch_and_cache(p[:1], ids[:1], mask[:1]))
    second.update(*batch_and_cache(p[1:], ids[1:], mask[1:]))
    merged = first.merge(second)
    # fp32 per-batch totals of <= 3 rows of O(1) shares, regrouped: ~1e-7 relative << 1e-5
    assert torch.allclose(merged.sums, whole.sums) and merged.rows == whole.rows


def test_atomic_writes_leave_no_temporary_files_and_normal_permissions(tmp_path) -> None:
    paths = write_table(pd.DataFrame({"layer": [0], "value": [0.5]}), tmp_path, "t")
    assert [p.name for p in paths] == ["t.csv", "t.md"]
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(paths[0].stat().st_mode) == 0o666 & ~umask
    with pytest.raises(RuntimeError), atomic_open(tmp_path / "half.csv") as handle:
        handle.write("layer,value\n0,")
        raise RuntimeError("interrupted")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.csv", "t.md"]


def test_structurally_pruned_model_lists_only_existing_heads() -> None:
    """No phantom rows for heads a layer no longer has (issue 13)."""
    from attnlens.data.batch import Batch
    from attnlens.model import HookedTransformer, TransformerConfig
    from attnlens.stream.runner import run_analyzers

    torch.manual_seed(0)
    cfg = TransformerConfig(d_model=16, n_layers=3, n_heads=4, d_mlp=32, vocab_size=30,
                            n_ctx=16, heads_per_layer=[4, 1, 3])
    model = HookedTransformer(cfg).eval()
    stats = HeadStats(3, 4, {1}, {2}, {7}, heads_per_layer=model.heads_per_layer)
    ids = torch.randint(3, 30, (2, 6))
    ids[:, 0], ids[:, -1] = 1, 2
    run_analyzers(model, [Batch(input_ids=ids, attention_mask=torch.ones_like(ids))], [stats],
                  show_progress=False)
    table = stats.result()["head_stats"]
    per_measure = table.groupby("measure").size()
    assert (per_measure == 4 + 1 + 3).all()
    assert sorted(table[table["layer"] == 1]["head"].unique()) == [0]
    assert table["value"].notna().all()
