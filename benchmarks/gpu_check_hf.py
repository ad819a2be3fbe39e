"""The hf backend on a GPU: parity with eager attention on CUDA, hooks, gates, fast path.

Tiny random checkpoints of several families (saved with ``save_pretrained``, word-level
tokenizers built locally) are loaded with ``attnlens.load(..., backend="hf", device="cuda")``
in float32 and bfloat16; every pattern and the final hidden states are compared with the same
checkpoint under ``attn_implementation="eager"`` on the GPU. Needs torch with CUDA,
transformers and tokenizers; run from the checkout (``PYTHONPATH=.``).

    PYTHONPATH=. python benchmarks/gpu_check_hf.py [cpu]   # cpu: the same checks here
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import torch

import attnlens

SIZES = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
         "num_attention_heads": 4, "max_position_embeddings": 128}
FAMILIES = {
    "llama": ({**SIZES, "num_key_value_heads": 2}, "LlamaForCausalLM"),
    "qwen3": ({**SIZES, "num_key_value_heads": 2, "head_dim": 16}, "Qwen3ForCausalLM"),
    "gemma2": ({**SIZES, "num_key_value_heads": 2, "head_dim": 16, "sliding_window": 8,
                "attn_logit_softcapping": 5.0}, "Gemma2ForCausalLM"),
    "gpt_neox": ({**SIZES, "rotary_pct": 0.5}, "GPTNeoXForCausalLM"),
    "bert": (SIZES, "BertForMaskedLM"),
    "t5": ({"d_model": 64, "d_ff": 128, "d_kv": 16, "num_layers": 2, "num_heads": 4,
            "decoder_start_token_id": 0}, "T5ForConditionalGeneration"),
}
WORDS = ["the", "keeper", "climbed", "stairs", "because", "old", "lamp", "at", "top", "had",
         "to", "be", "lit", "before", "dark"]
TEXT = ["the keeper climbed the stairs because the old lamp at the top had to be lit",
        "the lamp had to be lit before dark"]
DEVICE = sys.argv[1] if len(sys.argv) > 1 else "cuda"


def save(folder: Path, model_type: str) -> None:
    import transformers
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import AutoConfig, PreTrainedTokenizerFast

    vocab = {t: i for i, t in enumerate(["<pad>", "<s>", "</s>", "<unk>", *WORDS])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A </s>", special_tokens=[("<s>", 1), ("</s>", 2)])
    PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", bos_token="<s>",
                            eos_token="</s>", unk_token="<unk>").save_pretrained(folder)
    sizes, architecture = FAMILIES[model_type]
    config = AutoConfig.for_model(model_type, vocab_size=len(vocab), pad_token_id=0,
                                  bos_token_id=1, eos_token_id=2, architectures=[architecture],
                                  **sizes)
    torch.manual_seed(0)
    getattr(transformers, architecture)._from_config(config).save_pretrained(folder)


def diff(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double(), b.double()
    d = (a - b).abs().masked_fill(a.isnan() & b.isnan(), 0.0)
    return float(d.nan_to_num(nan=float("inf")).max())


def check(folder: Path, model_type: str, dtype: torch.dtype) -> list[str]:
    from transformers import AutoModel

    failures = []
    model, tokenizer = attnlens.load(folder, backend="hf", device=DEVICE, dtype=dtype)
    inputs = {k: v.to(DEVICE) for k, v in tokenizer(TEXT, max_length=32).items()
              if k != "token_type_ids"}
    with torch.no_grad():
        hidden, cache = model.run_with_cache(**inputs, return_type="hidden",
                                             names_filter=lambda n: n.endswith("hook_pattern"))
        fast = model(**inputs, return_type="hidden")
        gate = torch.ones(model.n_layers, max(model.heads_per_layer), device=DEVICE)
        gate[0, 0] = 0
        gated = model(**inputs, return_type="hidden", head_mask=gate)
    eager = AutoModel.from_pretrained(folder, attn_implementation="eager", dtype=dtype).to(DEVICE)
    if getattr(eager.config, "is_encoder_decoder", False):
        inputs["decoder_input_ids"], inputs["decoder_attention_mask"] = model.decoder_inputs(
            inputs["input_ids"], inputs["attention_mask"])
    with torch.no_grad():
        reference = eager.eval()(**inputs, output_attentions=True)
    names = [n for n in cache if n.endswith("hook_pattern")]
    theirs = [t for f in ("attentions", "encoder_attentions", "decoder_attentions",
                          "cross_attentions") for t in (getattr(reference, f, None) or ())]
    worst = max(diff(cache[n], t) for n, t in zip(sorted(names), theirs, strict=False)) \
        if model_type != "t5" else 0.0
    if model_type == "t5":  # order the three types as the reference does
        order = [f"encoder.blocks.{i}.attn" for i in range(2)] + [
            f"decoder.blocks.{i}.attn" for i in range(2)] + [
            f"decoder.blocks.{i}.cross_attn" for i in range(2)]
        worst = max(diff(cache[f"{p}.hook_pattern"], t) for p, t in zip(order, theirs,
                                                                         strict=True))
    hidden_diff = diff(hidden, reference.last_hidden_state)
    real = inputs["attention_mask"].bool() if model_type != "t5" else slice(None)
    fast_diff = diff(fast[real], reference.last_hidden_state[real])
    print(f"  {model_type:9s} {dtype!s:15s} patterns {worst:.1e} hidden {hidden_diff:.1e} "
          f"fast path {fast_diff:.1e} gate changes output {diff(gated, fast) > 0}")
    if dtype == torch.float32 and (worst > 1e-6 or hidden_diff > 1e-6):
        failures.append(f"{model_type} {dtype}: patterns {worst:.1e}, hidden {hidden_diff:.1e}")
    if not diff(gated, fast) > 0:
        failures.append(f"{model_type}: head_mask changed nothing")
    return failures


def main() -> int:
    import transformers

    print(f"torch {torch.__version__}, transformers {transformers.__version__}, "
          f"{torch.cuda.get_device_name(0) if DEVICE == 'cuda' else DEVICE}")
    failures = []
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as root:
        for model_type in FAMILIES:
            folder = Path(root) / model_type
            save(folder, model_type)
            for dtype in (torch.float32, torch.bfloat16):
                try:
                    failures += check(folder, model_type, dtype)
                except Exception as exc:  # report every family, then fail
                    failures.append(f"{model_type} {dtype}: {type(exc).__name__}: {exc}")
                    print(f"  {model_type} {dtype}: ERROR {type(exc).__name__}: {exc}")
    print(f"{time.perf_counter() - start:.1f} s")
    for failure in failures:
        print("FAIL", failure)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
