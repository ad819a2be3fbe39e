"""Long inputs: `attnlens heads` on one long document, memory and time against length.

Targets (issue 27, DESIGN.md): a tiny random Llama (2 layers, 4 heads, d_head 16, 16,384
positions) running `attnlens heads MODEL --text ONE_LONG_DOCUMENT --max-length N` at 4,096,
8,192 and 16,384 tokens: peak RSS at 16,384 / at 4,096 <= 4.5 (linear growth of the state;
a quadratic path would be 16), time ratio <= 20 (the attention arithmetic is quadratic), and
every table at 2,048 tokens equal to the whole-matrix path (--query-block 2048, one block)
within 1e-6 (relative for values above 1: ``compare_tables``).

Method: each run is a fresh Python process (``--child``) that calls the CLI in-process and
reports its peak resident set size (``ru_maxrss``: torch's CPU tensors included) and the
command's wall time. The model and its word-level tokenizer are built locally (random
weights from a config; nothing is downloaded). ``--query-block`` is passed to every run
(default 512; 300 for the run compared with the whole matrix, a size that divides neither
length) so the figures do not depend on the machine's free memory; the command's own
default chooses it from free memory (docs/long-context.md). Head clustering (on by default
in `attnlens heads`) reads whole matrices, so it runs only up to the whole-matrix limit
(4,096): the scaling runs pass --no-clusters so that every length runs the same analyses;
the comparison at 2,048 tokens includes it. The last line compares the two ways of getting
the attention output on a long input (docs/long-context.md).

On a GPU (``--gpu``): a random 1B-class Llama-style config (16 layers, 32 heads, d_model
2,048) at 32,768 tokens, `attnlens heads --text --device cuda`, records peak device memory
and time (skipped without CUDA). ``--quick`` uses small lengths (a check that the script
works, not the targets' figures).

``--backend hf`` runs the same commands with `attnlens heads --backend hf` (the checkpoint run
through transformers' own modules, attnlens' attention function computing the query
blocks) and times the attention-output comparison on the hf backend's attention function.

    python benchmarks/long_context.py [--quick] [--query-block 512] [--gpu] [--backend hf]
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
from bench_record import record, this_command

WORDS = ["the", "a", "cat", "dog", "sat", "ran", "on", "under", "mat", "rug", "big", "small",
         "red", "blue", "fast", "slow", "bird", "fish", "tree", "house", "saw", "ate", "near",
         "river", "stone", "light", "quietly", "yesterday", "garden", "window", "paper"]
TOLERANCE = 1e-6


def toy_llama(folder: Path, layers: int = 2, heads: int = 4, d_head: int = 16,
              positions: int = 16384, intermediate: int | None = None,
              device: str = "cpu") -> None:
    """A random Llama (weights from a config, seed 0, initialised on ``device``: the GPU
    case builds its 1B-class model there, seconds instead of a minute) with a word-level
    tokenizer, saved as a checkpoint folder; nothing is downloaded."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaModel, PreTrainedTokenizerFast

    vocab = {w: i for i, w in enumerate(["<unk>", "<s>", "</s>", *WORDS])}
    rust = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    rust.pre_tokenizer = pre_tokenizers.Whitespace()
    PreTrainedTokenizerFast(tokenizer_object=rust, unk_token="<unk>", bos_token="<s>",
                            eos_token="</s>", pad_token="</s>").save_pretrained(folder)
    torch.manual_seed(0)
    hidden = heads * d_head
    config = LlamaConfig(vocab_size=len(vocab), hidden_size=hidden,
                         intermediate_size=intermediate or 2 * hidden,
                         num_hidden_layers=layers, num_attention_heads=heads,
                         num_key_value_heads=heads, max_position_embeddings=positions,
                         bos_token_id=1, eos_token_id=2)
    with torch.device(device):
        model = LlamaModel(config).eval()
    model.save_pretrained(folder)


def long_document(path: Path, words: int) -> None:
    """One line of ``words`` words (a seeded random walk over the vocabulary)."""
    rng = np.random.default_rng(0)
    path.write_text(" ".join(rng.choice(WORDS, size=words)) + "\n")


def run_child(model: str, text: str, out: str, extra: list[str]) -> dict:
    """`attnlens heads` in this process: (peak RSS MiB, seconds, peak CUDA MiB or None)."""
    import torch
    from attnlens.cli.app import app

    torch.set_num_threads(2)
    # --null none: the long-input path alone (the null model would run every pass twice)
    args = ["heads", model, "--text", text, "--out", out, "--quiet", "--null", "none", *extra]
    start = time.perf_counter()
    try:
        app(args, standalone_mode=False)
    except SystemExit as exc:
        if exc.code:
            raise
    seconds = time.perf_counter() - start
    usage = resource.getrusage(resource.RUSAGE_SELF)
    cuda = None
    if torch.cuda.is_available() and "--device" in extra:
        cuda = torch.cuda.max_memory_allocated() / 2**20
    return {"peak": usage.ru_maxrss / 1024, "seconds": seconds,
            "cpu": usage.ru_utime + usage.ru_stime, "cuda_peak": cuda}


