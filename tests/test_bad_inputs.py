"""A catalogue of bad inputs driven through the CLI's entry point, one row per mistake.

Every row asserts: exit status 1; one line on stderr, ``Error: ...``, that names the problem
and the fix (two patterns per row); no traceback; nothing created, changed or deleted in the
working folder (the output folder, its siblings, the inputs, the model); and, where the
mistake can be seen without the model, that no weight was read: the rows run with
``ATTNLENS_FORBID_MODEL_LOAD`` set, which makes reading weights itself an error, so a check
made after loading would print that error instead of the expected one.

The commands run in-process through ``attnlens.cli.app.main`` (the installed ``attnlens``
script's entry point) with ``sys.argv`` set; ``test_a_bad_input_in_a_real_process`` runs a
few rows as real processes.
"""

from __future__ import annotations

import json
import os
import pickle
import re
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from attnlens.loaders.checkpoint import NO_LOAD_ENV
from tests.parity_utils import TINY, save_tiny
from tests.pruning_toys import vocab_size, word_tokenizer, write_pairs

GOOD_TREE = "1\tDogs\tdog\tNOUN\t_\t_\t2\tnsubj\t_\t_\n2\tbark\tbark\tVERB\t_\t_\t0\troot\t_\t_\n"


def _tree(*rows: tuple[str, str, str, str]) -> str:
    """CoNLL-U rows from (ID, FORM, HEAD, DEPREL)."""
    lines = [f"{i}\t{form}\t{form}\tX\t_\t_\t{head}\t{rel}\t_\t_" for i, form, head, rel in rows]
    return "# sent_id = s1\n" + "\n".join(lines) + "\n\n"


def _pairs(rows) -> str:
    return "".join(f"{a},{b},{s}\n" for a, b, s in rows)


THREE_PAIRS = [("the cat sat", "a cat sat", 4.0), ("the dog ran", "a bird saw", 1.0),
               ("big red tree", "a small fish", 0.5)]


@dataclass
class Env:
    """The case's working folder (also the current folder) and shared fixtures."""

    tmp: Path
    tiny: Path  # a tiny BERT checkpoint with a word tokenizer (outside tmp)
    prune_run: Path  # a finished `prune` run of `tiny` on prune_pairs (outside tmp)
    prune_pairs: Path
    monkeypatch: pytest.MonkeyPatch | None = None  # for conditions a file cannot set up

    def write(self, name: str, content: str | bytes) -> str:
        path = self.tmp / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")
        return name

    def folder(self, name: str, files: dict[str, str] | None = None) -> str:
        (self.tmp / name).mkdir()
        for file, text in (files or {}).items():
            self.write(f"{name}/{file}", text)
        return name

    def model_copy(self, name: str = "model") -> Path:
        shutil.copytree(self.tiny, self.tmp / name)
        return self.tmp / name

    def run_copy(self) -> None:
        """The finished prune run as ./out and its data as ./pairs.csv."""
        shutil.copytree(self.prune_run, self.tmp / "out")
        shutil.copy(self.prune_pairs, self.tmp / "pairs.csv")

    def prune(self, *extra: str) -> list[str]:
        return ["prune", str(self.tiny), "--metric", "sts", "--pairs", "pairs.csv", "--order",
                "importance,random", "--seeds", "2", "--step", "0.25", "--max-fraction", "0.75",
                "--batch-size", "8", "--out", "out", *extra]


@dataclass
class Case:
    id: str
    build: Callable[[Env], list[str]]  # writes its files into env.tmp, returns argv
    problem: str  # regex: names what is wrong
    fix: str  # regex: says what to do
    before_load: bool = True


def _nan_checkpoint(env: Env) -> str:
    from safetensors.torch import load_file, save_file

    model = env.model_copy()
    tensors = load_file(model / "model.safetensors")
    name = "encoder.layer.1.attention.self.query.weight"
    tensors[name][3, 5] = float("nan")
    save_file(tensors, model / "model.safetensors", metadata={"format": "pt"})
    return "model"


def _misshaped_checkpoint(env: Env) -> str:
    from safetensors.torch import load_file, save_file

    model = env.model_copy()
    tensors = load_file(model / "model.safetensors")
    tensors["encoder.layer.0.attention.self.key.weight"] = torch.zeros(32, 16)
    save_file(tensors, model / "model.safetensors", metadata={"format": "pt"})
    return "model"


def _pickle_checkpoint(env: Env, payload: object | None = None) -> str:
    from safetensors.torch import load_file

    model = env.model_copy()
    tensors = load_file(model / "model.safetensors")
    (model / "model.safetensors").unlink()
    if payload is None:
        torch.save(tensors, model / "pytorch_model.bin")
    else:
        (model / "pytorch_model.bin").write_bytes(pickle.dumps(payload))
    return "model"


class _RunsCode:
    """A pickle that would create a file when unpickled by plain pickle."""

    def __reduce__(self):
        return (os.mkdir, ("pwned-by-pickle",))


def _sharded(env: Env, index: dict | str) -> str:
    model = env.model_copy()
    text = index if isinstance(index, str) else json.dumps(index)
    (model / "model.safetensors.index.json").write_text(text)
    return "model"


def _partial_left(env: Env) -> list[str]:
    env.folder(".out.partial", {"manifest.json": "{}", "checkpoint/latest.json": "{}"})
    return ["analyze", "--out", "out"]


def _in_current_folder(env: Env) -> list[str]:
    env.write("notes.txt", "keep")
    return ["spectrum", "--out", ".", "--force"]


def _cuda(env: Env) -> list[str]:
    if torch.cuda.is_available():
        pytest.skip("a GPU is present: --device cuda is not a mistake here")
    return ["analyze", "--device", "cuda", "--out", "out"]


