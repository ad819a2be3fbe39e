"""A prune folder from Python (``attnlens.measures.pruning.folder.prune_folder``) equals the one
`attnlens prune` writes: the same tables, byte for byte but for the measured seconds.

The tiny random BERT and STS pairs of tests/test_prune_cli_methods.py; the command runs
in-process.
"""

from __future__ import annotations

import json

import pandas as pd

from attnlens.loaders import load
from attnlens.measures.pruning import PruneSettings
from attnlens.measures.pruning.folder import prune_folder
from attnlens.measures.pruning.job import PruneJob
from tests.test_prune_cli_methods import checkpoint, pairs, run_prune  # noqa: F401 (fixtures)

OPTIONS = ("--order", "importance,random", "--seeds", "1", "--step", "0.25",
           "--max-fraction", "0.5", "--max-length", "32")


def test_a_python_user_gets_the_prune_folder_of_the_command(checkpoint, pairs,  # noqa: F811
                                                            tmp_path, monkeypatch, capsys):
    cli_out, lib_out = tmp_path / "cli", tmp_path / "lib"
    code = run_prune(monkeypatch, checkpoint, pairs, cli_out, *OPTIONS)
    assert code == 0, capsys.readouterr().err

    model, tokenizer = load(str(checkpoint))
    job = PruneJob(data=pairs, metric="sts", data_option="--pairs",
                   settings=PruneSettings(orders=["importance", "random"], seeds=1, step=0.25,
                                          max_fraction=0.5))
    run = prune_folder(model, tokenizer, job, lib_out, batch_size=8, max_length=32)

    # manifest.json: the command's options, which --resume compares; a Python run has none
    cli_files = sorted(p.name for p in cli_out.iterdir() if p.name != "manifest.json")
    assert sorted(p.name for p in lib_out.iterdir()) == cli_files
    assert {"prune_curve.csv", "prune_curve.md", "prune_scores.csv", "prune_curve.svg",
            "run.json"} <= set(cli_files)
    for table in ("prune_scores.csv", "prune_settings.json"):  # no timings: byte-identical
        assert (lib_out / table).read_bytes() == (cli_out / table).read_bytes()
    curves = [pd.read_csv(out / "prune_curve.csv").drop(columns=["seconds"])
              for out in (cli_out, lib_out)]
    pd.testing.assert_frame_equal(curves[1], curves[0], check_exact=True)
    assert len(curves[0]) > 2 and set(curves[0]["order"]) == {"importance", "random"}
    records = [json.loads((out / "run.json").read_text()) for out in (cli_out, lib_out)]
    for record in records:
        record.pop("seconds")
    assert records[1] == records[0]
    assert run.result.baseline == records[0]["baseline"]  # the tables in memory as well
    assert run.result.curve["metric"].tolist() == curves[0]["metric"].tolist()


def test_a_python_job_is_checked_like_the_command(tmp_path):
    import pytest

    from attnlens.errors import ConfigError

    with pytest.raises(ConfigError, match="unknown --metric 'bleu'"):
        PruneJob(data=tmp_path / "x.csv", metric="bleu").check()
    with pytest.raises(ConfigError, match="evaluation fraction must be between 0 and 1"):
        PruneJob(data=tmp_path / "x.csv", metric="sts", eval_fraction=1.5).check()