def measure(model: Path, text: Path, out: Path, length: int, extra: list[str]) -> dict:
    args = [str(model), str(text), str(out),
            json.dumps(["--max-length", str(length), *extra])]
    done = subprocess.run([sys.executable, __file__, "--child", *args],
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"length {length}: {done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def compare_tables(a: Path, b: Path) -> tuple[int, float]:
    """(tables compared, largest difference of a float cell) between two report folders;
    exits when a table differs in shape, columns or a non-float cell. A cell's difference is
    absolute up to magnitude 1 and relative above (``|x - y| / max(1, |x|)``): float32 holds
    a mean distance of ~500 tokens to 6e-5, so an absolute 1e-6 there asks both runs to add
    the same float32 terms in the same order, not to agree within float32 rounding."""
    worst, count = 0.0, 0
    for path in sorted((a / "tables").glob("*.csv")):
        mine, theirs = pd.read_csv(path), pd.read_csv(b / "tables" / path.name)
        if mine.shape != theirs.shape or list(mine.columns) != list(theirs.columns):
            raise SystemExit(f"{path.name}: shapes {mine.shape} and {theirs.shape} differ")
        for column in mine.columns:
            x, y = mine[column], theirs[column]
            if pd.api.types.is_float_dtype(x) or pd.api.types.is_float_dtype(y):
                scale = np.maximum(1.0, np.abs(x.to_numpy(float)))
                diff = np.abs(x.to_numpy(float) - y.to_numpy(float)) / scale
                same_nan = np.isnan(x.to_numpy(float)) == np.isnan(y.to_numpy(float))
                if not same_nan.all():
                    raise SystemExit(f"{path.name}:{column}: NaN in one run only")
                if np.isfinite(diff).any():
                    worst = max(worst, float(np.nanmax(diff)))
            elif not x.equals(y):
                raise SystemExit(f"{path.name}:{column}: values differ")
        count += 1
    return count, worst


def cpu_case(args) -> None:
    lengths = (1024, 2048, 4096) if args.quick else (4096, 8192, 16384)
    reference = 512 if args.quick else 2048
    backend = ["--backend", args.backend]
    block = [*backend, "--query-block", str(args.query_block)]
    # head clustering reads whole matrices: on by default it runs at and below the
    # whole-matrix limit (4,096) only, so the scaling runs leave it out at every length
    scaling = [*block, "--no-clusters"]
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        toy_llama(tmp / "llama", positions=max(lengths))
        long_document(tmp / "doc.txt", max(lengths) + 100)
        whole = measure(tmp / "llama", tmp / "doc.txt", tmp / "whole", reference,
                        [*backend, "--query-block", str(reference)])
        blocks = measure(tmp / "llama", tmp / "doc.txt", tmp / "blocks", reference,
                         [*backend, "--query-block", str(args.compare_block)])
        count, worst = compare_tables(tmp / "whole", tmp / "blocks")
        print(f"backend {args.backend}")
        print(f"{reference:,} tokens: {count} tables (head clustering included), --query-block "
              f"{args.compare_block} vs one block (the whole matrix): largest difference "
              "(relative above 1) "
              f"{worst:.1e} (target <= {TOLERANCE:.0e}); {whole['seconds']:.1f} s vs "
              f"{blocks['seconds']:.1f} s")
        runs = {}
        for length in lengths:
            runs[length] = measure(tmp / "llama", tmp / "doc.txt", tmp / f"out{length}",
                                   length, scaling)
            print(f"{length:6,} tokens: peak RSS {runs[length]['peak']:7.0f} MiB, "
                  f"{runs[length]['seconds']:6.1f} s wall, {runs[length]['cpu']:6.1f} s CPU "
                  "(--no-clusters)")
    first, last = runs[lengths[0]], runs[lengths[-1]]
    print(f"ratio peak RSS {lengths[-1]:,} / {lengths[0]:,}: "
          f"{last['peak'] / first['peak']:.2f}  (target <= 4.5; quadratic: 16)")
    print(f"ratio time {lengths[-1]:,} / {lengths[0]:,}: "
          f"{last['seconds'] / first['seconds']:.2f} wall, {last['cpu'] / first['cpu']:.2f} CPU"
          "  (target <= 20)")
    print_output_paths(lengths[-1], args.query_block, "cpu", args.rounds, args.backend)
    rss, wall = last["peak"] / first["peak"], last["seconds"] / first["seconds"]
    record(f"long inputs in query blocks, {args.backend} backend: `attnlens heads --text` on one "
           f"document (tiny Llama), peak RSS and time {lengths[-1]:,} / {lengths[0]:,} tokens; "
           f"tables at {reference:,} tokens vs the whole matrix (relative above 1)",
           f"<= 4.5; <= 20; within {TOLERANCE:.0e}",
           f"{rss:.2f}; {wall:.2f}; within {worst:.1e} ({last['peak']:.0f} vs "
           f"{first['peak']:.0f} MiB; {last['seconds']:.1f} vs {first['seconds']:.1f} s wall)",
           rss <= 4.5 and wall <= 20 and worst <= TOLERANCE, this_command(),
           key=f"long.cpu.{args.backend}")
    if worst > TOLERANCE:
        raise SystemExit(f"tables differ by {worst:.1e} > {TOLERANCE:.0e}")


def median_times(blocks_path, fused_path, rounds: int) -> tuple[float, float]:
    """Median seconds of the two output paths, after a warm-up, alternated round by round."""
    import torch

    times = {"blocks": [], "fused": []}
    with torch.no_grad():
        for fn in (blocks_path, fused_path):
            fn()  # warm-up
        for _ in range(rounds):
            for name, fn in (("blocks", blocks_path), ("fused", fused_path)):
                start = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - start)
    return statistics.median(times["blocks"]), statistics.median(times["fused"])