def _changed_data(env: Env) -> list[str]:
    env.run_copy()
    with (env.tmp / "pairs.csv").open("a") as handle:
        handle.write("the cat ran,a dog sat,2.5\n")
    return env.prune("--resume")


def _corrupt_settings(env: Env) -> list[str]:
    env.run_copy()
    (env.tmp / "out" / "prune_settings.json").write_text('{"settings": {"step": 0.2')
    return env.prune("--resume")


def _stale_export(env: Env) -> list[str]:
    env.folder("export", {"model.safetensors.index.json": "{}", "config.json": "{}"})
    shutil.copy(env.prune_pairs, env.tmp / "pairs.csv")
    return env.prune("--export", "export")


def _with_pairs(env: Env, *extra: str) -> list[str]:
    shutil.copy(env.prune_pairs, env.tmp / "pairs.csv")
    return env.prune(*extra)


TREE_FIX = "fix the HEAD column"
CASES = [
    # Corpora ---------------------------------------------------------------------------
    Case("text-missing", lambda e: ["analyze", "--text", "nope.txt", "--out", "out"],
         "nope.txt does not exist", "pass a file"),
    Case("text-is-a-folder", lambda e: ["analyze", "--text", e.folder("corpus"), "--out", "out"],
         "corpus is a folder", "pass a file"),
    Case("text-not-utf8", lambda e: ["analyze", "--text", e.write("l.txt", "caf\xe9\n".encode(
        "latin-1")), "--out", "out"], "is not UTF-8 text", "convert it"),
    Case("text-binary", lambda e: ["spectrum", "--text", e.write("b.txt", bytes(range(256))),
                                   "--out", "out"], "is not UTF-8 text", "convert it"),
    Case("text-nul-only", lambda e: ["analyze", "--text", e.write("n.txt", "\0\0\0\n\0\n"),
                                     "--out", "out"], "holds NUL bytes", "pass a UTF-8 text"),
    Case("text-nul-inside", lambda e: ["asymmetry", "--text", e.write(
        "n.txt", "A fine line.\nAnother\0line.\n"), "--out", "out"], r"NUL bytes \(line 2\)",
        "pass a UTF-8 text"),
    Case("text-control-only", lambda e: ["analyze", "--text", e.write(
        "c.txt", "\x01\x02\x1b\n\x7f\x0b\n\u200b\n"), "--out", "out"], "contains no text",
        "one sentence per line"),
    Case("text-whitespace-only", lambda e: ["collapse", "--text", e.write("w.txt", " \n\t\n"),
                                            "--out", "out"], "contains no text",
         "one sentence per line"),
    Case("text-and-treebank", lambda e: ["analyze", "--text", e.write("t.txt", "Hi.\n"),
                                         "--treebank", e.write("t.conllu", GOOD_TREE)],
         "either --text or --treebank", "not both"),
    Case("parse-without-text", lambda e: ["heads", "--parse", "--out", "out"],
         "--parse parses a plain-text file", "--text"),
    Case("rarity-corpus-missing", lambda e: ["heads", "--rarity-corpus", "freq.txt", "--out",
                                             "out"], "freq.txt does not exist", "pass a file"),
    # Treebanks -------------------------------------------------------------------------
    Case("treebank-missing", lambda e: ["heads", "--treebank", "no.conllu", "--out", "out"],
         "--treebank file no.conllu does not exist", "CoNLL-U"),
    Case("treebank-columns", lambda e: ["heads", "--treebank", e.write(
        "t.conllu", "1\tDogs\tdog\n\n"), "--out", "out"], "has 3 columns",
        "10 tab-separated columns"),
    Case("treebank-head-out-of-range", lambda e: ["heads", "--treebank", e.write("t.conllu", _tree(
        ("1", "Dogs", "7", "nsubj"), ("2", "bark", "0", "root"))), "--out", "out"],
        "has head 7, which is not a word", TREE_FIX),
    Case("treebank-cycle", lambda e: ["analyze", "--treebank", e.write("t.conllu", _tree(
        ("1", "a", "2", "x"), ("2", "b", "1", "y"), ("3", "c", "0", "root"))), "--out", "out"],
        r"sentence 1 \(s1\): word 1 \('a'\) -> word 2 \('b'\) -> word 1 \('a'\) form a cycle",
        TREE_FIX),
    Case("treebank-no-root", lambda e: ["analyze", "--treebank", e.write("t.conllu", _tree(
        ("1", "a", "2", "x"), ("2", "b", "1", "y"))), "--out", "out"],
        "sentence 1 .*has no root", TREE_FIX),
    Case("treebank-self-loop", lambda e: ["heads", "--treebank", e.write("t.conllu", _tree(
        ("1", "a", "1", "x"), ("2", "b", "0", "root"))), "--out", "out"],
        r"word 1 \('a'\) is its own head", TREE_FIX),
    Case("treebank-two-roots", lambda e: ["heads", "--treebank", e.write("t.conllu", _tree(
        ("1", "a", "0", "root"), ("2", "b", "0", "root"))), "--out", "out"],
        "2 words have HEAD 0", "one root"),
    Case("treebank-not-utf8", lambda e: ["heads", "--treebank", e.write(
        "t.conllu", GOOD_TREE.replace("Dogs", "Chi\xe9ns").encode("latin-1")), "--out", "out"],
        "is not UTF-8 text", "convert it"),
    Case("treebank-no-sentences", lambda e: ["heads", "--treebank", e.write(
        "t.conllu", "# just a comment\n\n"), "--out", "out"], "contains no sentences",
        "CoNLL-U treebank"),
    # Options -----------------------------------------------------------------------------
    Case("format-gif", lambda e: ["analyze", "--format", "png,gif", "--out", "out"],
         "unknown figure format gif", "use png, svg, pdf"),
    Case("batch-size-zero", lambda e: ["analyze", "--batch-size", "0", "--out", "out"],
         "Invalid value for '--batch-size'", "see 'attnlens analyze --help'"),
    Case("max-length-too-small", lambda e: ["spectrum", "--max-length", "2", "--out", "out"],
         "Invalid value for '--max-length'", "--help"),
    Case("unknown-option", lambda e: ["analyze", "--outt", "x"], "No such option: --outt",
         "--help"),
    Case("option-without-value", lambda e: ["heads", "--max-length"],
         "Option '--max-length' requires an argument", "see 'attnlens heads --help'"),
    Case("dtype-unknown", lambda e: ["analyze", "--dtype", "float8", "--out", "out"],
         "unknown dtype 'float8'", "choose one of"),
    Case("device-unknown", lambda e: ["analyze", "--device", "tpu9", "--out", "out"],
         "unknown device 'tpu9'", "use 'cpu'"),
    Case("device-cuda-without-gpu", _cuda, "no CUDA GPU is available", "--device cpu"),
    Case("synthetic-with-model", lambda e: ["collapse", "--synthetic", str(e.tiny)],
         "--synthetic builds random stacks", "drop MODEL"),
    Case("depth-without-synthetic", lambda e: ["collapse", "--depth", "4", "--out", "out"],
         "--depth only apply to --synthetic", "depth and widths are its own"),
    Case("weights-only-with-text", lambda e: ["asymmetry", "--weights-only", "--text",
                                              e.write("t.txt", "Hi.\n")],
         "--weights-only reads no corpus", "drop --text"),
    # Output folders ----------------------------------------------------------------------
    Case("out-is-a-file", lambda e: ["analyze", "--out", e.write("report", "x")],
         "--out report is a file", "pass a folder"),
    Case("out-not-empty", lambda e: ["spectrum", "--out", e.folder("mine", {"thesis.tex": "x"})],
         "--out mine is not empty", "add --force"),
    Case("out-is-the-model", lambda e: ["asymmetry", str(e.model_copy()), "--weights-only",
                                        "--out", "model", "--force"],
         "--out model is the source model", "choose another folder"),
    Case("out-holds-the-model", lambda e: ["asymmetry", str(e.model_copy("models/m")),
                                           "--weights-only", "--out", "models", "--force"],
         "--out models holds the source model", "choose another folder"),
    Case("out-holds-an-input", lambda e: ["analyze", "--text", e.write("d/t.txt", "Hi there.\n"),
                                          "--out", "d", "--force"],
         "--out d holds the input file --text", "choose another folder"),
    Case("out-is-the-current-folder", lambda e: _in_current_folder(e),
         "holds the current or home folder", "choose one"),
    Case("resume-a-foreign-folder", lambda e: ["analyze", "--resume", "--out", e.folder(
        "mine", {"a.txt": "x"})], "holds no attnlens run to resume", "choose another folder"),
    Case("partial-run-left", _partial_left, "an interrupted run is in", "add --resume"),
    Case("view-out-exists", lambda e: ["view", "Hi there.", "--out", e.write(
        "page.html", "<p>my notes</p>")], "--out page.html already exists and is not empty",
        "add --force to replace it"),
    Case("view-out-in-the-model", lambda e: ["view", str(e.model_copy()), "Hi there.", "--out",
                                             "model/page.html", "--force"],
         "is inside the source model", "choose another file"),
    # Models ------------------------------------------------------------------------------
    Case("model-missing", lambda e: ["analyze", "./no-model", "--out", "out"],
         "model folder './no-model' does not exist", "pass"),
    Case("model-without-config", lambda e: ["analyze", e.folder("m", {"x.txt": "x"}), "--out",
                                            "out"], "has no config.json", "Hugging Face model"),
    Case("model-config-not-json", lambda e: ["analyze", e.folder("m", {"config.json": "{oops"}),
                                             "--out", "out"], "cannot read .*config.json",
         "model's JSON config"),
    Case("model-remote-code-only", lambda e: ["analyze", e.folder("m", {"config.json": json.dumps(
        {"model_type": "evil", "auto_map": {"AutoModel": "evil.Model"}})}), "--out", "out"],
        "evil", "supported|attnlens models"),
    Case("index-not-json", lambda e: ["analyze", _sharded(e, "{not json"), "--out", "out"],
         "model.safetensors.index.json is not a valid index", "re-save the checkpoint"),
    Case("index-missing-shard", lambda e: ["analyze", _sharded(e, {"weight_map": {
        "w": "model-00002.safetensors"}}), "--out", "out"],
        "names shard 'model-00002.safetensors', which is missing", "re-save the checkpoint"),
    Case("index-shard-outside", lambda e: ["analyze", _sharded(e, {"weight_map": {
        "w": "../../etc/passwd"}}), "--out", "out"], "outside its folder",
        "re-save the checkpoint"),
    Case("pickle-without-opt-in", lambda e: ["asymmetry", _pickle_checkpoint(e), "--weights-only",
                                             "--out", "out"],
         "has only pickle weights", "pass --allow-pickle"),
    Case("pickle-that-runs-code", lambda e: ["asymmetry", _pickle_checkpoint(e, _RunsCode()),
                                             "--weights-only", "--allow-pickle", "--out", "out"],
         "holds more than plain weights and was refused", "weights_only=True",
         before_load=False),
    Case("nan-weights", lambda e: ["asymmetry", _nan_checkpoint(e), "--weights-only", "--out",
                                   "out"],
         "'encoder.layer.1.attention.self.query.weight' .* holds 1 NaN or infinite",
         "re-export or re-download", before_load=False),
    Case("misshaped-tensor", lambda e: ["asymmetry", _misshaped_checkpoint(e), "--weights-only",
                                        "--out", "out"],
         r"has shape \(32, 16\), expected \(32, 32\)", "config.json", before_load=False),
    # Sentence pairs ----------------------------------------------------------------------
    Case("pairs-missing", lambda e: ["eval", "stsb", "--pairs", "p.csv"], "p.csv does not exist",
         "CSV of sentence1,sentence2,score"),
    Case("pairs-folder", lambda e: ["eval", "stsb", "--pairs", e.folder("p")], "p is a folder",
         "pass a file"),
    Case("pairs-not-utf8", lambda e: ["eval", "stsb", "--pairs", e.write(
        "p.csv", _pairs(THREE_PAIRS).replace("cat", "caf\xe9").encode("latin-1"))],
        "is not UTF-8 text", "convert it"),
    Case("pairs-two-columns", lambda e: ["eval", "stsb", "--pairs", e.write("p.csv", "a,b\n")],
         "expected 3 columns", "sentence1,sentence2,score"),
    Case("pairs-header", lambda e: ["eval", "stsb", "--pairs", e.write(
        "p.csv", "sentence1,sentence2,score\n" + _pairs(THREE_PAIRS))],
        "score 'score' is not a number", "has no header"),
    Case("pairs-nan-score", lambda e: ["eval", "stsb", "--pairs", e.write(
        "p.csv", _pairs([*THREE_PAIRS, ("x y", "y z", "nan")]))], "not a finite number", "p.csv:4"),
    Case("pairs-out-of-range", lambda e: ["eval", "stsb", "--pairs", e.write(
        "p.csv", _pairs([*THREE_PAIRS, ("x y", "y z", 7.5)]))], "score 7.5 is outside 0..5",
        "--score-range LOW,HIGH"),
    Case("pairs-constant-scores", lambda e: ["eval", "stsb", "--pairs", e.write(
        "p.csv", _pairs([(a, b, 3.0) for a, b, _ in THREE_PAIRS]))],
        "all 3 gold scores .* are equal", "Spearman correlation is undefined: use pairs"),
    Case("pairs-too-few", lambda e: ["eval", "stsb", "--pairs", e.write(
        "p.csv", _pairs(THREE_PAIRS[:2]))], "holds 2 sentence pair", "needs at least 3"),
    Case("pairs-empty-sentence", lambda e: ["eval", "stsb", "--pairs", e.write(
        "p.csv", _pairs([*THREE_PAIRS, ("", "a b", 1.0)]))], "sentence1 is empty",
        "fill it in or remove"),
    Case("pairs-nul", lambda e: ["eval", "stsb", "--pairs", e.write(
        "p.csv", _pairs(THREE_PAIRS) + "a\0b,c,1\n")], "holds NUL bytes", "UTF-8 text"),
    Case("score-range-reversed", lambda e: ["eval", "stsb", "--pairs", e.write(
        "p.csv", _pairs(THREE_PAIRS)), "--score-range", "5,0"], "LOW must be below HIGH",
        "both finite"),
    Case("score-range-not-numbers", lambda e: ["eval", "stsb", "--pairs", e.write(
        "p.csv", _pairs(THREE_PAIRS)), "--score-range", "low"], "must be two numbers",
        "--score-range 0,5"),
    Case("pairs-option-missing", lambda e: ["eval", "stsb"], "Missing option '--pairs'",
         "--help"),
    # Pruning -----------------------------------------------------------------------------
    Case("prune-data-missing", lambda e: e.prune(), "pairs.csv does not exist", "pass a file"),
    Case("prune-unknown-metric", lambda e: _with_pairs(e, "--metric", "bleu"),
         "unknown --metric 'bleu'", "choose auto or one of"),
    Case("prune-unknown-order", lambda e: _with_pairs(e, "--order", "magnitude"),
         "unknown order 'magnitude'", "choose from"),
    Case("prune-step-zero", lambda e: _with_pairs(e, "--step", "0"), "--step must be a fraction",
         r"\(0, 1\]"),
    Case("prune-eval-fraction", lambda e: _with_pairs(e, "--eval-fraction", "1.5"),
         "evaluation fraction must be between 0 and 1", "1.5"),
    Case("prune-min-heads-above-count", lambda e: _with_pairs(e, "--min-heads-per-layer", "4"),
         "keeps all 4 heads of every layer, so nothing can be pruned", "choose 0 to 3"),
    Case("prune-export-step-past-end", lambda e: _with_pairs(e, "--export", "exp",
                                                             "--export-step", "9"),
         "--export-step 9 is outside the run, whose steps are 0 to 3", "choose one of them"),
    Case("prune-export-into-source-model", lambda e: _with_pairs(e, "--export", str(e.tiny),
                                                                 "--force"),
         "--export .* is the source model", "never replaces it"),
    Case("prune-export-equals-out", lambda e: _with_pairs(e, "--export", "out"),
         "--export and --out must be separate folders", "choose another --export"),
    Case("prune-export-stale-shards", _stale_export, "--export export is not empty",
         "add --force"),
    Case("prune-score-range-excludes-data", lambda e: _with_pairs(e, "--score-range", "0,1"),
         "is outside 0..1", "--score-range"),
    Case("prune-resume-changed-data", _changed_data,
         r"--resume refused: the contents of --pairs \(.*pairs.csv\) changed", "same inputs"),
    Case("prune-resume-other-step", lambda e: e.run_copy() or e.prune("--resume", "--step", "0.5"),
         "--resume refused: --step was 0.25, now 0.5", "same inputs and options"),
    Case("prune-resume-corrupt-settings", _corrupt_settings, "prune_settings.json is damaged",
         "start over with --force", before_load=False),
]


