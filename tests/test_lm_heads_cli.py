"""`attnlens heads` and `attnlens analyze` write the language-model heads' tables with the
columns the issue names, on a tiny causal LM and on the MiniLM sample report."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pandas as pd

SCORE_COLUMNS = ["layer", "head", "kv_head", "measure", "value", "ci_low", "ci_high",
                 "n_sequences"]
STREAMING_COLUMNS = ["layer", "head", "kv_head", "sink_tokens", "window", "output_error",
                     "streaming"]
ABLATION_COLUMNS = ["role", "k", "metric", "baseline", "ablated", "random_mean", "random_low",
                    "random_high", "n_random", "p"]
LM_ROLES = {"induction", "duplicate_token", "previous_token", "sink", "retrieval"}


def tiny_llama(folder: Path) -> None:
    """A random two-layer Llama (GQA: 4 query heads, 2 key/value heads) with the toy
    word-level tokenizer, saved as a checkpoint folder."""
    import transformers

    from tests.lm_heads_toys import toy_tokenizer
    from tests.parity_utils import save_tiny

    config = transformers.LlamaConfig(vocab_size=40, hidden_size=32, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2,
                                      intermediate_size=64, max_position_embeddings=64,
                                      bos_token_id=0, eos_token_id=0, pad_token_id=0)
    save_tiny(transformers.LlamaForCausalLM, config, folder)
    toy_tokenizer().hf.save_pretrained(str(folder))


def table(folder: Path, name: str) -> pd.DataFrame:
    return pd.read_csv(folder / "tables" / f"{name}.csv")


def test_heads_writes_the_language_model_tables(tmp_path: Path) -> None:
    model, out = tmp_path / "model", tmp_path / "out"
    tiny_llama(model)
    probes = tmp_path / "probes.txt"
    probes.write_text("\n".join(f"0 {' '.join(map(str, r))} {' '.join(map(str, r))}"
                                for r in ([5, 6, 7, 8], [9, 10, 11, 12], [13, 14, 15, 16])))
    result = subprocess.run(
        [sys.executable, "-m", "attnlens.cli", "heads", str(model), "--out", str(out),
         "--quiet", "--probe-file", str(probes), "--window", "4", "--sink-tokens", "1",
         "--controls", "3", "--bootstrap", "50", "--no-clusters"],
        capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr
    scores = table(out, "probe_scores")
    assert list(scores.columns[:8]) == SCORE_COLUMNS
    assert set(scores["measure"]) >= {"previous_token", "duplicate_token", "induction",
                                      "retrieval", "copying"}
    probe_rows = scores[scores["measure"] == "induction"]
    assert (probe_rows["n_sequences"] == 3).all()  # the three probes of the file
    assert (scores["kv_head"] == scores["head"] // 2).all()
    assert list(table(out, "streaming_heads").columns[:7]) == STREAMING_COLUMNS
    assert list(table(out, "role_ablation").columns) == ABLATION_COLUMNS
    stats = table(out, "head_stats")
    sinks = stats[stats["measure"] == "sink"]
    assert len(sinks) == 8 and (sinks["pooling"] == "sentence").all()
    assert set(table(out, "role_tests")["role"]) >= LM_ROLES
    assert "Heads of language models" in (out / "index.html").read_text(encoding="utf-8")
    assert "Probes: [first token] + R + R with R = 4, --probe-file (3 sequences)" in (
        result.stdout)


def test_the_sample_report_has_the_language_model_section(sample_report: Path) -> None:
    stats = table(sample_report, "head_stats")
    sinks = stats[stats["measure"] == "sink"]
    assert len(sinks) == 72 and sinks["ci_low"].notna().all()
    scores = table(sample_report, "probe_scores")
    assert (scores[scores["measure"] == "induction"]["n_sequences"] == 200).all()
    copying = scores[scores["measure"] == "copying"]
    assert set(copying["detail"]) == {"OV circuit, embedding form"}  # MiniLM: no unembedding
    ablation = table(sample_report, "role_ablation")
    assert ablation.empty and list(ablation.columns) == ABLATION_COLUMNS  # no metric here
    assert set(table(sample_report, "role_tests")["role"]) >= LM_ROLES


def test_the_viewer_has_a_short_badge_for_every_role() -> None:
    """The viewer's role badges (`view --report`) name each role of head_roles.csv briefly,
    the language-model roles included (a long name overflows the model view's cells)."""
    import re

    from attnlens.measures.heads.roles import ROLES

    script = (Path(__file__).resolve().parents[1] / "attnlens" / "viewer" / "static"
              / "viewer_data.js").read_text(encoding="utf-8")
    body = re.search(r"const ROLE_SHORT = \{(.*?)\};", script, re.S).group(1)
    named = {key.strip('"') for key in re.findall(r'("[^"]+"|\w+):', body)}
    assert set(ROLES) <= named, set(ROLES) - named
