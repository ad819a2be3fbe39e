"""Tiny random causal LMs saved with save_pretrained, for the viewer's long-input and
generation tests (MiniLM takes at most 512 positions): a Llama with grouped-query attention
(4 query heads sharing 2 key/value heads) and 16,384 positions, and a GPT-2; both with a
byte-level BPE tokenizer, so tokens carry the space marker ``Ġ``."""

from __future__ import annotations

from pathlib import Path

WORDS = ("the", "keeper", "climbed", "the", "stairs", "because", "the", "old", "lamp", "at",
         "the", "top", "had", "to", "be", "lit", "before", "dark", "and", "the", "sea", "was",
         "rough", "that", "night", "while", "ships", "passed", "far", "out")


def long_text(tokens: int) -> str:
    """A text of at least ``tokens`` tokens for these tokenizers (one word is one or more)."""
    return " ".join(WORDS[i % len(WORDS)] for i in range(tokens)) + "."


def save_bpe_tokenizer(path: Path) -> None:
    """A byte-level BPE tokenizer (GPT-2 style, no special tokens around a text)."""
    from tokenizers import Tokenizer as RustTokenizer
    from tokenizers import decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    rust = RustTokenizer(models.BPE())
    rust.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    rust.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    rust.train_from_iterator([" ".join(WORDS)] * 20, trainer)
    PreTrainedTokenizerFast(tokenizer_object=rust, bos_token="<|endoftext|>",
                            eos_token="<|endoftext|>").save_pretrained(str(path))


def save_tiny_llama(path: Path, positions: int = 16384) -> Path:
    from transformers import LlamaConfig, LlamaForCausalLM

    from attnlens.loaders.verify import save_tiny

    config = LlamaConfig(vocab_size=300, hidden_size=64, intermediate_size=128,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         head_dim=16, max_position_embeddings=positions,
                         bos_token_id=0, eos_token_id=0, tie_word_embeddings=False)
    save_tiny(LlamaForCausalLM, config, path)
    save_bpe_tokenizer(path)
    return path


def save_tiny_gpt2(path: Path, positions: int = 256) -> Path:
    from transformers import GPT2Config, GPT2LMHeadModel

    from attnlens.loaders.verify import save_tiny

    config = GPT2Config(vocab_size=300, n_embd=32, n_layer=2, n_head=4, n_positions=positions,
                        bos_token_id=0, eos_token_id=0)
    save_tiny(GPT2LMHeadModel, config, path)
    save_bpe_tokenizer(path)
    return path
