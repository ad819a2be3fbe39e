"""The `roles` pruning order: reading role tables (tested or not) and pruning the others first."""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from attnlens.errors import ConfigError, DataError
from attnlens.measures.pruning import PruneSettings, prune
from attnlens.measures.pruning.roles_order import read_role_heads, role_mask, role_scores
from attnlens.model.gates import parse_heads
from tests.test_pruning import sts_metrics, toy_model


def write_roles(path, **columns) -> None:
    base = {"layer": [0, 0, 1, 1], "head": [0, 3, 1, 2]}
    pd.DataFrame({**base, **columns}).to_csv(path / "head_roles.csv", index=False)


def test_tested_column_decides_when_present(tmp_path):
    write_roles(tmp_path, roles=["syntactic", "positional", "none", "rare-word"],
                tested=[True, False, True, True])
    roles = read_role_heads(tmp_path)
    # tested but without a role (1.1) does not count; untested 0.3 does not either
    assert roles.heads == {(None, 0, 0), (None, 1, 2)}
    assert "tested" in roles.source


def test_q_values_then_untested_labels_are_the_fallbacks(tmp_path):
    write_roles(tmp_path, q_value=[0.01, 0.2, 0.04, 0.5])
    assert read_role_heads(tmp_path).heads == {(None, 0, 0), (None, 1, 1)}
    write_roles(tmp_path, roles=["syntactic", "none", "positional; syntactic", "none"])
    roles = read_role_heads(tmp_path)
    assert roles.heads == {(None, 0, 0), (None, 1, 1)}
    assert "untested" in roles.source
    with pytest.raises(DataError, match="does not exist"):
        read_role_heads(tmp_path / "nowhere")


def test_role_heads_are_pruned_last(tmp_path):
    from tests.pruning_toys import write_pairs

    model = toy_model()  # 2 layers x 4 heads
    write_roles(tmp_path, roles=["syntactic", "positional", "none", "rare-word"])
    roles = read_role_heads(tmp_path)
    mask = role_mask(model, roles)
    assert mask.nonzero().tolist() == [[0, 0], [0, 3], [1, 2]]
    scores = role_scores(model, roles, seed=0)
    assert float(scores[mask].min()) > float(scores[~mask].max())  # roles last, whatever seed
    assert not torch.equal(scores, role_scores(model, roles, seed=1))  # seeded within groups
    importance, evaluation = sts_metrics(write_pairs(tmp_path / "pairs.csv", 32))
    settings = PruneSettings(orders=["roles"], step=0.25, max_fraction=0.75, seeds=2,
                             roles=str(tmp_path))
    curve = prune(model, importance, evaluation, settings).curve
    assert set(curve["seed"]) == {0, 1}
    no_role = {(0, 1), (0, 2), (1, 0), (1, 1), (1, 3)}
    for _, rows in curve.groupby("seed"):
        steps = [parse_heads(t) for t in rows.sort_values("step")["heads_removed"]]
        # steps of 2 heads (25 % of 8): the first two steps take heads without a role; after
        # 6 heads (75 %) every head without a role is gone, and one role head
        assert set(steps[1] + steps[2]) < no_role
        removed = {h for step in steps for h in step}
        assert no_role < removed and len(removed - no_role) == 1


def test_roles_order_needs_a_role_table():
    with pytest.raises(ConfigError, match="--order roles needs --roles"):
        PruneSettings(orders=["roles"]).validate()
    with pytest.raises(ConfigError, match="unknown attention type"):
        PruneSettings(orders=["importance:self"]).validate()


def test_role_tables_of_the_wrong_model_are_refused(tmp_path):
    model = toy_model()
    write_roles(tmp_path, roles=["syntactic"] * 4, attention=["encoder"] * 4)
    with pytest.raises(ConfigError, match="encoder-decoder"):
        role_mask(model, read_role_heads(tmp_path))
    pd.DataFrame({"layer": [5], "head": [0], "roles": ["syntactic"]}).to_csv(
        tmp_path / "head_roles.csv", index=False)
    with pytest.raises(ConfigError, match="not in this model"):
        role_mask(model, read_role_heads(tmp_path))


def test_report_folders_tested_view_and_uncorrected_view(tmp_path):
    """`attnlens heads` writes tables/head_roles.csv with view=tested (roles passed a test)."""
    (tmp_path / "tables").mkdir()
    base = {"layer": [0, 0, 1], "head": [0, 1, 2], "roles": ["positional", "none", "rare-word"]}
    pd.DataFrame({**base, "view": "tested"}).to_csv(tmp_path / "tables" / "head_roles.csv",
                                                    index=False)
    roles = read_role_heads(tmp_path)
    assert roles.heads == {(None, 0, 0), (None, 1, 2)}
    assert "tested role" in roles.source and "tables" in roles.source
    pd.DataFrame({**base, "view": "uncorrected"}).to_csv(
        tmp_path / "tables" / "head_roles.csv", index=False)
    assert "untested" in read_role_heads(tmp_path).source
