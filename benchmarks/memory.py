"""Peak memory of the analysis: independent of depth, and of corpus size.

Targets (DESIGN.md): peak memory of `analyze` (every default section) on a tiny random
Llama at 2,048 tokens with 24 layers / the same with 4 layers <= 1.2; MiniLM on 2,001 UD EWT
dev sentences / on their first 200 <= 1.1.

Method: each case runs in a fresh Python process (``--child``), so nothing of another case is
counted; the process reports its peak resident set size (``ru_maxrss``: every allocation,
torch's CPU tensors included, which tracemalloc cannot see) and its resident size just
before the corpus pass. Printed: the ratio of peak RSS (what the target names) and the ratio
of the pass's own growth (peak minus the pre-pass RSS, which removes the ~0.5 GB of imports
and weights that dilute the first ratio). The Llama case uses the spectrum's top-k option
(k = 32 for n >= 1,024): the full spectrum of 96 matrices of 2,048 x 2,048 takes minutes and
the same memory per layer. The corpus case batches the sentences as `analyze` does (at most
64 sentences and 1,024 padded tokens a batch) and takes the corpus' first 200 sentences as
``--max-sentences 200`` does.

    python benchmarks/memory.py [--depth-only | --corpus-only] [--quick]

``--quick`` checks the script on small cases (2 -> 6 layers at 512 tokens, 50 -> 200
sentences): its ratios are not the targets' settings.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

from bench_record import record, this_command

SHARED_UD = Path(__file__).resolve().parents[2] / "shared/data/ud-ewt/en_ewt-ud-dev.conllu"
WORDS = ["the", "a", "cat", "dog", "sat", "ran", "on", "under", "mat", "rug", "big", "small",
         "red", "blue", "fast", "slow", "bird", "fish", "tree", "house", "saw", "ate", "near"]


def rss_mib() -> float:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * resource.getpagesize() / 2**20


def peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def toy_llama(folder: Path, layers: int) -> None:
    """A tiny random Llama with a word-level tokenizer, saved as a checkpoint folder."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaModel, PreTrainedTokenizerFast

    vocab = {w: i for i, w in enumerate(["<unk>", "<s>", "</s>", *WORDS])}
    rust = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    rust.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=rust, unk_token="<unk>", bos_token="<s>",
                            eos_token="</s>", pad_token="</s>").save_pretrained(folder)
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(vocab), hidden_size=64, intermediate_size=128,
                         num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=4096)
    LlamaModel(config).eval().save_pretrained(folder)


def run_child(kind: str, size: int, tokens: int = 2048) -> dict:
    import torch

    from attnlens.data.corpus import load_corpus
    from attnlens.data.text import REPORT_BATCH_SIZE, REPORT_BATCH_TOKENS
    from attnlens.loaders import load
    from attnlens.measures.spectrum.section import SpectrumSection
    from attnlens.report.analyze import analyze, default_sections

    torch.set_num_threads(2)
    with tempfile.TemporaryDirectory() as tmp:
        sections = default_sections()
        if kind == "depth":
            toy_llama(Path(tmp) / "llama", size)
            text = Path(tmp) / "long.txt"
            text.write_text(" ".join(WORDS[i % len(WORDS)] for i in range(tokens - 1)) + "\n")
            model, tokenizer = load(Path(tmp) / "llama")
            batches = load_corpus(text=str(text), treebank=None).batches(
                tokenizer, batch_size=1, max_length=tokens)
            sections = [SpectrumSection(low_rank_cost=False, top_k=32) if s.name == "spectrum"
                        else s for s in sections]
        else:
            model, tokenizer = load(None)  # the corpus' first `size` sentences, batched as
            # `analyze` batches them (--max-sentences size, default --batch-size/--batch-tokens)
            corpus = load_corpus(text=None, treebank=str(SHARED_UD), max_sentences=size)
            batches = corpus.batches(tokenizer, batch_size=REPORT_BATCH_SIZE, max_length=128,
                                     batch_tokens=REPORT_BATCH_TOKENS)
        before = rss_mib()
        analyze(model, tokenizer, batches, Path(tmp) / "out", sections=sections,
                show_progress=False)
        return {"before": before, "peak": peak_mib(),
                "tokens": int(sum(int(b.attention_mask.sum()) for b in batches))}


def measure(kind: str, size: int, tokens: int = 2048) -> dict:
    done = subprocess.run([sys.executable, __file__, "--child", kind, str(size), str(tokens)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(done.stderr[-3000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def report(label: str, small: dict, large: dict, target: float) -> tuple[str, float, str]:
    """Print the case; return its ratio as printed, the ratio and the peaks as printed."""
    growth = (large["peak"] - large["before"]) / max(small["peak"] - small["before"], 1.0)
    print(f"{label}: peak RSS {small['peak']:.0f} -> {large['peak']:.0f} MiB; "
          f"pass growth {small['peak'] - small['before']:.0f} -> "
          f"{large['peak'] - large['before']:.0f} MiB")
    print(f"ratio peak memory {large['peak'] / small['peak']:.3f}  (target <= {target}); "
          f"ratio of the pass's growth {growth:.3f}")
    return (f"{large['peak'] / small['peak']:.3f}", large["peak"] / small["peak"],
            f"{small['peak']:.0f} -> {large['peak']:.0f} MiB")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    parser.add_argument("--depth-only", action="store_true")
    parser.add_argument("--corpus-only", action="store_true")
    parser.add_argument("--quick", action="store_true", help="small cases (not the targets')")
    args = parser.parse_args()
    if args.child:
        kind, size, tokens = args.child
        print(json.dumps(run_child(kind, int(size), int(tokens))))
        return
    layers, tokens, sentences = ((2, 6), 512, (50, 200)) if args.quick else \
        ((4, 24), 2048, (200, 2001))
    cases = []  # (figure, target, (ratio as printed, ratio, peaks as printed))
    if not args.corpus_only:
        cases.append((f"{layers[1]} / {layers[0]} layers (tiny Llama, {tokens:,} tokens)", 1.2,
                      report(f"tiny Llama, {tokens:,} tokens, {layers[0]} -> {layers[1]} layers",
                             measure("depth", layers[0], tokens),
                             measure("depth", layers[1], tokens), 1.2)))
    if not args.depth_only:
        if not SHARED_UD.is_file():
            print(f"skipped the corpus case: {SHARED_UD} is absent")
        else:
            cases.append((f"{sentences[1]:,} / {sentences[0]:,} sentences (MiniLM, UD EWT dev)",
                          1.1,
                          report(f"MiniLM, UD EWT dev, {sentences[0]:,} -> {sentences[1]:,} "
                                 "sentences", measure("corpus", sentences[0]),
                                 measure("corpus", sentences[1]), 1.1)))
    if cases:
        record("peak memory: " + "; ".join(figure for figure, _, _ in cases),
               "; ".join(f"<= {target}" for _, target, _ in cases),
               "; ".join(printed for _, _, (printed, _, _) in cases)
               + " (peak RSS " + "; ".join(peaks for _, _, (_, _, peaks) in cases) + ")",
               all(ratio <= target for _, target, (_, ratio, _) in cases), this_command(),
               key="memory")


if __name__ == "__main__":
    main()
