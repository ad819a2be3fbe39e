"""The report's null-model pass (``--null random-init``) and the language-model heads: the
head-roles section's null twin runs on a random copy of the model, and must neither compute
the measure on that copy nor let the real report use it (the measure's result is computed
once per model and shared between the two sections)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from attnlens.data.corpus import Corpus
from attnlens.measures.heads.section import HeadRolesSection
from attnlens.measures.lm_heads.run import LmHeads
from attnlens.measures.lm_heads.section import LmHeadsSection
from attnlens.measures.lm_heads.settings import LmHeadsSettings
from attnlens.report.analyze import analyze
from attnlens.report.null_run import NullOptions
from attnlens.stats.bootstrap import Inference
from tests.lm_heads_toys import INDUCTION_HEAD, ORDINARY, toy_model, toy_tokenizer

INFERENCE = Inference(bootstrap=50, seed=0)
SETTINGS = dict(probe_sequences=40, probe_length=10, window=4, sink_tokens=1, controls=2)


def _texts(n: int = 40, words: int = 19) -> list[str]:
    """Sentences of random toy words ("t5 t17 ..."), each a word of one token."""
    rng = np.random.default_rng(3)
    return [" ".join(f"t{i}" for i in rng.choice(ORDINARY, words)) for _ in range(n)]


def _report(out: Path, null: NullOptions) -> dict[str, pd.DataFrame]:
    model, tokenizer = toy_model(), toy_tokenizer()
    lm = LmHeadsSection(LmHeads(LmHeadsSettings(**SETTINGS).check(), INFERENCE))
    sections = [HeadRolesSection(inference=INFERENCE, lm=lm, examples=False), lm]
    batches = Corpus("toy words", texts=_texts()).batches(tokenizer)
    analyze(model, tokenizer, batches, out, sections=sections, show_progress=False, null=null)
    return {name: pd.read_csv(out / "tables" / f"{name}.csv")
            for name in ("probe_scores", "role_tests", "head_stats")}


@pytest.fixture(scope="module")
def reports(tmp_path_factory) -> tuple[dict, dict]:
    root = tmp_path_factory.mktemp("null")
    return (_report(root / "with_null", NullOptions("random-init")),
            _report(root / "without", NullOptions("none")))


def test_the_null_pass_leaves_the_measure_to_the_real_model(reports) -> None:
    with_null, without = reports
    assert "null_mean" in with_null["head_stats"].columns  # the null pass ran
    pd.testing.assert_frame_equal(with_null["probe_scores"], without["probe_scores"])
    scores = with_null["probe_scores"].set_index(["measure", "layer", "head"])["value"]
    assert scores[("induction", *INDUCTION_HEAD)] > 0.9  # the planted head, not a random one
    lm_roles = {"induction", "duplicate_token", "previous_token", "sink", "retrieval"}
    tests = [t[t["role"].isin(lm_roles)].reset_index(drop=True)[["role", "layer", "head",
                                                                  "value"]]
             for t in (with_null["role_tests"], without["role_tests"])]
    pd.testing.assert_frame_equal(*tests)
    sinks = [t[t["measure"] == "sink"].reset_index(drop=True)[["layer", "head", "value"]]
             for t in (with_null["head_stats"], without["head_stats"])]
    pd.testing.assert_frame_equal(*sinks)


def test_the_measure_refuses_a_model_its_corpus_analyzers_were_not_made_for() -> None:
    from attnlens.errors import ConfigError

    model, other = toy_model(), toy_model(seed=1)
    lm = LmHeads(LmHeadsSettings(**SETTINGS).check(), INFERENCE)
    lm.corpus_analyzers(model, toy_tokenizer())
    assert lm.made_for(model) and not lm.made_for(other)
    with pytest.raises(ConfigError, match="made for another model"):
        lm.compute(other)
