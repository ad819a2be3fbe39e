"""Tiny random Hugging Face models of the families the hf backend is tested on.

Each family: the config class's ``model_type``, small sizes that exercise what the family
passes to its attention (grouped keys, sliding windows shorter than the test inputs, soft-capped
scores, sink logits, relative position bias, fused projections), and the architecture class a
checkpoint of it names.
"""

from __future__ import annotations

from pathlib import Path

import torch

from tests.parity_utils import hf_softmax_in_input_dtype  # noqa: F401 (re-exported for the tests)

TOKEN_IDS = {"pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2}
DECODER = {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
           "num_attention_heads": 4, "max_position_embeddings": 64}

FAMILIES: dict[str, tuple[dict, str]] = {
    "llama": ({**DECODER, "num_key_value_heads": 2}, "LlamaForCausalLM"),
    "qwen3": ({**DECODER, "num_key_value_heads": 2, "head_dim": 8}, "Qwen3ForCausalLM"),
    "mistral": ({**DECODER, "num_key_value_heads": 2, "sliding_window": 4},
                "MistralForCausalLM"),
    "gemma2": ({**DECODER, "num_key_value_heads": 2, "head_dim": 8, "sliding_window": 4,
                "attn_logit_softcapping": 5.0}, "Gemma2ForCausalLM"),
    "gpt_oss": ({**DECODER, "num_key_value_heads": 2, "head_dim": 8, "sliding_window": 4,
                 "num_local_experts": 4, "num_experts_per_tok": 2}, "GptOssForCausalLM"),
    "gpt_neox": ({**DECODER, "rotary_pct": 0.5}, "GPTNeoXForCausalLM"),
    # The other families issue 24 names (Qwen2.5, Gemma 3, Phi-3, OLMo 2, StarCoder2,
    # XLM-R, ELECTRA): each loaded and analysed end to end in tests/test_hf_cli.py.
    "qwen2": ({**DECODER, "num_key_value_heads": 2}, "Qwen2ForCausalLM"),
    "gemma3_text": ({**DECODER, "num_key_value_heads": 2, "head_dim": 8, "sliding_window": 4},
                    "Gemma3ForCausalLM"),
    "phi3": ({**DECODER, "num_key_value_heads": 2}, "Phi3ForCausalLM"),  # fused qkv_proj
    "olmo2": ({**DECODER, "num_key_value_heads": 2}, "Olmo2ForCausalLM"),
    "starcoder2": ({**DECODER, "num_key_value_heads": 2, "sliding_window": 4},
                   "Starcoder2ForCausalLM"),
    "xlm-roberta": ({**DECODER}, "XLMRobertaForMaskedLM"),
    "electra": ({**DECODER, "embedding_size": 16}, "ElectraForPreTraining"),
    "opt": ({"hidden_size": 32, "ffn_dim": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
             "word_embed_proj_dim": 32, "max_position_embeddings": 64}, "OPTForCausalLM"),
    "modernbert": ({**DECODER, "local_attention": 4, "global_attn_every_n_layers": 2,
                    "cls_token_id": 1, "sep_token_id": 2}, "ModernBertForMaskedLM"),
    "bert": ({**DECODER}, "BertForMaskedLM"),
    "gpt2": ({"n_embd": 32, "n_layer": 2, "n_head": 4, "n_positions": 64}, "GPT2LMHeadModel"),
    "t5": ({"d_model": 32, "d_ff": 64, "d_kv": 8, "num_layers": 2, "num_heads": 4,
            "decoder_start_token_id": 0}, "T5ForConditionalGeneration"),
    "bart": ({"d_model": 32, "encoder_ffn_dim": 64, "decoder_ffn_dim": 64, "encoder_layers": 2,
              "decoder_layers": 2, "encoder_attention_heads": 4, "decoder_attention_heads": 4,
              "max_position_embeddings": 64, "decoder_start_token_id": 2},
             "BartForConditionalGeneration"),
}


def tiny_config(model_type: str, vocab_size: int = 64, **overrides):
    from transformers import AutoConfig

    sizes, architecture = FAMILIES[model_type]
    return AutoConfig.for_model(model_type, vocab_size=vocab_size, architectures=[architecture],
                                **TOKEN_IDS, **{**sizes, **overrides})


def tiny_hf(model_type: str, seed: int = 0, base: bool = True, attn: str = "attnlens",
            dtype: torch.dtype = torch.float32, **overrides):
    """A tiny random HF model (the base model, or the architecture class), in eval mode."""
    import transformers
    from transformers import AutoModel

    from attnlens.backends.hf.attention import register

    register()
    config = tiny_config(model_type, **overrides)
    torch.manual_seed(seed)
    if base:
        model = AutoModel.from_config(config, attn_implementation=attn)
    else:
        cls = getattr(transformers, config.architectures[0])
        model = cls._from_config(config, attn_implementation=attn)
    return model.to(dtype).eval()


def padded_batch(vocab_size: int = 64, batch: int = 3, length: int = 9, seed: int = 1):
    """Token ids ``[batch, length]`` (ids 3.., no special ids) and a right-padded mask."""
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, vocab_size, (batch, length), generator=gen)
    mask = torch.ones(batch, length, dtype=torch.long)
    mask[1, length - 3:] = 0
    mask[2, length - 1:] = 0
    return ids, mask


WORDS = ["the", "keeper", "climbed", "stairs", "because", "old", "lamp", "at", "top", "had", "to",
         "be", "lit", "before", "dark", "a", "cat", "sat", "on", "mat", "dog", "ran", "under",
         "big", "red", "house"]
TEXT = ["the keeper climbed the stairs", "a cat sat on the mat", "the old lamp had to be lit "
        "before dark", "the dog ran under the big red house"]


def save_checkpoint(path: Path, model_type: str, seed: int = 0) -> Path:
    """A checkpoint folder (save_pretrained) with a word-level tokenizer, as a user has one."""
    from tests.seq2seq_utils import save_word_tokenizer

    vocab = save_word_tokenizer(path, WORDS)
    model = tiny_hf(model_type, seed=seed, base=False, attn="eager", vocab_size=vocab)
    model.save_pretrained(path)
    return path


def max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    """Largest absolute difference; NaN where both are NaN counts as equal (ModernBERT's
    fully masked padded query rows in float64 are NaN in eager too), NaN on one side as inf."""
    a, b = a.double(), b.double()
    both = a.isnan() & b.isnan()
    diff = (a - b).abs().masked_fill(both, 0.0)
    return float(diff.nan_to_num(nan=float("inf")).max())

