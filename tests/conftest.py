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


# The slow tests, measured on the project's 2-core machine on 2026-11-26 (shared, load 4-11):
# 2 s or more of wall time each in `make test-fast` (`pytest --durations=80`; call plus setup,
# summed over parameters), or 1 s or more of CPU time (`ATTNLENS_TEST_CPU=FILE`, below): whole
# commands run in-process on MiniLM or on each hf family, 8,192-token viewer pages, simulations
# of coverage rates, pruning and L0 runs, hf-backend parity sweeps (three rounds: a test that
# inherits a session fixture's cost once its first user is marked was measured again).
# Marked ``slow``: `make test-fast` leaves them out, `make test` runs them.
# tests/test_markers.py checks that each still names a test.
SLOW = {
    "test_syncs_per_batch.py::test_no_analyzer_waits_more_with_depth",
    "test_syncs_per_batch.py::test_the_fixed_analyzers_are_counted",
    "test_analyzer_states.py::test_merge_of_halves_equals_one_pass",
    "test_analyzer_states.py::test_state_round_trips_through_files",
    "test_analyzer_states.py::test_token_strings_are_held_as_plain_data",
    "test_asymmetry.py::test_merge_of_halves_equals_whole_and_streaming_matches",
    "test_bad_inputs.py::test_bad_input_is_one_line_error_before_loading_leaving_nothing",
    "test_bad_inputs.py::test_the_load_guard_bites",
    "test_bert_tokenizer.py::test_analyze_of_minilm_imports_no_transformers",
    "test_bert_tokenizer.py::test_loaded_without_transformers",
    "test_checkpointing.py::test_a_cut_during_a_second_resume_still_resumes",
    "test_checkpointing.py::test_a_cut_pass_resumes_to_the_same_tables",
    "test_cli_options.py::test_default_max_length_reads_the_checkpoint",
    "test_collapse_pretrained.py::test_analyze_runs_the_collapse_section",
    "test_collapse_pretrained.py::test_cli_pretrained",
    "test_collapse_pretrained.py::test_cli_synthetic_and_its_errors",
    "test_collapse_pretrained.py::test_full_model_stays_far_above_pure_attention",
    "test_collapse_pretrained.py::test_full_variant_reproduces_the_model",
    "test_collapse_pretrained.py::test_path_merge_equals_one_pass",
    "test_collapse_pretrained.py::test_paths_collapse_with_length",
    "test_collapse_synthetic.py::test_identity_attention_never_collapses",
    "test_collapse_synthetic.py::test_pure_attention_collapses_by_depth_8",
    "test_collapse_synthetic.py::test_pure_attention_decay_is_doubly_exponential",
    "test_collapse_synthetic.py::test_skip_connections_keep_the_residual_above_a_floor",
    "test_collapse_variant_batches.py::test_minilm_one_call_equals_one_call_per_variant_bitwise",
    "test_compare.py::test_compare_reads_every_table_of_a_real_report",
    "test_config_checks.py::test_load_model_refuses_a_bad_config_naming_the_field",
    "test_device_map.py::test_activation_analyzers_on_a_split_model",
    "test_encoder_decoder.py::test_head_gate_covers_every_attention_type",
    "test_encoder_decoder.py::test_sdpa_and_manual_paths_agree",
    "test_encoder_decoder_analysis.py::test_analyze_runs_each_section_on_its_attention_types",
    "test_encoder_decoder_analysis.py::test_cli_tables_have_an_attention_column",
    "test_encoder_decoder_analysis.py::test_known_patterns_reach_the_right_attention_type",
    "test_encoder_decoder_analysis.py::test_runner_matches_caches_taken_by_hand",
    "test_example_seq2seq.py::test_cli_prunes_the_saved_model_by_attention_type",
    "test_example_seq2seq.py::test_reduced_example_trains_and_prunes_each_type",
    "test_export.py::test_attention_variants_round_trip",
    "test_export.py::test_every_family_round_trips",
    "test_export.py::test_export_copies_tokenizer_files",
    "test_export_seq2seq.py::test_round_trip_through_transformers",
    "test_forward_fed.py::test_lm_analyzers_fed_blocks_then_stopped_equal_the_whole_forward",
    "test_forward_fed.py::test_minilm_probe_runs_stopped_equal_the_whole_forwards",
    "test_head_examples.py::test_every_head_has_examples_and_linked_viewer_pages",
    "test_head_role_tests.py::test_a_head_at_exactly_the_baseline_is_never_syntactic",
    "test_head_role_tests.py::test_bootstrap_interval_of_a_binomial_covers_the_truth_at_its_nominal_rate",
    "test_heads_cli_stats.py::test_clusters_and_behaviour_on_the_sample",
    "test_heads_cli_stats.py::test_select_on_another_treebank_and_sentence_pooling",
    "test_heads_minilm.py::test_heads_command_on_plain_text",
    "test_heads_minilm.py::test_heads_command_on_the_embedded_sample",
    "test_heads_state.py::test_a_structurally_pruned_model_has_no_phantom_heads",
    "test_heads_state.py::test_merge_of_parts_equals_one_pass_and_refuses_other_settings",
    "test_heads_state.py::test_pruned_models_list_only_existing_heads",
    "test_heads_state.py::test_states_round_trip_through_safetensors_and_json",
    "test_heads_synthetic.py::test_merge_equals_one_pass",
    "test_heads_synthetic.py::test_planted_heads_are_classified",
    "test_heads_synthetic.py::test_uniform_attention_spreads_credit_over_ties",
    "test_hf_backend.py::test_encoder_decoder_patterns_equal_eager",
    "test_hf_backend.py::test_patterns_and_hidden_states_equal_eager",
    "test_hf_cli.py::test_analyze_and_view_run_end_to_end",
    "test_hf_cli.py::test_both_backends_give_the_same_tables",
    "test_hf_cli.py::test_loaded_patterns_equal_hf_eager",
    "test_hf_weights.py::test_float64_patterns_and_hidden_states_equal_across_backends",
    "test_import_cycles.py::test_no_import_cycles",
    "test_importance.py::test_gradient_importance_matches_finite_differences",
    "test_importance.py::test_planted_head_is_ranked_first",
    "test_importance.py::test_random_order_is_seeded_and_attention_orders_have_the_right_sign",
    "test_known_errors.py::test_an_input_without_tokens_is_refused_by_the_model",
    "test_l0.py::test_hard_concrete_samples_and_closed_forms",
    "test_l0.py::test_lambda_zero_closes_no_gate",
    "test_l0.py::test_large_lambda_closes_all_but_the_minimum_per_layer",
    "test_l0.py::test_runs_are_seeded_and_resumable",
    "test_layering.py::test_imports_flow_one_way",
    "test_lm_heads_architectures.py::test_the_measure_runs_on_every_single_stack_architecture",
    "test_lm_heads_hf.py::test_probe_scores_match_transformers_eager_attentions",
    "test_lm_heads_hf.py::test_sink_equals_an_independent_computation_on_minilm",
    "test_lm_heads_hf_backend.py::test_scores_through_the_hf_backend_match_eager_attentions",
    "test_lm_heads_hf_backend.py::test_the_whole_measure_runs_through_the_hf_backend",
    "test_lm_heads_known.py::test_a_model_without_token_maps_gets_no_copying_scores",
    "test_lm_heads_known.py::test_ablating_the_induction_head_breaks_the_repeat_loss",
    "test_lm_heads_known.py::test_mean_ablation_replaces_a_head_output_by_its_mean",
    "test_lm_heads_known.py::test_no_probes_keeps_the_corpus_measures",
    "test_lm_heads_known.py::test_probes_find_exactly_the_planted_heads",
    "test_lm_heads_null.py::test_the_null_pass_leaves_the_measure_to_the_real_model",
    "test_lm_heads_pruned.py::test_grouped_query_heads_keep_their_group_numbers",
    "test_lm_heads_pruned.py::test_roles_and_summary_follow_the_numbers",
    "test_lm_heads_pruned.py::test_tables_name_heads_by_their_original_numbers",
    "test_lm_heads_states.py::test_merge_of_halves_equals_one_pass",
    "test_lm_heads_states.py::test_state_round_trips_through_files",
    "test_loaders_cli.py::test_verify_measures_each_architecture_of_the_chosen_families",
    "test_markers.py::test_every_slow_entry_names_a_test_function",
    "test_measures_per_architecture.py::test_a_causal_gqa_model_gets_sink_and_kv_head_columns",
    "test_metrics_prune.py::test_fidelity_is_perfect_unpruned_and_its_own_gradient_vanishes",
    "test_metrics_prune.py::test_masked_lm_loss_equals_transformers_and_ignores_batching",
    "test_models_verify_all_cli.py::test_a_type_that_differs_from_eager_fails_the_command",
    "test_newviews_cli.py::test_encoder_decoder_models_get_rollout_per_stack_and_coverage_per_type",
    "test_newviews_cli.py::test_rollout_on_a_tiny_bert_with_texts",
    "test_newviews_cli.py::test_rollout_on_minilm_end_to_end",
    "test_newviews_cli.py::test_sparse_and_linear_on_a_tiny_bert",
    "test_newviews_minilm.py::test_linear_view_matches_a_direct_computation_and_its_bounds",
    "test_newviews_minilm.py::test_rollout_streams_the_same_matrices_as_one_sentence",
    "test_newviews_minilm.py::test_sparse_coverage_matches_a_direct_computation",
    "test_fixed_costs_equal.py::test_head_grids_equal_the_group_by_path_on_the_sample_report",
    "test_fixed_costs_equal.py::test_markdown_tables_equal_the_row_path_on_the_sample_report",
    "test_fixed_costs_equal.py::test_run_json_itemises_the_fixed_costs",
    "test_null_model.py::test_null_none_leaves_the_tables_as_they_were",
    "test_null_model.py::test_the_null_of_a_bert_does_not_import_transformers_modeling_code",
    "test_null_model.py::test_the_null_of_minilm_imports_no_transformers",
    "test_null_model.py::test_report_tables_gain_null_columns_and_run_json_states_the_cost",
    "test_numeric.py::test_every_numeric_option_refuses_overflow_and_infinity",
    "test_once32.py::test_an_encoder_decoder_report_is_the_write_then_rewrite_paths",
    "test_once32.py::test_roles_from_one_table_of_tests_equal_the_recomputed_ones",
    "test_once32.py::test_tables_written_once_give_the_folder_of_the_write_then_rewrite_path",
    "test_sparse32.py::test_minilm_on_ewt_dev_agrees_with_the_float64_reference",
    "test_parity_bert.py::test_minilm_float64_matches_hf_float64_eager",
    "test_parity_bert.py::test_minilm_parity",
    "test_parity_bert.py::test_minilm_sentence_embeddings_match_transformers",
    "test_parity_bert.py::test_tiny_bert_parity",
    "test_parity_distilbert.py::test_tiny_distilbert_parity",
    "test_parity_gpt2.py::test_gpt2_attention_flags_parity",
    "test_parity_hf.py::test_hf_backend_equals_eager",
    "test_parity_hf.py::test_models_outside_the_interface_are_refused_with_the_reason",
    "test_parity_llama.py::test_tiny_llama_style_parity",
    "test_parity_rope_scaling.py::test_rope_scaling_parity",
    "test_parity_rope_scaling.py::test_weight_measures_rotate_with_the_scaled_frequencies",
    "test_parity_seq2seq.py::test_models_verify_measures_the_encoder_decoder_families",
    "test_parity_seq2seq.py::test_tiny_bart_parity",
    "test_parity_seq2seq.py::test_tiny_marian_parity",
    "test_parity_seq2seq.py::test_tiny_t5_parity",
    "test_parity_sliding_window.py::test_sliding_window_parity",
    "test_prune_cli_methods.py::test_l0_method_writes_its_tables_beside_the_curve",
    "test_prune_cli_methods.py::test_roles_order_prunes_the_heads_without_a_role_first",
    "test_prune_folder.py::test_a_python_user_gets_the_prune_folder_of_the_command",
    "test_pruned_export.py::test_minilm_export_keeps_its_head_numbers",
    "test_pruned_export.py::test_prune_export_analyze_compare_keeps_head_numbers",
    "test_pruned_export.py::test_viewer_and_prune_name_heads_by_their_numbers",
    "test_pruning.py::test_a_kill_between_the_two_tables_loses_no_scores",
    "test_pruning.py::test_pruning_curve_records_every_step",
    "test_pruning.py::test_pruning_no_head_leaves_the_metric_unchanged",
    "test_pruning.py::test_resume_after_an_interruption_gives_the_same_table",
    "test_pruning.py::test_steps_that_round_to_the_same_head_count_are_merged",
    "test_pruning.py::test_structural_pruning_equals_masking",
    "test_pruning_minilm.py::test_structurally_pruned_minilm_equals_masked_minilm",
    "test_python_api.py::test_a_report_writes_a_copy_that_renders",
    "test_python_api.py::test_analyze_returns_the_report_it_wrote",
    "test_python_api.py::test_bad_calls_are_attnlens_errors",
    "test_python_api.py::test_compare_from_python",
    "test_query_blocks.py::test_full_spectra_need_whole_blocks_and_are_refused_above_the_limit",
    "test_query_blocks.py::test_per_sentence_sums_of_a_long_sentence_do_not_depend_on_the_blocks",
    "test_query_blocks.py::test_row_separable_analyzers_fed_blocks_equal_whole_matrices",
    "test_query_blocks.py::test_run_analyzers_in_blocks_equals_the_whole_matrix_path",
    "test_query_blocks.py::test_spectrum_top_k_from_block_products_equals_the_dense_path",
    "test_rows_shared.py::test_syntactic_whole_matrices_equal_query_blocks_on_minilm_sentences",
    "test_raw_text_tokens.py::test_commands_read_the_raw_lines_on_a_gpt2",
    "test_readers_fuzz.py::test_conllu_parser_gives_trees_or_a_data_error",
    "test_readers_fuzz.py::test_word_alignment_gives_consistent_word_ids_or_a_data_error",
    "test_roles_order.py::test_role_heads_are_pruned_last",
    "test_rollout_view.py::test_no_rollout_option_leaves_the_overlay_out",
    "test_rollout_view.py::test_overlay_is_the_rollout_of_the_page_patterns",
    "test_seq2seq_metric.py::test_metric_equals_transformers_loss",
    "test_shared_subspace.py::test_minilm_tables_are_consistent",
    "test_spectral_kernel.py::test_square_attention_matrices_match_float64_svd",
    "test_spectrum_blocks.py::test_top_k_bounds_hold_on_real_looking_attention",
    "test_spectrum_cli.py::test_asymmetry_with_corpus_reports_the_baseline",
    "test_spectrum_cli.py::test_spectrum_command_writes_tables_and_figures",
    "test_student_t.py::test_a_share_at_the_threshold_passes_at_the_nominal_rate_on_few_sentences",
    "test_sync.py::test_query_blocks_read_nothing_back_to_the_host",
    "test_sync.py::test_update_layer_reads_nothing_back_to_the_host",
    "test_viewer.py::test_default_max_length_is_the_trained_length_and_longer_inputs_warn",
    "test_viewer.py::test_view_errors_are_one_line_and_come_before_loading",
    "test_viewer_long.py::test_the_page_of_8192_tokens_stays_under_20_mb",
}


def pytest_collection_modifyitems(config, items) -> None:
    for item in items:
        for kind in sorted(kinds_of(item)):
            item.add_marker(kind)
        if f"{item.path.name}::{getattr(item, 'originalname', item.name)}" in SLOW:
            item.add_marker("slow")


# CPU time per test (ATTNLENS_TEST_CPU=FILE): process CPU seconds of each test's setup, call and
# teardown, written as JSON when the session ends. Wall times of a shared machine mislead; this
# is what choosing the slow tests is based on.
_CPU_TIMES: dict[str, float] = {}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    import os
    import time

    if not os.environ.get("ATTNLENS_TEST_CPU"):
        yield
        return
    start = time.process_time()
    yield
    _CPU_TIMES[item.nodeid] = time.process_time() - start


def pytest_sessionfinish(session, exitstatus) -> None:
    import json
    import os

    path = os.environ.get("ATTNLENS_TEST_CPU")
    if path and _CPU_TIMES:
        Path(path).write_text(json.dumps(_CPU_TIMES, indent=0), encoding="utf-8")
