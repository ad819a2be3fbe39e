"""GPU check of the rollout, sparse and linear-attention analyzers (run where CUDA exists).

Runs each analyzer on tiny random models (an encoder; a causal rotary model with grouped-query
attention) on the CPU and on CUDA, checks that the running state stays on the model's device,
and prints the largest difference between the two devices' tables.

    python benchmarks/gpu_check_newviews.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from attnlens.data.batch import Batch
from attnlens.measures.linear.linear_attention import LinearAttentionView
from attnlens.measures.rollout.rollout import RolloutAnalyzer
from attnlens.measures.sparse.sparse import SparseCoverage
from attnlens.stream.runner import run_analyzers
from tests.helpers import tiny_model

CAUSAL_ROTARY = {"causal": True, "positional": "rotary", "rotary_dim": 4, "n_kv_heads": 2,
                 "n_token_types": 0, "embed_norm": False}


def batches() -> list[Batch]:
    gen = torch.Generator().manual_seed(0)
    out = []
    for k in range(3):
        ids = torch.randint(5, 50, (4, 12), generator=gen)
        mask = torch.ones_like(ids)
        mask[1, 9:] = 0
        mask[3, 5:] = 0
        ids[mask == 0] = 0
        special = torch.zeros_like(ids, dtype=torch.bool)
        special[:, 0] = True
        out.append(Batch(input_ids=ids, attention_mask=mask, special_mask=special,
                         extra={"index": list(range(4 * k, 4 * k + 4))}))
    return out


def tables(device: str, options: dict) -> list[dict]:
    model = tiny_model(**options).to(device)
    analyzers = [RolloutAnalyzer.for_model(model, keep=2), SparseCoverage.for_model(model),
                 LinearAttentionView.for_model(model)]
    run_analyzers(model, batches(), analyzers, show_progress=False)
    for state in (analyzers[0].sums, analyzers[1].errors, analyzers[2].sums):
        assert state.device.type == device, state.device
    return [a.result() for a in analyzers]


def main() -> None:
    print("torch", torch.__version__, "cuda", torch.cuda.is_available())
    for label, options in (("encoder", {}), ("causal rotary GQA", CAUSAL_ROTARY)):
        cpu, cuda = tables("cpu", options), tables("cuda", options)
        for ours, theirs in zip(cpu, cuda, strict=True):
            for name, table in ours.items():
                numeric = table.select_dtypes("number").columns
                diff = (table[numeric] - theirs[name][numeric]).abs().max().max()
                print(f"{label:18s} {name:22s} max |cpu - cuda| = {float(diff):.2e}")


if __name__ == "__main__":
    main()