def output_paths(length: int, rows: int, device: str = "cpu", heads: int = 4,
                 d_head: int = 16, rounds: int = 3) -> tuple[float, float]:
    """Seconds per call of one causal attention layer over ``length`` tokens with its pattern
    read in blocks of ``rows``: (output from the same blocks, ``pattern @ v`` per block;
    output from SDPA's fused kernel plus the blocks' scores and softmax recomputed for the
    statistics). Medians of ``rounds``."""
    import torch
    import torch.nn.functional as F

    from attnlens.hooks import accepts_query_blocks
    from attnlens.model.attention import MultiHeadAttention
    from attnlens.model.masks import mask_from_parts
    from attnlens.model.query_blocks import QueryBlocks

    torch.manual_seed(0)
    d_model = heads * d_head
    attn = MultiHeadAttention(d_model, heads, causal=True, rotary_dim=d_head,
                              qkv_bias=False, out_bias=False).to(device).eval()
    attn.query_blocks = QueryBlocks(rows=rows)
    x = torch.randn(1, length, d_model, device=device)
    mask = mask_from_parts(None, length, length, True, x.dtype, x.device)
    seen = []

    @accepts_query_blocks
    def read(pattern, hook):  # what an analyzer does at least: touch every block
        seen.append(pattern.amax())

    def sync():
        if device != "cpu":
            torch.cuda.synchronize()

    def blocks_path():
        with _hooked(attn, read):
            attn(x, mask=mask)
        sync()

    def fused_path():
        captured = {}
        remove = [attn.hook_q.add_hook(lambda t, hook: captured.__setitem__("q", t)),
                  attn.hook_k.add_hook(lambda t, hook: captured.__setitem__("k", t))]
        try:
            attn(x, mask=mask)  # no pattern hook: SDPA's fused kernel gives the output
        finally:
            for fn in remove:
                fn()
        q = captured["q"].transpose(1, 2)  # [batch, head, query_pos, d_head]
        keys_t = captured["k"].transpose(1, 2).transpose(-1, -2)
        for start in range(0, length, rows):  # statistics: the blocks' patterns again
            stop = min(start + rows, length)
            scores = q[:, :, start:stop] @ keys_t * attn.scale + mask.rows(start, stop)
            read(F.softmax(scores, dim=-1, dtype=torch.float32), None)
        sync()

    return median_times(blocks_path, fused_path, rounds)


class _hooked:
    """``attn.hook_pattern`` hooked with ``fn`` inside the ``with`` block."""

    def __init__(self, attn, fn) -> None:
        self.attn, self.fn = attn, fn

    def __enter__(self):
        self.remove = self.attn.hook_pattern.add_hook(self.fn)

    def __exit__(self, *exc) -> None:
        self.remove()