# Issue 23: numbers, config.json, the environment's errors, bad data, locks ------------------
def _config(env: Env, drop: str | None = None, **changes) -> list[str]:
    """The tiny model with config.json edited; ``spectrum`` on it (checked before loading)."""
    model = env.model_copy()
    config = json.loads((model / "config.json").read_text())
    config.pop(drop, None)
    config.update(changes)
    (model / "config.json").write_text(json.dumps(config))
    return ["spectrum", "model", "--out", "out"]


def _edit_tensors(env: Env, edit: Callable[[dict], None]) -> str:
    from safetensors.torch import load_file, save_file

    model = env.model_copy()
    tensors = load_file(model / "model.safetensors")
    edit(tensors)
    save_file(tensors, model / "model.safetensors", metadata={"format": "pt"})
    return "model"


def _int8(tensors: dict) -> None:
    name = "encoder.layer.0.attention.self.query.weight"
    tensors[name] = tensors[name].mul(100).to(torch.int8)


def _small_vocabulary(env: Env) -> str:
    """A model with 20 embedding rows under the 29-token word tokenizer."""
    model = _edit_tensors(env, lambda t: t.update({
        "embeddings.word_embeddings.weight": t["embeddings.word_embeddings.weight"][:20].clone()}))
    config = json.loads((env.tmp / model / "config.json").read_text())
    (env.tmp / model / "config.json").write_text(json.dumps({**config, "vocab_size": 20}))
    return model


