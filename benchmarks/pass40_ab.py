"""pass40's changes against main, alternated round by round in one process (``pair_rounds``).

- ``linear``, ``sparse``: main's analyzer class with main's own C kernel (its ``.so``, the
  kernel whose interface pass40 changed) against this checkout's, each round feeding every
  batch of the first ``--sentences`` UD EWT dev sentences' cached MiniLM activations
  (``analyze``'s batches and sample: 512 sentences by corpus index) to a fresh analyzer;
  the states must agree bit for bit;
- ``ties``: the head statistics kernel's call on every cached pattern plus what the positional
  heads then read (``is_max``, ``max_count``), main's (its kernel, then ``max_count`` as a
  bool sum over ``is_max``) against this checkout's (the kernel counts the ties in the same
  walk); the counts must be equal.

Prints the minimum and median wall and CPU seconds of the rounds (CPU time: steadier on a
shared machine) and their ratios main / now:

    python benchmarks/pass40_ab.py --before /work/main [--only linear,sparse,ties]
        [--rounds 9] [--sentences 800] [--threads 2]
"""

from __future__ import annotations

import argparse
import importlib
import importlib.machinery
import importlib.util
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from corpus_pass import SHARED_UD, load_batches
from hot_paths import PAIRS, REPORT_OPTIONS
from pair_rounds import rounds

KERNELS = {"linear": "_linear_kernel", "sparse": "_sparse_kernel"}


def built_kernel(root: Path, relative: str, name: str):
    """The C kernel ``name`` built in ``root`` beside ``relative`` (main's own ``.so``)."""
    folder = (root / relative).parent
    (path,) = folder.glob(f"{name}.*.so")
    loader = importlib.machinery.ExtensionFileLoader(name, str(path))
    spec = importlib.util.spec_from_file_location(name, path, loader=loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def old_with_kernel(root: Path, key: str):
    """Main's class of ``key``, its module reading main's kernel (``hot_paths.old_class``'s
    module, its kernel swapped after loading: the module reads it as a global)."""
    relative, name = PAIRS[key]
    spec = importlib.util.spec_from_file_location(f"old_{Path(relative).stem}", root / relative)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    setattr(module, KERNELS[key], built_kernel(root, relative, KERNELS[key]))
    return getattr(module, name)


def ties_rounds(root: Path, model, batches, caches, n: int):
    """Wall and CPU seconds per round of main's kernel + bool-sum ties and of this
    kernel's, and whether the counts agree."""
    from attnlens.measures.heads import head_stats
    from attnlens.measures.heads.head_stats import TokenMeasures
    from attnlens.stream.base import PatternBlock

    old = built_kernel(root, "attnlens/measures/heads/head_stats.py", "_stats_kernel")
    new = head_stats._stats_kernel
    cls_ids, sep_ids = head_stats.special_id_sets(ATTNLENS_TOKENIZER[0])
    punct = head_stats.punctuation_ids(ATTNLENS_TOKENIZER[0])
    names = [f"blocks.{i}.attn.hook_pattern" for i in range(model.n_layers)]
    wall: list[list[float]] = [[], []]
    cpu: list[list[float]] = [[], []]
    counts: list[list[torch.Tensor]] = [[], []]
    for r in range(n):
        for j in ((0, 1) if r % 2 == 0 else (1, 0)):
            found = []
            start, start_cpu = time.perf_counter(), time.process_time()
            for batch, cache in zip(batches, caches, strict=True):
                reader = TokenMeasures(("confidence",), cls_ids, sep_ids, punct)
                reader.prepare(batch)
                for name in names:
                    block = PatternBlock.whole(cache[name], 0)
                    if j == 0:  # main: 9 outputs, then the positional heads' bool sum
                        head_stats._stats_kernel = old
                        rows = _main_rows(reader, block.p)
                        block.__dict__["row_max"] = rows[0]
                    else:
                        head_stats._stats_kernel = new
                        reader.per_row(block)
                    block.is_max  # noqa: B018 - the positional heads read it in both
                    found.append(block.max_count)
            wall[j].append(time.perf_counter() - start)
            cpu[j].append(time.process_time() - start_cpu)
            counts[j] = found
    head_stats._stats_kernel = new
    same = all(torch.equal(a, b) for a, b in zip(*counts, strict=True))
    return wall, cpu, same


def _main_rows(reader, p: torch.Tensor) -> torch.Tensor:
    """Main's ``_kernel_rows``: the kernel's 9 outputs."""
    from attnlens.measures.heads import head_stats
    from attnlens.stream.threads import run_split

    if reader._key_bits is None:
        weights = torch.tensor([1, 2, 4], dtype=torch.float32)
        reader._key_bits = (reader.targets @ weights).to(torch.uint8).numpy()
    p = p.detach().contiguous()
    batch, heads, rows, keys = p.shape
    out = torch.empty(9, batch, heads, rows, dtype=torch.float32)
    args = (p.numpy(), reader._key_bits, reader.first.numpy(), batch, heads, rows, keys)
    found = out.numpy()
    run_split(lambda first, stop: head_stats._stats_kernel.rows(*args, first, stop, found),
              batch * heads)
    return out


ATTNLENS_TOKENIZER: list = [None]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", type=Path, required=True)
    parser.add_argument("--only", default="linear,sparse,ties")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--sentences", type=int, default=800)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    import attnlens

    model, tokenizer = attnlens.load()
    ATTNLENS_TOKENIZER[0] = tokenizer
    batches, _ = load_batches(tokenizer, model, SHARED_UD, args.sentences, 64, 1024)
    options = {**REPORT_OPTIONS, "linear": {"per_batch": None, "max_sentences": 512},
               "sparse": {"per_batch": None, "max_sentences": 512}}
    with torch.no_grad():
        caches = [model.run_with_cache(**batch.model_inputs())[1] for batch in batches]

    def spread(xs: list[float]) -> str:
        return f"min {min(xs):.3f} median {statistics.median(xs):.3f}"

    for key in args.only.split(","):
        if key == "ties":
            wall, cpu, same = ties_rounds(args.before, model, batches, caches, args.rounds)
        else:
            relative, name = PAIRS[key]
            module = importlib.import_module(relative.removesuffix(".py").replace("/", "."))
            classes = (old_with_kernel(args.before, key), getattr(module, name))
            wall, cpu, last = rounds(model, batches, caches, classes, options[key], args.rounds)
            states = [a.state_dict()["state"] for a in last]
            same = all(torch.equal(states[0][f], states[1][f]) if isinstance(states[0][f],
                                                                             torch.Tensor)
                       else states[0][f] == states[1][f] for f in states[0])
        print(f"{key}: wall main {spread(wall[0])}, now {spread(wall[1])}: "
              f"{min(wall[0]) / min(wall[1]):.2f}x (min), "
              f"{statistics.median(wall[0]) / statistics.median(wall[1]):.2f}x (median); "
              f"CPU main {spread(cpu[0])}, now {spread(cpu[1])}: "
              f"{min(cpu[0]) / min(cpu[1]):.2f}x (min); {args.rounds} rounds, "
              f"{len(batches)} batches; same bits: {same}", flush=True)


if __name__ == "__main__":
    main()
