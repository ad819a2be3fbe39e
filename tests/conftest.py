"""Shared fixtures (``tests/fixtures.py``) and the automatic test kinds (markers).

Every test gets one or more markers by what it does, decided from its source when the suite is
collected (``kinds_of``: the test function, the module-level helpers and fixtures it uses,
followed through the tests' own modules), so a new test needs no marker by hand:

- ``cli``: starts a process (``subprocess``, ``sys.executable``): the commands run as a user
  runs them, a fresh interpreter for import checks, torchrun;
- ``e2e``: reads the real corpora of ../shared/data (``shared_file``, ``SHARED_DATA``) or
  drives a browser (``tests/browser_utils.py``, selenium);
- ``parity``: a ``tests/test_parity_*.py`` module (attnlens against Hugging Face);
- ``unit``: none of the above (it may still load the embedded MiniLM or build tiny models).

Apart from these, ``slow`` marks the tests listed in ``SLOW`` (measured at 2 s or more) and
a few marked by hand. ``make test-fast`` runs ``-m "not cli and not e2e and not slow"`` (no
subprocess, no real corpus, nothing slow); ``make test`` runs everything. docs/architecture.md:
Tests.
"""

from __future__ import annotations

import ast
import inspect
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from tests.fixtures import *  # noqa: F403 (the shared fixtures: tiny models, CLI runner, batches)

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


def shared_file(relative: str) -> Path:
    """A file under ../shared/data, or skip the test with the reason."""
    path = SHARED_DATA / relative
    if not path.is_file():
        pytest.skip(f"{path} is absent (../shared/data exists only beside the project checkout)")
    return path


@pytest.fixture(scope="session")
def minilm():
    """(model, tokenizer) of the embedded all-MiniLM-L6-v2, fp32, CPU, eval mode."""
    import attnlens

    return attnlens.load()


@pytest.fixture(autouse=True)
def _deterministic():
    torch.manual_seed(0)
    yield


@pytest.fixture(scope="session")
def sample_report(tmp_path_factory) -> Path:
    """`attnlens analyze --quiet` on the embedded model and sample treebank, run once."""
    out = tmp_path_factory.mktemp("sample_report")
    result = subprocess.run(
        [sys.executable, "-m", "attnlens.cli", "analyze", "--out", str(out), "--quiet"],
        cwd=out, capture_output=True, text=True, timeout=900,
    )
    assert result.returncode == 0, result.stderr
    return out


# Automatic test kinds -----------------------------------------------------------------------
TESTS_DIR = Path(__file__).resolve().parent
KIND_PATTERNS = {
    "cli": re.compile(r"\bsubprocess\b|\bsys\.executable\b"),
    "e2e": re.compile(r"\bshared_file\(|\bSHARED_DATA\b|\bselenium\b|\bbrowser_utils\b"),
}
_SOURCES: dict[object, tuple[str, list]] = {}


def _source_and_callees(fn) -> tuple[str, list]:
    """A tests/ function's source and the tests/ functions its names refer to."""
    if fn in _SOURCES:
        return _SOURCES[fn]
    try:
        source = textwrap.dedent(inspect.getsource(fn))
        names = {n.id for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Name)}
    except (OSError, TypeError, SyntaxError):
        source, names = "", set()
    namespace = getattr(fn, "__globals__", {})
    callees = [namespace[n] for n in sorted(names) if _in_tests(namespace.get(n))]
    _SOURCES[fn] = (source, callees)
    return _SOURCES[fn]


def _in_tests(obj) -> bool:
    if not inspect.isfunction(obj):
        return False
    path = inspect.getsourcefile(obj) or ""
    return Path(path).resolve().is_relative_to(TESTS_DIR)


def kinds_of(item: pytest.Item) -> set[str]:
    """The kinds (markers) of one collected test (see the module docstring)."""
    todo = [item.function] if hasattr(item, "function") else []
    info = getattr(item, "_fixtureinfo", None)
    for defs in (info.name2fixturedefs.values() if info is not None else ()):
        todo += [d.func for d in defs if _in_tests(d.func)]
    seen, text = set(), []
    while todo:
        fn = todo.pop()
        if fn in seen:
            continue
        seen.add(fn)
        source, callees = _source_and_callees(fn)
        text.append(source)
        todo += callees
    found = "\n".join(text)
    kinds = {kind for kind, pattern in KIND_PATTERNS.items() if pattern.search(found)}
    if item.path.name.startswith("test_parity_"):
        kinds.add("parity")
    return kinds or {"unit"}