def _ascii_only_tokenizer(env: Env) -> str:
    """The tiny model with a word tokenizer that drops every non-ASCII letter and adds no
    special tokens: a Japanese sentence gives no tokens at all."""
    from tokenizers import Regex, models, normalizers, pre_tokenizers
    from tokenizers import Tokenizer as RustTokenizer
    from transformers import PreTrainedTokenizerFast

    from tests.pruning_toys import SPECIALS, WORDS

    model = env.model_copy()
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        (model / name).unlink(missing_ok=True)
    rust = RustTokenizer(models.WordLevel({t: i for i, t in enumerate(SPECIALS + WORDS)},
                                          unk_token="[UNK]"))
    rust.normalizer = normalizers.Replace(Regex("[^a-z ]"), "")
    rust.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=rust, unk_token="[UNK]",
                            pad_token="[PAD]").save_pretrained(str(model))
    return "model"


def _truncated_weights(env: Env) -> str:
    model = env.model_copy()
    data = (model / "model.safetensors").read_bytes()
    (model / "model.safetensors").write_bytes(data[: len(data) // 2])
    return "model"


def _dead_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def _lock(env: Env, folder: str, pid: int) -> None:
    """``folder``'s lock as a run with process ``pid`` on this host would leave it."""
    import socket

    holder = {"pid": pid, "host": socket.gethostname(), "started": "2026-01-01T00:00:00+00:00",
              "command": f"attnlens analyze --out {folder}", "process_start": None}
    env.write(f".{folder}.lock", json.dumps(holder))


def _report(env: Env, name: str, rows: str, numeric: list[str] | None = None) -> str:
    """A report folder holding one head_stats table (``rows`` after its header)."""
    record = {} if numeric is None else {"numeric_columns": {"head_stats": numeric}}
    env.folder(name, {"run.json": json.dumps(record),
                      "tables/head_stats.csv": "layer,head,measure,value\n" + rows})
    return name


def _read_only(env: Env) -> None:
    """The working folder reported read-only, as a read-only mount is (statvfs ST_RDONLY);
    tests/test_known_errors.py mounts a real one where it may."""
    import attnlens.runs.io

    tmp = env.tmp.resolve()
    env.monkeypatch.setattr(attnlens.runs.io, "_read_only",
                            lambda folder: Path(folder).resolve() == tmp)


def _edited_prune_scores(env: Env) -> str:
    """The finished prune run as ./out, its first score replaced by text."""
    env.run_copy()
    path = env.tmp / "out" / "prune_scores.csv"
    header, first, *rest = path.read_text().splitlines()
    path.write_text("\n".join([header, first.rsplit(",", 1)[0] + ",big", *rest]) + "\n")
    return "out"


def _with_lines(env: Env, name: str, line: str, n: int) -> str:
    return env.write(name, (line + "\n") * n)


LONG_NAME = "r" * 250  # with the work folder's 14 bytes beside it: over 255
DUPLICATE_ID = _tree(("1", "a", "0", "root"), ("2", "b", "1", "x"), ("2", "c", "1", "y"))
L0 = ("--method", "l0", "--order", "importance")
ISSUE_23_CASES = [
    # One validator for every number (attnlens/numeric.py) ----------------------------------
    Case("max-length-overflow", lambda e: ["spectrum", "--max-length", "9" * 20, "--out", "out"],
         "--max-length 9{20} is out of range", "give a whole number from 4 to 2147483647"),
    Case("batch-size-overflow", lambda e: ["analyze", "--batch-size", "9" * 20, "--out", "out"],
         "--batch-size 9{20} is out of range", "give a whole number from 1 to"),
    Case("checkpoint-every-overflow", lambda e: ["heads", "--checkpoint-every", "9" * 25, "--out",
                                                 "out"], "--checkpoint-every .* is out of range",
         "whole number"),
    Case("windows-overflow", lambda e: ["sparse", "--windows", "1,100000000000000000000", "--out",
                                        "out"], "--windows 100000000000000000000 is out of range",
         "give a whole number from 0 to"),
    Case("windows-exponent", lambda e: ["sparse", "--windows", "1e20", "--out", "out"],
         "--windows takes whole numbers", "like 1,2,4,8,16"),
    Case("budget-mb-inf", lambda e: ["view", "Hi there.", "--budget-mb", "inf", "--out",
                                     "p.html"], "--budget-mb inf is not a finite number",
         "give a number from 0.5 to 1000000"),
    Case("view-heads-overflow", lambda e: ["view", "Hi there.", "--heads", "0,99999999999",
                                           "--out", "p.html"],
         "--heads 99999999999 is out of range", "give a whole number from 0"),
    Case("seed-negative", lambda e: ["heads", "--seed", "-1", "--out", "out"],
         "--seed -1 is out of range", "from 0 to 4294967295"),
    Case("factor-inf", lambda e: ["asymmetry", "--factor", "inf", "--out", "out"],
         "--factor inf is not a finite number", "give a number of at least 1"),
    Case("qk-gain-huge", lambda e: ["collapse", "--synthetic", "--qk-gain", "1e300"],
         "--qk-gain 1e\\+300 is out of range", "from -1000 to 1000"),
    Case("l0-temperature-nan", lambda e: _with_pairs(e, *L0, "--l0-temperature", "nan"),
         "--l0-temperature nan is not a finite number", r"give a number in \(0, 100\]"),
    Case("l0-temperature-zero", lambda e: _with_pairs(e, *L0, "--l0-temperature", "0"),
         "--l0-temperature 0 is out of range", r"give a number in \(0, 100\]"),
    Case("l0-init-inf", lambda e: _with_pairs(e, *L0, "--l0-init", "inf"),
         "--l0-init inf is not a finite number", "from -100 to 100"),
    Case("l0-lr-nan", lambda e: _with_pairs(e, *L0, "--l0-lr", "nan"),
         "--l0-lr nan is not a finite number", "above 0|in \\(0"),
    Case("lambda-nan", lambda e: _with_pairs(e, *L0, "--lambda", "0.01,nan"),
         "--lambda nan is not a finite number", "of at least 0"),
    Case("l0-stretch-inf", lambda e: _with_pairs(e, *L0, "--l0-stretch", "-inf,1.1"),
         "--l0-stretch -inf is not a finite number", "finite number"),
    Case("eval-fraction-nan", lambda e: _with_pairs(e, "--eval-fraction", "nan"),
         "--eval-fraction nan is not a finite number", "give a"),
    Case("export-step-without-export", lambda e: _with_pairs(e, "--export-step", "2"),
         "--export-step 2 chooses the step --export writes", "add --export DIR"),
    # config.json checked per family (attnlens/loaders/config_checks.py) ---------------------
    Case("config-heads-missing", lambda e: _config(e, drop="num_attention_heads"),
         "num_attention_heads is missing", "fix it in config.json"),
    Case("config-width-string", lambda e: _config(e, hidden_size="32"),
         "hidden_size is '32', a string", "without quotes"),
    Case("config-width-float", lambda e: _config(e, hidden_size=32.0),
         "hidden_size is 32.0, a float", "write it as the integer 32"),
    Case("config-zero-heads", lambda e: _config(e, num_attention_heads=0),
         "num_attention_heads is 0", "an integer from 1 to"),
    Case("config-negative-layers", lambda e: _config(e, num_hidden_layers=-2),
         "num_hidden_layers is -2", "an integer from 1 to 4096"),
    Case("config-huge-layers", lambda e: _config(e, num_hidden_layers=10**12),
         "num_hidden_layers is 1000000000000", "an integer from 1 to 4096"),
    Case("config-width-not-divisible", lambda e: _config(e, num_attention_heads=5),
         "hidden_size 32 is not divisible by num_attention_heads 5", "fix one of them"),
    Case("config-negative-epsilon", lambda e: _config(e, layer_norm_eps=-1e-12),
         "layer_norm_eps is -1e-12", "finite number above 0"),
    # The environment's errors, in one line with a next step ----------------------------------
    Case("out-dangling-symlink", lambda e: (e.tmp / "out").symlink_to(e.tmp / "gone") or [
        "analyze", "--out", "out"], "--out out is a symbolic link to .*gone, which does not exist",
        "remove the link"),
    Case("out-name-too-long", lambda e: ["spectrum", "--out", LONG_NAME],
         "is 264 bytes long with what attnlens adds, over the file system's 255",
         "choose a shorter name"),
    Case("view-out-name-too-long", lambda e: ["view", "Hi there.", "--out", LONG_NAME],
         "over the file system's 255", "choose a shorter name"),
    Case("out-under-a-file", lambda e: ["spectrum", "--out", e.write("notes", "x") + "/report"],
         "notes is a file, not a folder", "pass a path inside a folder"),
    Case("view-out-under-a-file", lambda e: ["view", "Hi there.", "--out",
                                             e.write("notes", "x") + "/page.html"],
         "notes is a file, not a folder", "pass a path inside a folder"),
    Case("out-read-only", lambda e: _read_only(e) or ["spectrum", "--out", "out"],
         "is on a read-only file system", "choose a folder on a writable disk"),
    Case("view-out-read-only", lambda e: _read_only(e) or ["view", "Hi there.", "--out",
                                                           "page.html"],
         "is on a read-only file system", "choose a folder on a writable disk"),
    Case("int8-weights", lambda e: ["asymmetry", _edit_tensors(e, _int8), "--weights-only",
                                    "--out", "out"],
         "'encoder.layer.0.attention.self.query.weight' holds int8 values",
         "use the model's unquantized checkpoint", before_load=False),
    Case("damaged-safetensors", lambda e: ["asymmetry", _truncated_weights(e), "--weights-only",
                                           "--out", "out"],
         "cannot read .*model.safetensors: .*damaged or incomplete",
         "download or copy it again", before_load=False),
    Case("tokenizer-past-vocabulary", lambda e: ["view", _small_vocabulary(e), "the cat sat",
                                                 "--out", "p.html"],
         "gives token ids up to 28, but the model has 20 embedding rows",
         "use the tokenizer saved with this model", before_load=False),
    Case("tokenizer-gives-no-tokens", lambda e: [
        "spectrum", _ascii_only_tokenizer(e), "--text", e.write("t.txt", "the cat\n日本語\n"),
        "--out", "out", "--quiet"], r"sentence 2 of t.txt .*\('日本語'\) gives no tokens",
        "remove such lines", before_load=False),
    Case("view-gives-no-tokens", lambda e: ["view", _ascii_only_tokenizer(e), "日本語", "--out",
                                            "p.html", "--quiet"],
         "the input has no tokens", "give a text the model's tokenizer covers",
         before_load=False),
    Case("out-of-memory-bootstrap", lambda e: [
        "heads", str(e.tiny), "--text", _with_lines(e, "t.txt", "the cat sat", 300),
        "--bootstrap", "2147483647", "--quiet", "--out", "out"],
        r"out of memory \(it asked for [\d,.]+ GB at once\)",
        r"lower --bootstrap 2147483647 \(default 1000\)", before_load=False),
    Case("out-of-memory-width", lambda e: ["collapse", "--synthetic", "--width", "1000000",
                                           "--quiet", "--out", "out"],
         "out of memory", "lower --width 1000000", before_load=False),
    Case("report-text-in-numeric-column", lambda e: ["report", _report(
        e, "rep", "0,0,entropy,0.5\n0,1,entropy,high\n", ["value"])],
        "head_stats.csv:3: column 'value' holds 'high'", "fix that cell, or rerun"),
    Case("report-text-in-head-column", lambda e: ["report", _report(
        e, "rep", "0,0,entropy,0.5\n0,one,entropy,0.3\n")],
        "head_stats.csv:3: column 'head' holds 'one'.*whole numbers", "fix that cell"),
    Case("compare-text-in-numeric-column", lambda e: [
        "compare", _report(e, "a", "0,0,entropy,0.5\n0,1,entropy,0.3\n", ["value"]),
        _report(e, "b", "0,0,entropy,0.5\n0,1,entropy,n/a!\n", ["value"]), "--out", "cmp"],
        "b/tables/head_stats.csv:3: column 'value' holds 'n/a!'", "rerun the command"),
    Case("report-prune-text-in-score", lambda e: ["report", _report(
        e, "rep", "0,0,entropy,0.5\n"), "--prune", _edited_prune_scores(e)],
        "out/prune_scores.csv:2: column 'score' holds 'big'", "fix that cell"),
    # Bad data analysed as good ---------------------------------------------------------------
    Case("treebank-duplicate-id", lambda e: ["heads", "--treebank", e.write(
        "t.conllu", DUPLICATE_ID), "--out", "out"],
        r"t.conllu:4, sentence 1 \(s1\): word ID 2 appears twice \(lines 3 and 4\)",
        "fix the ID column"),
    Case("treebank-bad-id-line", lambda e: ["heads", "--treebank", e.write(
        "t.conllu", GOOD_TREE + "\nx\tb\tb\tX\t_\t_\t0\troot\t_\t_\n"), "--out", "out"],
        "t.conllu:4 is not valid CoNLL-U: .*'x' is not a valid ID", "fix that line"),
    Case("text-is-a-treebank", lambda e: ["analyze", "--text", e.write("t.conllu", GOOD_TREE),
                                          "--out", "out"],
         "--text t.conllu is a CoNLL-U treebank", "pass it with --treebank instead"),
    Case("prune-data-is-a-treebank", lambda e: ["prune", str(e.tiny), "--metric", "fidelity",
                                                "--data", e.write("t.conllu", GOOD_TREE)],
         "--data t.conllu is a CoNLL-U treebank", "give a file of plain text"),
    Case("prune-auto-data-treebank", lambda e: ["prune", str(e.tiny), "--data", e.write(
        "t.conllu", GOOD_TREE * 3)], "--data t.conllu is a CoNLL-U treebank", "give a file of"),
    Case("pairs-is-a-treebank", lambda e: ["eval", "stsb", "--pairs", e.write(
        "p.csv", GOOD_TREE)], "--pairs p.csv is a CoNLL-U treebank", "sentence1,sentence2,score"),
    Case("prune-data-mixed-columns", lambda e: ["prune", str(e.tiny), "--data", e.write(
        "d.csv", "a b,1\nc d,e f,2\n")], "d.csv:2: 3 column\\(s\\)", "every row alike"),
    Case("prune-accuracy-data-three-columns", lambda e: [
        "prune", str(e.tiny), "--metric", "accuracy", "--data", e.write(
            "d.csv", _pairs(THREE_PAIRS))], "d.csv:1: 3 column", "text,label rows"),
    Case("prune-seq2seq-data-not-tab-separated", lambda e: [
        "prune", str(e.tiny), "--metric", "seq2seq", "--data", e.write(
            "d.txt", "a source,a target\nanother,one\n")],
        "d.txt:1: expected source<TAB>target", "one pair per line"),
    Case("pairs-identical-sentences", lambda e: ["eval", "stsb", "--pairs", e.write(
        "p.csv", _pairs([(a, a, s) for a, _, s in THREE_PAIRS]))],
        "the two sentences are identical", "use pairs of different sentences"),
    # Two runs, one folder (attnlens/runs/folder_lock.py) ------------------------------------------
    Case("out-locked-by-a-running-run", lambda e: _lock(e, "out", os.getpid()) or [
        "spectrum", "--out", "out"],
        rf"--out out is being written by another attnlens run \(pid {os.getpid()} ",
        "wait for it to end, or choose another --out"),
    Case("out-locked-by-a-killed-run", lambda e: _lock(e, "out", _dead_pid()) or [
        "analyze", "--out", "out"], "locked by an attnlens run that is no longer running",
        "add --resume to continue what it kept, or --force to start over"),
    Case("out-locked-by-a-killed-run-not-resumable", lambda e: _lock(e, "out", _dead_pid()) or [
        "spectrum", "--out", "out"], "no longer running", "add --force to start over"),
    Case("prune-export-locked", lambda e: _lock(e, "exp", os.getpid()) or _with_pairs(
        e, "--export", "exp"), "--export exp is being written by another attnlens run",
        "choose another --export"),
]
CASES += ISSUE_23_CASES


# Issue 23 (fix23a): removed heads recorded in config.json, shards linked out of the folder.
def _pruned_heads(env: Env, field: object) -> str:
    model = env.model_copy()
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, "pruned_heads": field}))
    return "model"


