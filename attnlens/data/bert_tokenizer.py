"""transformers' fast ``BertTokenizer`` reproduced on the ``tokenizers`` library alone.

Importing transformers and building a tokenizer through ``AutoTokenizer`` costs ~1.5 CPU s
(its lazy import structure, hub utilities, the tokenizer classes); reading ``tokenizer.json``
with ``tokenizers`` costs ~0.03 s. ``load_bert_tokenizer(folder)`` returns a
``BertTokenizerLite`` only where that file gives exactly what transformers 5 builds: a
``BertTokenizer`` (or ``BertTokenizerFast``) named in ``tokenizer_config.json`` with known
settings only, whose ``tokenizer.json`` holds the very normalizer, pre-tokenizer, WordPiece
model, post-processor and decoder that ``BertTokenizer.__init__`` builds from those settings,
and no added tokens but the five special ones. Anything else gives None and the caller uses
transformers (``Tokenizer.from_pretrained``).

``BertTokenizerLite`` answers the part of transformers' tokenizer interface attnlens reads
(calls with padding, truncation, pairs, offsets and special-token masks; decoding; special
tokens and their ids; the vocabulary), following ``TokenizersBackend`` step by step. Any other
attribute or call option is handed to a transformers tokenizer built on first use with the
same settings (``_hf``), so nothing is answered differently, only later.
tests/test_bert_tokenizer.py compares both, backend and outputs, token for token.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tokenizers import AddedToken, Tokenizer, decoders, normalizers, pre_tokenizers, processors
from tokenizers.models import WordPiece

CLASSES = ("BertTokenizer", "BertTokenizerFast")
ROLES = ("unk_token", "sep_token", "pad_token", "cls_token", "mask_token")
# The order of transformers' SPECIAL_TOKENS_ATTRIBUTES (all_special_tokens follows it).
ATTRIBUTES = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token",
              "mask_token")
DEFAULTS = {"unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]",
            "cls_token": "[CLS]", "mask_token": "[MASK]"}
# tokenizer_config.json keys whose meaning is reproduced (or that change nothing here).
KNOWN_KEYS = {"tokenizer_class", "do_lower_case", "tokenize_chinese_chars", "strip_accents",
              "do_basic_tokenize", "never_split", "model_max_length", "name_or_path",
              "special_tokens_map_file", "clean_up_tokenization_spaces", "added_tokens_decoder",
              "backend", *ROLES}
VERY_LARGE_INTEGER = int(1e30)  # transformers' model_max_length when none is saved
LARGE_INTEGER = int(1e20)
# Call options __call__ reproduces; any other goes to transformers.
CALL_OPTIONS = {"add_special_tokens", "padding", "truncation", "max_length", "return_tensors",
                "return_offsets_mapping", "return_special_tokens_mask", "verbose"}


def _read_json(path: Path) -> Any:
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def _content(value: Any) -> str | None:
    """A special token's text, saved as a string or as an AddedToken dict."""
    if isinstance(value, dict):
        return value.get("content")
    return value


def _special_added_token(content: str) -> dict:
    return {"content": content, "single_word": False, "lstrip": False, "rstrip": False,
            "normalized": False, "special": True}


PARTS = ("normalizer", "pre_tokenizer", "post_processor", "decoder")
ADDED_FLAGS = ("single_word", "lstrip", "rstrip", "normalized", "special")


def _parts(backend: Tokenizer) -> dict:
    """The backend's pipeline parts, serialized, and its model's settings (not its vocab)."""
    parts = {name: json.loads(getattr(backend, name).__getstate__())
             if getattr(backend, name) is not None else None for name in PARTS}
    model = backend.model
    parts["model"] = (type(model).__name__, model.unk_token, model.continuing_subword_prefix,
                      model.max_input_chars_per_word)
    return parts


def _expected_parts(config: dict, backend: Tokenizer) -> dict | None:
    """The parts ``BertTokenizer.__init__`` builds from ``config`` (the special tokens' ids
    read from ``backend`` as transformers reads them), as ``_parts`` gives them."""
    tokens = {role: str(config.get(role, DEFAULTS[role])) for role in ROLES}
    cls, sep = tokens["cls_token"], tokens["sep_token"]
    cls_id, sep_id = backend.token_to_id(cls), backend.token_to_id(sep)
    if cls_id is None or sep_id is None:
        return None
    skeleton = Tokenizer(WordPiece({tokens["unk_token"]: 0}, unk_token=tokens["unk_token"]))
    skeleton.normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=config.get("tokenize_chinese_chars", True),
        strip_accents=config.get("strip_accents"), lowercase=config.get("do_lower_case", True))
    skeleton.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    skeleton.decoder = decoders.WordPiece(prefix="##")
    skeleton.post_processor = processors.TemplateProcessing(
        single=f"{cls}:0 $A:0 {sep}:0", pair=f"{cls}:0 $A:0 {sep}:0 $B:1 {sep}:1",
        special_tokens=[(cls, cls_id), (sep, sep_id)])
    return _parts(skeleton)


