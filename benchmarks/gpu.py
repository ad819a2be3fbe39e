"""A short GPU benchmark: forward, the analyze pass, the spectrum and memory, on one device.

Every figure is a ratio against a baseline measured in this process on the same device (CUDA
work is timed with ``torch.cuda.synchronize`` around it):

- forward: attnlens without hooks / HF SDPA, and attnlens caching every pattern / HF eager
  with ``output_attentions`` (MiniLM, ``--batch`` x ``--length`` random tokens), per dtype;
- analyze pass: every analyzer of `attnlens analyze` over the corpus (UD EWT dev beside the
  checkout, else the embedded sample repeated), results included / a bare HF SDPA forward
  over the same batches;
- spectrum: ``spectral.singular_values`` / ``torch.linalg.svdvals`` on a batch of softmax
  matrices, and top-k (k = 32) / full ``svdvals`` at n = 1,024;
- memory: peak ``torch.cuda.max_memory_allocated`` of the analyze pass on a tiny random
  Llama at 2,048 tokens, 12 layers / 4 layers (memory independent of depth: <= 1.2).

    python benchmarks/gpu.py [--device cuda] [--sentences 512] [--rounds 5] [--quick]

``--device cpu --quick`` runs the same code on the CPU (a check of the script, no figures).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from anywhere: benchmarks/ and tests/ helpers
SHARED_UD = ROOT.parent / "shared/data/ud-ewt/en_ewt-ud-dev.conllu"


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def median_seconds(fn, device: torch.device, rounds: int) -> float:
    fn()  # warm-up (kernels, caches)
    times = []
    for _ in range(rounds):
        sync(device)
        start = time.perf_counter()
        fn()
        sync(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


@torch.no_grad()
def forward(device: torch.device, dtype: torch.dtype, batch: int, length: int, rounds: int):
    from transformers import AutoModel

    import attnlens

    model, _ = attnlens.load(device=device, dtype=dtype)
    path = model.cfg.source["path"]
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(1000, 20000, (batch, length), generator=gen).to(device)
    mask = torch.ones_like(ids)
    names = [f"blocks.{i}.attn.hook_pattern" for i in range(model.n_layers)]
    rows = []
    for implementation, cached in (("sdpa", False), ("eager", True)):
        hf = AutoModel.from_pretrained(path, attn_implementation=implementation,
                                       dtype=dtype).to(device).eval()
        base = median_seconds(lambda hf=hf, c=cached: hf(input_ids=ids, attention_mask=mask,
                                                         output_attentions=c), device, rounds)
        if cached:
            ours = median_seconds(lambda: model.run_with_cache(
                input_ids=ids, attention_mask=mask, names_filter=names), device, rounds)
        else:
            ours = median_seconds(lambda: model(input_ids=ids, attention_mask=mask,
                                                return_type="hidden"), device, rounds)
        label = ("caching every pattern / HF eager output_attentions" if cached
                 else "no hooks / HF SDPA")
        rows.append((label, ours, base))
        del hf
    name = str(dtype).removeprefix("torch.")
    for label, ours, base in rows:
        print(f"  {name:8s} {label:52s} {ours * 1e3:8.1f} / {base * 1e3:8.1f} ms  "
              f"ratio {ours / base:5.2f}  (target <= 1.05)")


def corpus_batches(tokenizer, sentences: int):
    from attnlens.data.corpus import load_corpus

    corpus = load_corpus(text=None, treebank=str(SHARED_UD) if SHARED_UD.is_file() else None)
    batches = corpus.batches(tokenizer, batch_size=16, max_length=128)
    kept, seen = [], 0
    while seen < sentences:  # the embedded sample (43 sentences) is repeated if needed
        for batch in batches:
            if seen >= sentences:
                break
            kept.append(batch)
            seen += batch.size
    return kept, seen, corpus.name


def analyze_pass(device: torch.device, sentences: int) -> None:
    from transformers import AutoModel

    import attnlens
    from attnlens.report.analyze import default_sections
    from attnlens.stream.runner import run_analyzers

    model, tokenizer = attnlens.load(device=device)
    batches, seen, name = corpus_batches(tokenizer, sentences)
    batches = [b.to(device) for b in batches]
    hf = AutoModel.from_pretrained(model.cfg.source["path"], attn_implementation="sdpa",
                                   dtype=torch.float32).to(device).eval()

    @torch.no_grad()
    def bare():
        for batch in batches:
            hf(**batch.model_inputs())

    def ours():
        analyzers = [a for s in default_sections() for a in s.analyzers(model, tokenizer)]
        run_analyzers(model, batches, analyzers, show_progress=False)
        for analyzer in analyzers:
            analyzer.result()

    base = median_seconds(bare, device, 3)
    sync(device)
    start = time.perf_counter()
    ours()
    sync(device)
    spent = time.perf_counter() - start
    print(f"  {seen} sentences of {name}, {len(batches)} batches of 16")
    print(f"  every analyze analyzer (results included) {spent:7.2f} s, bare HF SDPA forward "
          f"{base:6.2f} s: ratio {spent / base:5.2f}  (whole command target <= 1.5)")


def spectrum(device: torch.device, rounds: int, quick: bool) -> None:
    from attnlens.measures.spectrum.singular_values import (
        cumulative_curve,
        singular_values,
        top_singular_values,
    )

    gen = torch.Generator().manual_seed(0)
    for count, n in ((1152, 24), (1152, 128)):
        P = torch.softmax(3 * torch.randn(count, n, n, generator=gen), -1).to(device)
        base = median_seconds(lambda P=P: torch.linalg.svdvals(P), device, rounds)
        ours = median_seconds(lambda P=P: singular_values(P), device, rounds)
        reference = cumulative_curve(torch.linalg.svdvals(P.double()))
        error = float((cumulative_curve(singular_values(P)) - reference).abs().max())
        print(f"  {count} matrices {n} x {n}: svdvals {base * 1e3:7.1f} ms, spectral path "
              f"{ours * 1e3:7.1f} ms: ratio {base / ours:5.2f}  (target >= 3); curve error "
              f"{error:.1e}")
    n = 256 if quick else 1024
    P = torch.softmax(2 * torch.randn(4, n, n, generator=gen), -1).to(device)
    full = median_seconds(lambda: torch.linalg.svdvals(P), device, rounds)
    top = median_seconds(lambda: top_singular_values(P, 32), device, rounds)
    print(f"  4 matrices {n} x {n}: svdvals {full * 1e3:7.1f} ms, top-32 {top * 1e3:7.1f} ms: "
          f"ratio {full / top:5.2f}")


def depth_memory(device: torch.device, quick: bool) -> None:
    """Peak device memory of the analyze pass, deep / shallow tiny Llama (same tokens)."""
    cuda = device.type == "cuda"  # elsewhere the pass runs (a script check), unmeasured
    from attnlens.data.corpus import load_corpus
    from attnlens.loaders import load
    from attnlens.measures.spectrum.section import SpectrumSection
    from attnlens.report.analyze import default_sections
    from attnlens.stream.runner import run_analyzers
    from benchmarks.memory import toy_llama

    tokens = 512 if quick else 2048
    peaks = {}
    with tempfile.TemporaryDirectory() as tmp:
        text = Path(tmp) / "long.txt"
        text.write_text(" ".join(["the", "cat", "sat", "on", "a", "mat"] * tokens)[
            : 4 * tokens] + "\n")
        for layers in (4, 12):
            toy_llama(Path(tmp) / f"llama{layers}", layers)
            model, tokenizer = load(Path(tmp) / f"llama{layers}", device=device)
            batches = load_corpus(text=str(text), treebank=None).batches(
                tokenizer, batch_size=1, max_length=tokens)
            sections = [SpectrumSection(low_rank_cost=False, top_k=32) if s.name == "spectrum"
                        else s for s in default_sections()]
            analyzers = [a for s in sections for a in s.analyzers(model, tokenizer)]
            if cuda:
                torch.cuda.synchronize(device)
                torch.cuda.reset_peak_memory_stats(device)
                before = torch.cuda.memory_allocated(device)
            run_analyzers(model, batches, analyzers, show_progress=False)
            if cuda:
                torch.cuda.synchronize(device)
                peaks[layers] = (torch.cuda.max_memory_allocated(device) - before) / 2**20
            del model, analyzers
            if cuda:
                torch.cuda.empty_cache()
    if not cuda:
        print("  ran; not measured (torch.cuda.max_memory_allocated needs CUDA)")
        return
    print(f"  tiny Llama, {tokens} tokens: pass peak {peaks[4]:.0f} MiB at 4 layers, "
          f"{peaks[12]:.0f} MiB at 12: ratio {peaks[12] / max(peaks[4], 1e-9):.2f}  "
          "(target <= 1.2)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--sentences", type=int, default=512)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="small sizes (a script check)")
    args = parser.parse_args()
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("no CUDA device: torch.cuda.is_available() is False")
    if device.type == "cuda":
        torch.cuda.set_device(device.index or 0)  # a bare 'cuda' has no index
        print(f"device {torch.cuda.get_device_name(device)}, torch {torch.__version__}")
    torch.set_grad_enabled(False)
    batch, length = (4, 32) if args.quick else (64, 128)
    sentences = min(args.sentences, 48) if args.quick else args.sentences
    rounds = 2 if args.quick else args.rounds
    print(f"forward, MiniLM, {batch} x {length} tokens (median of {rounds}):")
    dtypes = [torch.float32] + ([torch.bfloat16, torch.float16] if device.type == "cuda" else [])
    for dtype in dtypes:
        forward(device, dtype, batch, length, rounds)
    print("analyze pass, MiniLM, float32:")
    analyze_pass(device, sentences)
    print("spectrum:")
    spectrum(device, rounds, args.quick)
    print("memory against depth:")
    depth_memory(device, args.quick)


if __name__ == "__main__":
    main()