def _shard_linked_outside(env: Env) -> str:
    model = env.model_copy()
    outside = env.tmp / "elsewhere"
    outside.mkdir()
    (model / "model.safetensors").rename(outside / "weights.safetensors")
    (model / "model-00001-of-00001.safetensors").symlink_to(outside / "weights.safetensors")
    (model / "model.safetensors.index.json").write_text(json.dumps(
        {"weight_map": {"w": "model-00001-of-00001.safetensors"}}))
    return "model"


CASES += [
    Case("pruned-heads-bad-layer", lambda e: ["analyze", _pruned_heads(e, {"5": [0]}), "--out",
                                              "out"],
         "\"pruned_heads\" names layer '5'; the model has layers 0 to 1",
         "fix or remove \"pruned_heads\" in config.json"),
    Case("pruned-heads-live-head", lambda e: ["asymmetry", _pruned_heads(e, {"0": [1]}),
                                              "--weights-only", "--out", "out"],
         "lists head L0H1, whose weights are not zero", "fix or remove \"pruned_heads\"",
         before_load=False),
    Case("index-shard-linked-outside", lambda e: ["analyze", _shard_linked_outside(e), "--out",
                                                  "out"],
         "a link to .*outside the model folder", "copy the shard files into the folder"),
]


# Fixtures --------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def shared(tmp_path_factory) -> tuple[Path, Path, Path]:
    """(tiny checkpoint, a finished prune run of it, its pairs file), built once."""
    from attnlens.cli.app import main
    from transformers import BertConfig, BertModel

    base = tmp_path_factory.mktemp("shared")
    tiny = base / "tiny"
    save_tiny(BertModel, BertConfig(vocab_size=vocab_size(), **TINY), tiny)
    word_tokenizer().hf.save_pretrained(str(tiny))
    pairs = write_pairs(base / "pairs.csv", 24)
    env = Env(base, tiny, base / "out", pairs)
    argv = sys.argv
    handlers = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    sys.argv = ["attnlens", *env.prune("--quiet")]
    cwd = Path.cwd()
    os.chdir(base)
    try:
        with pytest.raises(SystemExit) as done:
            main()
        assert done.value.code == 0
    finally:
        os.chdir(cwd)
        sys.argv = argv
        signal.signal(signal.SIGINT, handlers[0])
        signal.signal(signal.SIGTERM, handlers[1])
    return tiny, base / "out", pairs