def _settings(folder: Path) -> dict | None:
    """tokenizer_config.json's settings when transformers would build a fast BertTokenizer
    from them that this module reproduces; else None."""
    if not all((folder / name).is_file() for name in ("tokenizer.json", "tokenizer_config.json")):
        return None
    config = _read_json(folder / "tokenizer_config.json")
    if not isinstance(config, dict) or config.get("tokenizer_class") not in CLASSES:
        return None
    if set(config) - KNOWN_KEYS:
        return None
    if config.get("do_basic_tokenize", True) is not True or config.get("never_split") is not None:
        return None
    if config.get("clean_up_tokenization_spaces", False) is not False:
        return None
    if config.get("backend", "tokenizers") != "tokenizers":
        return None
    for role in ROLES:
        value = config.get(role, DEFAULTS[role])
        if isinstance(value, dict) and _special_added_token(value.get("content")) != {
                k: value.get(k) for k in _special_added_token("")}:
            return None  # an AddedToken with its own flags
        if not isinstance(_content(value), str):
            return None
    special_map_file = folder / "special_tokens_map.json"
    if special_map_file.is_file():
        special_map = _read_json(special_map_file)
        if not isinstance(special_map, dict) or set(special_map) - set(ROLES):
            return None
        for role, value in special_map.items():
            if _content(value) != _content(config.get(role, DEFAULTS[role])):
                return None
    return config


def _backend(folder: Path, config: dict) -> Tokenizer | None:
    """tokenizer.json's backend when it is what transformers builds from ``config``."""
    backend = Tokenizer.from_str((folder / "tokenizer.json").read_text(encoding="utf-8"))
    if type(backend.model).__name__ != "WordPiece":
        return None
    expected = _expected_parts(config, backend)
    if expected is None or _parts(backend) != expected:
        return None
    specials = {_content(config.get(role, DEFAULTS[role])) for role in ROLES}
    added = backend.get_added_tokens_decoder()
    if {token.content for token in added.values()} != specials or len(added) != len(specials):
        return None
    as_special = _special_added_token("")
    for token in added.values():
        if any(getattr(token, flag) != as_special[flag] for flag in ADDED_FLAGS):
            return None
    declared = config.get("added_tokens_decoder")
    if declared is not None:
        saved = {str(i): {"content": t.content, **{f: getattr(t, f) for f in ADDED_FLAGS}}
                 for i, t in added.items()}
        if {str(k): {f: v.get(f) for f in ("content", *ADDED_FLAGS)} for k, v in
                declared.items()} != saved:
            return None
    return backend


def load_bert_tokenizer(path: str | Path) -> BertTokenizerLite | None:
    """The checkpoint folder's tokenizer without transformers, or None where transformers'
    own could differ (module docstring)."""
    folder = Path(path)
    try:
        config = _settings(folder)
        backend = _backend(folder, config) if config is not None else None
    except Exception:  # any surprise in the files: transformers decides
        return None  # transformers reads (or rejects) it instead
    if backend is None:
        return None
    return BertTokenizerLite(backend, config, str(path))


class BatchEncodingLite(dict):
    """transformers' ``BatchEncoding`` as attnlens reads it: a dict, keys as attributes."""

    def __init__(self, data: dict, encodings: list) -> None:
        super().__init__(data)
        self.encodings = encodings

    def __getattr__(self, key: str):
        try:
            return self[key]
        except KeyError as exc:
            raise AttributeError(key) from exc

    def tokens(self, batch_index: int = 0) -> list[str]:
        return self.encodings[batch_index].tokens

    def sequence_ids(self, batch_index: int = 0) -> list[int | None]:
        return self.encodings[batch_index].sequence_ids

    def word_ids(self, batch_index: int = 0) -> list[int | None]:
        return self.encodings[batch_index].word_ids