# Tests that took 2 s or more each (call plus setup, summed over their parameters) in
# `make test-fast` on the project's 2-core machine (`pytest --durations=80`, 2026-11-26, load
# about 4): whole commands run in-process on MiniLM or on each hf family, 8,192-token viewer
# pages, simulations of coverage rates. Marked ``slow``: `make test-fast` leaves them out,
# `make test` runs them. tests/test_markers.py checks that each still names a test.
SLOW = {
    "test_bad_inputs.py::test_bad_input_is_one_line_error_before_loading_leaving_nothing",
    "test_checkpointing.py::test_a_cut_pass_resumes_to_the_same_tables",
    "test_collapse_pretrained.py::test_analyze_runs_the_collapse_section",
    "test_collapse_pretrained.py::test_cli_pretrained",
    "test_collapse_pretrained.py::test_full_model_stays_far_above_pure_attention",
    "test_collapse_pretrained.py::test_full_variant_reproduces_the_model",
    "test_collapse_synthetic.py::test_identity_attention_never_collapses",
    "test_collapse_synthetic.py::test_pure_attention_collapses_by_depth_8",
    "test_compare.py::test_compare_reads_every_table_of_a_real_report",
    "test_encoder_decoder_analysis.py::test_analyze_runs_each_section_on_its_attention_types",
    "test_encoder_decoder_analysis.py::test_cli_tables_have_an_attention_column",
    "test_example_seq2seq.py::test_reduced_example_trains_and_prunes_each_type",
    "test_head_examples.py::test_every_head_has_examples_and_linked_viewer_pages",
    "test_head_role_tests.py::test_bootstrap_interval_of_a_binomial_covers_the_truth_at_its_nominal_rate",
    "test_heads_cli_stats.py::test_clusters_and_behaviour_on_the_sample",
    "test_heads_cli_stats.py::test_select_on_another_treebank_and_sentence_pooling",
    "test_heads_minilm.py::test_heads_command_on_plain_text",
    "test_heads_minilm.py::test_heads_command_on_the_embedded_sample",
    "test_hf_cli.py::test_analyze_and_view_run_end_to_end",
    "test_lm_heads_null.py::test_the_null_pass_leaves_the_measure_to_the_real_model",
    "test_measures_per_architecture.py::test_a_causal_gqa_model_gets_sink_and_kv_head_columns",
    "test_newviews_cli.py::test_encoder_decoder_models_get_rollout_per_stack_and_coverage_per_type",
    "test_newviews_cli.py::test_rollout_on_a_tiny_bert_with_texts",
    "test_newviews_cli.py::test_rollout_on_minilm_end_to_end",
    "test_newviews_cli.py::test_sparse_and_linear_on_a_tiny_bert",
    "test_null_model.py::test_null_none_leaves_the_tables_as_they_were",
    "test_null_model.py::test_report_tables_gain_null_columns_and_run_json_states_the_cost",
    "test_pruned_export.py::test_minilm_export_keeps_its_head_numbers",
    "test_pruned_export.py::test_prune_export_analyze_compare_keeps_head_numbers",
    "test_python_api.py::test_a_report_writes_a_copy_that_renders",
    "test_python_api.py::test_analyze_returns_the_report_it_wrote",
    "test_python_api.py::test_compare_from_python",
    "test_query_blocks.py::test_per_sentence_sums_of_a_long_sentence_do_not_depend_on_the_blocks",
    "test_raw_text_tokens.py::test_commands_read_the_raw_lines_on_a_gpt2",
    "test_readers_fuzz.py::test_conllu_parser_gives_trees_or_a_data_error",
    "test_spectral_kernel.py::test_square_attention_matrices_match_float64_svd",
    "test_spectrum_blocks.py::test_top_k_bounds_hold_on_real_looking_attention",
    "test_spectrum_cli.py::test_asymmetry_with_corpus_reports_the_baseline",
    "test_spectrum_cli.py::test_spectrum_command_writes_tables_and_figures",
    "test_student_t.py::test_a_share_at_the_threshold_passes_at_the_nominal_rate_on_few_sentences",
    "test_viewer.py::test_default_max_length_is_the_trained_length_and_longer_inputs_warn",
    "test_viewer_long.py::test_the_page_of_8192_tokens_stays_under_20_mb",
}


def pytest_collection_modifyitems(config, items) -> None:
    for item in items:
        for kind in sorted(kinds_of(item)):
            item.add_marker(kind)
        if f"{item.path.name}::{getattr(item, 'originalname', item.name)}" in SLOW:
            item.add_marker("slow")