def _snapshot(folder: Path) -> dict[str, bytes | None]:
    """Every path under ``folder`` with its bytes (None for folders)."""
    return {
        str(p.relative_to(folder)): (p.read_bytes() if p.is_file() else None)
        for p in sorted(folder.rglob("*"))
    }


@pytest.fixture
def cli(monkeypatch, capsys, tmp_path, tmp_path_factory):
    """Run ``attnlens ARGS`` in-process in ``tmp_path``; return (exit code, stderr)."""
    from attnlens.cli.app import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ATTNLENS_DEBUG", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("cache")))
    handlers = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)

    def run(argv: list[str], forbid_load: bool) -> tuple[int, str]:
        monkeypatch.setattr(sys, "argv", ["attnlens", *argv])
        if forbid_load:
            monkeypatch.setenv(NO_LOAD_ENV, "1")
        capsys.readouterr()
        try:
            with pytest.raises(SystemExit) as exit_info:
                main()
        finally:
            signal.signal(signal.SIGINT, handlers[0])
            signal.signal(signal.SIGTERM, handlers[1])
            monkeypatch.delenv(NO_LOAD_ENV, raising=False)
        return exit_info.value.code, capsys.readouterr().err

    return run


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_is_one_line_error_before_loading_leaving_nothing(case, cli, shared, tmp_path,
                                                                     monkeypatch):
    env = Env(tmp_path, *shared[:2], shared[2], monkeypatch)
    argv = case.build(env)
    before = _snapshot(tmp_path)
    code, err = cli(argv, forbid_load=case.before_load)
    lines = err.strip().splitlines()
    assert code == 1, err
    assert len(lines) == 1 and lines[0].startswith("Error: "), err
    assert "Traceback" not in err and NO_LOAD_ENV not in err, err
    message = lines[0]
    assert re.search(case.problem, message), f"problem not named: {message}"
    assert re.search(case.fix, message), f"fix not given: {message}"
    assert _snapshot(tmp_path) == before, "the command created, changed or deleted files"


def test_the_catalogue_is_large_and_distinct():
    assert len(CASES) >= 110
    assert len({c.id for c in CASES}) == len(CASES)


@pytest.mark.parametrize("argv", [
    ["analyze", "--text", "missing.txt", "--out", "out"],
    ["analyze", "--batch-size", "0"],
    ["eval", "stsb", "--pairs", "p.csv"],
])
def test_a_bad_input_in_a_real_process(argv, tmp_path):
    result = subprocess.run([sys.executable, "-m", "attnlens.cli.app", *argv], cwd=tmp_path,
                            capture_output=True, text=True, timeout=300,
                            env={**os.environ, NO_LOAD_ENV: "1"})
    assert result.returncode == 1
    assert len(result.stderr.strip().splitlines()) == 1 and result.stderr.startswith("Error: ")
    assert list(tmp_path.iterdir()) == []


def test_the_load_guard_bites(cli, shared, tmp_path):
    """Without a mistake, the guard itself is the error: the rows above would notice a check
    made after the weights were read."""
    code, err = cli(["asymmetry", str(shared[0]), "--weights-only", "--out", "out"], True)
    assert code == 1 and f"model loading is forbidden here ({NO_LOAD_ENV} is set)" in err
    assert list(tmp_path.iterdir()) == []