class BertTokenizerLite:
    """The subset of transformers' fast ``BertTokenizer`` that attnlens uses (module docstring)."""

    is_fast = True

    def __init__(self, backend: Tokenizer, config: dict, name_or_path: str) -> None:
        self._tokenizer = backend
        self._config = config
        self.name_or_path = name_or_path
        self.padding_side = "right"
        self.truncation_side = "right"
        self.split_special_tokens = False
        self.clean_up_tokenization_spaces = False
        self.pad_token_type_id = 0
        self.deprecation_warnings: dict[str, bool] = {}
        self.model_max_length = config.get("model_max_length", VERY_LARGE_INTEGER)
        self._special = {role: _content(config.get(role, DEFAULTS[role])) for role in ROLES}
        self._special.update(bos_token=None, eos_token=None)
        self._delegate = None

    @property
    def model_input_names(self) -> list[str]:
        return ["input_ids", "token_type_ids", "attention_mask"]

    # Special tokens ------------------------------------------------------------------------
    def _token_id(self, token: str | None) -> int | None:
        if token is None:
            return None
        found = self._tokenizer.token_to_id(token)
        return found if found is not None else self._token_id(self._special["unk_token"])

    @property
    def unk_token(self) -> str | None:
        return self._special["unk_token"]

    @property
    def sep_token(self) -> str | None:
        return self._special["sep_token"]

    @property
    def pad_token(self) -> str | None:
        return self._special["pad_token"]

    @pad_token.setter
    def pad_token(self, value: str) -> None:
        # Tokenizer.__init__ sets it only when missing; a BERT tokenizer has one.
        if value != self._special["pad_token"]:
            raise ValueError("BertTokenizerLite keeps its saved pad token.")

    @property
    def cls_token(self) -> str | None:
        return self._special["cls_token"]

    @property
    def mask_token(self) -> str | None:
        return self._special["mask_token"]

    @property
    def bos_token(self) -> None:
        return None

    @property
    def eos_token(self) -> None:
        return None

    @property
    def unk_token_id(self) -> int | None:
        return self._token_id(self.unk_token)

    @property
    def sep_token_id(self) -> int | None:
        return self._token_id(self.sep_token)

    @property
    def pad_token_id(self) -> int | None:
        return self._token_id(self.pad_token)

    @property
    def cls_token_id(self) -> int | None:
        return self._token_id(self.cls_token)

    @property
    def mask_token_id(self) -> int | None:
        return self._token_id(self.mask_token)

    @property
    def bos_token_id(self) -> None:
        return None

    @property
    def eos_token_id(self) -> None:
        return None

    @property
    def all_special_tokens(self) -> list[str]:
        seen: list[str] = []
        for attribute in ATTRIBUTES:
            token = self._special.get(attribute)
            if token is not None and token not in seen:
                seen.append(token)
        return seen

    @property
    def all_special_ids(self) -> list[int]:
        return self.convert_tokens_to_ids(self.all_special_tokens)

    @property
    def added_tokens_decoder(self) -> dict[int, AddedToken]:
        return dict(sorted(self._tokenizer.get_added_tokens_decoder().items()))

    # Vocabulary ----------------------------------------------------------------------------
    @property
    def backend_tokenizer(self) -> Tokenizer:
        return self._tokenizer

    @property
    def vocab_size(self) -> int:
        return self._tokenizer.get_vocab_size(with_added_tokens=False)

    def get_vocab(self) -> dict[str, int]:
        return self._tokenizer.get_vocab(with_added_tokens=True)

    def __len__(self) -> int:
        return self._tokenizer.get_vocab_size(with_added_tokens=True)

    def convert_tokens_to_ids(self, tokens: str | list[str]) -> int | list[int]:
        if isinstance(tokens, str):
            return self._token_id(tokens)
        return [self._token_id(token) for token in tokens]

    def convert_ids_to_tokens(self, ids: int | list[int], skip_special_tokens: bool = False
                              ) -> str | list[str]:
        if isinstance(ids, int):
            return self._tokenizer.id_to_token(ids)
        skip = set(self.all_special_ids) if skip_special_tokens else set()
        return [self._tokenizer.id_to_token(int(i)) for i in ids if int(i) not in skip]

    def decode(self, token_ids, skip_special_tokens: bool = False,
               clean_up_tokenization_spaces: bool | None = None, **kwargs) -> str:
        if clean_up_tokenization_spaces or kwargs:
            return self._hf().decode(token_ids, skip_special_tokens=skip_special_tokens,
                                     clean_up_tokenization_spaces=clean_up_tokenization_spaces,
                                     **kwargs)
        if hasattr(token_ids, "tolist"):
            token_ids = token_ids.tolist()
        if isinstance(token_ids, int):
            token_ids = [token_ids]
        if token_ids and isinstance(token_ids[0], (list, tuple)):
            return self._hf().decode(token_ids, skip_special_tokens=skip_special_tokens)
        return self._tokenizer.decode(list(token_ids), skip_special_tokens=skip_special_tokens)

    # Encoding ------------------------------------------------------------------------------
    def __call__(self, text=None, text_pair=None, **options):
        if set(options) - CALL_OPTIONS or not self._plain_texts(text, text_pair):
            return self._hf()(text, text_pair, **options)
        padding = options.get("padding", False)
        truncation = options.get("truncation")
        max_length = options.get("max_length")
        if padding not in (True, False, "longest") or truncation not in (
                None, True, False, "longest_first") or options.get("return_tensors") not in (
                None, "pt"):
            return self._hf()(text, text_pair, **options)
        if padding is not False and max_length is not None and truncation in (None, False):
            return self._hf()(text, text_pair, **options)  # transformers' own warning
        if max_length is not None and padding is False and truncation is None:
            truncation = "longest_first"
        truncate = truncation not in (None, False)
        if truncate and max_length is None:
            if self.model_max_length > LARGE_INTEGER:
                truncate = False
            else:
                max_length = self.model_max_length
        pad = padding is not False
        if pad and (self.pad_token is None or self.pad_token_id < 0):
            return self._hf()(text, text_pair, **options)  # transformers' own error
        batched = isinstance(text, (list, tuple))
        if batched:
            if not text or isinstance(text_pair, str) or (text_pair is not None
                                              and len(text) != len(text_pair)):
                return self._hf()(text, text_pair, **options)  # transformers' own error
            inputs = list(zip(text, text_pair, strict=True)) if text_pair is not None else text
        else:
            inputs = [(text, text_pair)] if text_pair else [text]
        backend = self._tokenizer
        if truncate:
            backend.enable_truncation(max_length, stride=0, strategy="longest_first",
                                      direction=self.truncation_side)
        else:
            backend.no_truncation()
        if pad:
            backend.enable_padding(direction=self.padding_side, pad_id=self.pad_token_id,
                                   pad_type_id=self.pad_token_type_id, pad_token=self.pad_token,
                                   length=None, pad_to_multiple_of=None)
        else:
            backend.no_padding()
        backend.encode_special_tokens = self.split_special_tokens
        encodings = backend.encode_batch(inputs, add_special_tokens=options.get(
            "add_special_tokens", True), is_pretokenized=False)
        data: dict[str, list] = {"input_ids": [e.ids for e in encodings],
                                 "token_type_ids": [e.type_ids for e in encodings],
                                 "attention_mask": [e.attention_mask for e in encodings]}
        if options.get("return_special_tokens_mask"):
            data["special_tokens_mask"] = [e.special_tokens_mask for e in encodings]
        if options.get("return_offsets_mapping"):
            data["offset_mapping"] = [e.offsets for e in encodings]
        if options.get("return_tensors") == "pt":
            try:
                return BatchEncodingLite(_as_tensors(data), encodings)
            except (ValueError, TypeError):  # ragged rows: transformers' own error
                return self._hf()(text, text_pair, **options)
        if not batched:
            data = {key: (value[0] if value and isinstance(value[0], list) else value)
                    for key, value in data.items()}
        return BatchEncodingLite(data, encodings)

    @staticmethod
    def _plain_texts(text, text_pair) -> bool:
        """Strings or lists of strings (what ``__call__`` reproduces; pre-split words not)."""
        def plain(value) -> bool:
            return isinstance(value, str) or (isinstance(value, (list, tuple))
                                              and all(isinstance(v, str) for v in value))
        return plain(text) and (text_pair is None or plain(text_pair))

    # Everything else: transformers' tokenizer ------------------------------------------------
    def _hf(self):
        """transformers' tokenizer of the same folder, with this one's settings (built once)."""
        if self._delegate is None:
            from transformers import AutoTokenizer

            hf = AutoTokenizer.from_pretrained(self.name_or_path, local_files_only=True)
            hf.padding_side = self.padding_side
            hf.truncation_side = self.truncation_side
            hf.deprecation_warnings.update(self.deprecation_warnings)
            self._delegate = hf
        return self._delegate

    def __getattr__(self, name: str):
        if name.startswith("__") or name in ("_delegate", "_tokenizer", "_config", "_special"):
            raise AttributeError(name)
        return getattr(self._hf(), name)


def _as_tensors(data: dict[str, list]) -> dict:
    """transformers' ``BatchEncoding.convert_to_tensors`` for ``return_tensors="pt"``."""
    import torch

    out = {}
    for key, value in data.items():
        dtype = torch.int64 if _is_empty(value) else None
        out[key] = torch.tensor(value, dtype=dtype)
    return out


def _is_empty(value: list) -> bool:
    """transformers' ``_is_empty``: nested lists without a leaf element."""
    if len(value) == 0:
        return True
    if not isinstance(value[0], (list, tuple)):
        return False
    return all(_is_empty(sub) for sub in value)
