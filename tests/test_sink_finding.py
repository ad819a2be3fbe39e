"""The attention-sink finding names the first token once: as [CLS] where the first token is
[CLS] (BERT), as "the first token" where there is no [CLS] row (causal models)."""

from __future__ import annotations

import pandas as pd

from attnlens.measures.heads.findings import focus_and_sinks


def _stats(measures: dict[str, float]) -> pd.DataFrame:
    rows = [{"layer": layer, "head": head, "measure": m, "value": v}
            for m, v in {"confidence": 0.5, "entropy": 1.0, **measures}.items()
            for layer in range(2) for head in range(2)]
    return pd.DataFrame(rows)


def _texts(stats: pd.DataFrame) -> list[str]:
    return [f.text() for f in focus_and_sinks({"head_stats": stats})]


def test_bert_says_cls_once() -> None:
    texts = _texts(_stats({"to_cls": 0.58, "sink": 0.6}))
    assert sum("Attention parks on" in t for t in texts) == 1
    assert any("parks on [CLS]" in t for t in texts)


def test_a_causal_model_says_the_first_token() -> None:
    texts = _texts(_stats({"sink": 0.6}))
    assert any("parks on the first token in layer 0" in t for t in texts)
