"""Hand-built report folders whose tables, findings and differences are known exactly."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from attnlens.measures.asymmetry.section import ASYMMETRY
from attnlens.measures.heads.section import HEADS
from attnlens.measures.spectrum.section import SPECTRUM
from attnlens.report.catalog import SectionDoc
from attnlens.report.folder import SectionRecord
from attnlens.runs.io import write_table

LAYERS, HEADS_PER_LAYER = 2, 3
XSS_SCRIPT = "<script>alert(1)</script>"
XSS_IMG = '"><img src=x onerror=alert(1)>'


def head_rows() -> list[tuple[int, int]]:
    return [(layer, head) for layer in range(LAYERS) for head in range(HEADS_PER_LAYER)]


def known_tables(relation: str = "nsubj", quarter_shift: float = 0.0,
                 syntactic_head: tuple[int, int] = (1, 0)) -> dict[str, pd.DataFrame]:
    """L0H2 is a previous-token head (99.8 %); ``syntactic_head`` is syntactic for
    ``relation``; C(n/4) is 0.70 + 0.01 h in layer 0 and 0.90 + 0.01 h in layer 1 (means
    0.71 and 0.91), plus ``quarter_shift`` on L0H1."""
    heads = head_rows()
    positional = pd.DataFrame({
        "layer": [lh[0] for lh in heads], "head": [lh[1] for lh in heads],
        "best_offset": [-1 if lh == (0, 2) else 1 for lh in heads],
        "share": [0.998 if lh == (0, 2) else 0.2 + 0.01 * lh[1] for lh in heads],
        "positional": [lh == (0, 2) for lh in heads], "tokens": 500,
    })
    roles = []
    for layer, head in heads:
        name = ("positional" if (layer, head) == (0, 2)
                else "syntactic" if (layer, head) == syntactic_head else "none")
        evidence = ("positional: offset -1 (1.00)" if name == "positional"
                    else f"syntactic: {relation} dep->head (0.58)" if name == "syntactic" else "")
        roles.append({"layer": layer, "head": head, "best_offset": -1 if name == "positional"
                      else 1, "offset_share": 0.5, "roles": name, "evidence": evidence})
    quarter = []
    for layer, head in heads:
        value = (0.70 if layer == 0 else 0.90) + 0.01 * head
        value += quarter_shift if (layer, head) == (0, 1) else 0.0
        quarter.append({"layer": layer, "head": head, "measure": "cum_at_quarter",
                        "value": value})
        quarter.append({"layer": layer, "head": head, "measure": "effective_rank",
                        "value": 5.0 - layer})
    stats = []
    for layer, head in heads:
        stats += [{"layer": layer, "head": head, "measure": "confidence",
                   "value": 0.9996 if (layer, head) == (0, 2) else 0.3, "level": "token"},
                  {"layer": layer, "head": head, "measure": "entropy",
                   "value": 2.5 if (layer, head) == (1, 1) else 1.0, "level": "token"},
                  {"layer": layer, "head": head, "measure": "to_sep",
                   "value": 0.6 if layer == 1 else 0.1, "level": "token"},
                  {"layer": layer, "head": head, "measure": "to_cls", "value": 0.05,
                   "level": "token"}]
    best = pd.DataFrame([
        {"relation": relation, "direction": "dep->head", "examples": 120,
         "layer": syntactic_head[0], "head": syntactic_head[1], "accuracy": 0.58,
         "baseline": 0.33, "baseline_offset": 1, "margin": 0.25, "syntactic": True},
        {"relation": relation, "direction": "head->dep", "examples": 120, "layer": 0,
         "head": 0, "accuracy": 0.35, "baseline": 0.33, "baseline_offset": -1, "margin": 0.02,
         "syntactic": False},
    ])
    accuracy = pd.DataFrame([
        {"relation": relation, "direction": d, "layer": layer, "head": head,
         "accuracy": 0.58 if (layer, head) == syntactic_head and d == "dep->head" else 0.2,
         "baseline": 0.33, "examples": 120, "syntactic": (layer, head) == syntactic_head
         and d == "dep->head"}
        for d in ("dep->head", "head->dep") for layer, head in heads])
    rare = pd.DataFrame({
        "layer": [lh[0] for lh in heads], "head": [lh[1] for lh in heads],
        "share_rarest": [0.4 if lh == (1, 2) else 0.1 for lh in heads],
        "share_two_rarest": 0.2, "chance_rarest": 0.098, "chance_two_rarest": 0.19,
        "rare_word": False, "words": 300, "sentences": 20,
    })
    weights = pd.DataFrame([{"layer": layer, "head": head, "measure": "antisym_share",
                             "value": 0.3 + 0.1 * head} for layer, head in heads])
    patterns = pd.DataFrame([{"layer": layer, "head": head, "measure": "asym_ratio",
                              "value": 1.0 + (0.2 if (layer, head) == (1, 2) else 0.0)}
                             for layer, head in heads])
    baseline = pd.DataFrame([{"layer": layer, "measure": "asym_ratio", "value": 0.1}
                             for layer in range(LAYERS)])
    return {
        "head_roles": pd.DataFrame(roles), "positional_heads": positional,
        "head_stats": pd.DataFrame(stats), "syntactic_best": best,
        "syntactic_accuracy": accuracy, "rare_words": rare,
        "spectrum_summary": pd.DataFrame(quarter), "weight_asymmetry": weights,
        "pattern_asymmetry": patterns, "asymmetry_baseline": baseline,
    }


SECTION_TABLES = {
    "heads": ["head_roles", "positional_heads", "head_stats", "syntactic_best",
              "syntactic_accuracy", "rare_words"],
    "spectrum": ["spectrum_summary"],
    "asymmetry": ["weight_asymmetry", "pattern_asymmetry", "asymmetry_baseline"],
}


def write_report(folder: Path, tables: dict[str, pd.DataFrame] | None = None,
                 model_name: str = "tiny-test-model", corpus: str = "hand-built",
                 extra_sections: dict[str, list[str]] | None = None) -> Path:
    """A report folder as `attnlens analyze` lays it out (no figures); ``extra_sections``:
    more sections (name -> its tables), with an empty doc."""
    tables = known_tables() if tables is None else tables
    for name, table in tables.items():
        write_table(table, folder / "tables", name)
    (folder / "figures").mkdir(parents=True, exist_ok=True)
    docs = {"heads": (HEADS, "Head roles"), "spectrum": (SPECTRUM, "Spectrum"),
            "asymmetry": (ASYMMETRY, "Asymmetry")}
    sections = [SectionRecord(name, docs[name][1], docs[name][0], names,
                              notes=[f"note of {name}"]).to_json()
                for name, names in SECTION_TABLES.items()]
    sections += [SectionRecord(name, name.title(), SectionDoc(), names).to_json()
                 for name, names in (extra_sections or {}).items()]
    run = {"model": {"name": model_name, "layers": LAYERS, "heads": HEADS_PER_LAYER,
                     "checksum": {"sha256": "0" * 64, "of": "nothing"}},
           "corpus": corpus, "sentences": 20, "sections": sections,
           "layers_and_heads_numbered_from": 0}
    (folder / "run.json").write_text(json.dumps(run), encoding="utf-8")
    return folder


def same_table_files(a: Path, b: Path) -> list[str]:
    """The names of report folder ``a``'s table files, asserted the same names and bytes
    in report folder ``b``."""
    tables = sorted(p.name for p in (a / "tables").iterdir())
    assert tables == sorted(p.name for p in (b / "tables").iterdir())
    for name in tables:
        assert (a / "tables" / name).read_bytes() == (b / "tables" / name).read_bytes(), name
    return tables