def hf_output_paths(length: int, rows: int, device: str = "cpu", heads: int = 4,
                    d_head: int = 16, rounds: int = 3) -> tuple[float, float]:
    """``output_paths`` for the hf backend's attention function (``EagerRows``), on one
    causal layer's queries, keys and values with transformers' eager mask: (output from the
    blocks; SDPA's fused kernel plus the blocks' patterns recomputed)."""
    import torch
    import torch.nn.functional as F

    from attnlens.backends.hf.attention import EagerRows
    from attnlens.backends.hf.conventions import EagerConventions
    from attnlens.backends.hf.slots import AttentionSlot
    from attnlens.hooks import HookPoint, accepts_query_blocks
    from attnlens.model.query_blocks import QueryBlocks

    torch.manual_seed(0)
    q, k, v = (torch.randn(1, heads, length, d_head, device=device) for _ in range(3))
    mask = torch.full((length, length), torch.finfo(torch.float32).min, device=device)
    mask = mask.triu(1)[None, None]  # [1, 1, query_pos, key_pos], as eager_mask makes it
    points = {kind: HookPoint() for kind in ("q", "k", "v", "scores", "pattern", "z")}
    slot = AttentionSlot(0, points, query_blocks=QueryBlocks(rows=rows))
    seen = []

    @accepts_query_blocks
    def read(pattern, hook):  # what an analyzer does at least: touch every block
        seen.append(pattern.amax())

    points["pattern"].add_hook(read)
    eager = EagerRows(q, k, v, mask, d_head ** -0.5, None, None, None, EagerConventions())

    def sync():
        if device != "cpu":
            torch.cuda.synchronize()

    def blocks_path():
        eager.attend(slot, rows)
        sync()

    def fused_path():
        F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=d_head ** -0.5)
        for start in range(0, length, rows):  # statistics: the blocks' patterns again
            read(eager.pattern_rows(start, min(start + rows, length)), None)
        sync()

    return median_times(blocks_path, fused_path, rounds)


def print_output_paths(length: int, rows: int, device: str, rounds: int = 3,
                       backend: str = "native") -> None:
    paths = hf_output_paths if backend == "hf" else output_paths
    blocks, fused = paths(length, rows, device, rounds=rounds)
    print(f"{backend} attention output at {length:,} tokens, blocks of {rows} ({device}, median of "
          f"{rounds}): from the blocks {1000 * blocks:.0f} ms, fused kernel + recomputed "
          f"blocks {1000 * fused:.0f} ms (ratio fused / blocks {fused / blocks:.2f})")


def gpu_case(args) -> None:
    import torch

    if not torch.cuda.is_available():
        print("GPU case skipped: no CUDA device")
        return
    length = 4096 if args.quick else 32768
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        start = time.perf_counter()
        toy_llama(tmp / "llama", layers=16, heads=32, d_head=64, positions=length,
                  intermediate=5632, device="cuda")
        print(f"1B-class checkpoint built and saved in {time.perf_counter() - start:.0f} s",
              flush=True)
        long_document(tmp / "doc.txt", length + 100)
        run = measure(tmp / "llama", tmp / "doc.txt", tmp / "out", length, ["--device", "cuda"])
    print(f"GPU, 1B-class Llama (16 layers, 32 heads, d_model 2,048), {length:,} tokens: "
          f"peak device memory {run['cuda_peak'] / 1024:.1f} GiB, {run['seconds']:.1f} s "
          f"({torch.cuda.get_device_name(0)})")
    print_output_paths(length, 1024, "cuda", args.rounds)
    record("long input on one GPU: `attnlens heads --text`, 1B-class Llama-style config (16 "
           f"layers, 32 heads, d_model 2,048), {length:,} tokens", "runs on one 80 GB GPU",
           f"{run['cuda_peak'] / 1024:.1f} GiB peak, {run['seconds']:.1f} s",
           run["cuda_peak"] / 1024 <= 80, this_command(), key="long.gpu",
           device=torch.cuda.get_device_name(0))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    parser.add_argument("--quick", action="store_true", help="small lengths (not the targets')")
    parser.add_argument("--query-block", type=int, default=512,
                        help="query rows per block of the scaling runs")
    parser.add_argument("--compare-block", type=int, default=300,
                        help="query rows per block of the run compared with the whole matrix "
                        "(300 divides neither 512 nor 2,048)")
    parser.add_argument("--gpu", action="store_true", help="the 1B-class case on CUDA only")
    parser.add_argument("--backend", choices=("native", "hf"), default="native",
                        help="attnlens heads --backend (hf: transformers' modules, attnlens' "
                        "attention function)")
    parser.add_argument("--rounds", type=int, default=3,
                        help="timed calls of each attention-output path (their median)")
    args = parser.parse_args()
    if args.child:
        model, text, out, extra = args.child
        print(json.dumps(run_child(model, text, out, json.loads(extra))))
        return
    if args.gpu:
        gpu_case(args)
        return
    cpu_case(args)


if __name__ == "__main__":
    main()
