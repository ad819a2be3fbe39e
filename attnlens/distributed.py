"""Runs split across processes with torch.distributed (``torchrun``): shard, then merge.

``torchrun --nproc-per-node N -m attnlens.cli analyze ...`` starts N copies of the command;
each reads the launcher's ``RANK`` / ``WORLD_SIZE`` / ``LOCAL_RANK`` (``context()``), joins
one process group (gloo on CPU, NCCL on CUDA, each rank on GPU ``LOCAL_RANK``), takes a
contiguous share of the corpus's batches (``shard``: whole sentences, balanced by tokens),
and feeds its analyzers as a single process would. The analyzers' states then travel to rank
0 (``gather_analyzers``: ``Analyzer.state_dict`` through ``gather_object``) and merge there in
rank order, so per-sentence lists come out in corpus order, exactly as one process would
have them. Only rank 0 writes files.

Analyzers that read only the first sentences of a corpus (``prefix_bound``: marked
``distributed = "rank0"``, or counting a ``max_sentences`` bound) run on rank 0 alone, over
the corpus's first batches as in one process. Samples taken by corpus index (the collapse
variants, head paths, sparse coverage, linear view: ``distributed = "shard"``) are the same
sentences on any share, so those analyzers are sharded like the others. ``spread`` hands
independent tasks (the pruning evaluations) out round-robin and returns every result on every rank.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import torch

from attnlens.errors import ConfigError

T = TypeVar("T")


@dataclass(frozen=True)
class DistContext:
    """Where this process stands: ``rank`` of ``world_size`` (1 = not distributed)."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0

    @property
    def active(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


SINGLE = DistContext()


def context() -> DistContext:
    """The launcher's ``RANK``/``WORLD_SIZE``/``LOCAL_RANK`` (no process group is started)."""
    try:
        world = int(os.environ.get("WORLD_SIZE", "1"))
        rank = int(os.environ.get("RANK", "0"))
        local = int(os.environ.get("LOCAL_RANK", str(rank)))
    except ValueError as exc:
        raise ConfigError(f"RANK/WORLD_SIZE/LOCAL_RANK must be integers: {exc}.") from exc
    if world < 1 or not 0 <= rank < world:
        raise ConfigError(f"RANK {rank} is not within WORLD_SIZE {world}.")
    return DistContext(rank, world, local)


def rank_device(device: str, ctx: DistContext) -> str:
    """Each rank's device: ``cuda`` becomes ``cuda:LOCAL_RANK`` under a launcher."""
    if ctx.active and device in ("cuda", "auto") and torch.cuda.is_available():
        return f"cuda:{ctx.local_rank}"
    return device


def init(ctx: DistContext, device: str | torch.device) -> None:
    """Join the process group (gloo for CPU, NCCL for CUDA) when ``ctx`` is distributed."""
    import torch.distributed as dist

    if not ctx.active or dist.is_initialized():
        return
    dev = torch.device(device)
    backend = "nccl" if dev.type == "cuda" else "gloo"
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    dist.init_process_group(backend=backend, rank=ctx.rank, world_size=ctx.world_size)


def finish(ctx: DistContext) -> None:
    """Leave the process group (after a barrier, so no rank exits while others send)."""
    import torch.distributed as dist

    if ctx.active and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


def shard(items: Sequence[T], ctx: DistContext, weight: Callable[[T], float] = len) -> list[T]:
    """This rank's contiguous share of ``items``, balanced by ``weight`` (order kept).

    Rank ``r`` gets the items whose cumulative weight midpoint falls in
    ``[r / N, (r + 1) / N)`` of the total, so the shares concatenate to ``items``.
    """
    if not ctx.active:
        return list(items)
    weights = [float(weight(item)) for item in items]
    total = sum(weights) or 1.0
    mine, before = [], 0.0
    for item, w in zip(items, weights, strict=True):
        owner = min(int((before + w / 2) / total * ctx.world_size), ctx.world_size - 1)
        if owner == ctx.rank:
            mine.append(item)
        before += w
    return mine


def batch_tokens(batch) -> float:
    """Real tokens of a batch (``shard`` weight for corpus batches)."""
    return float(batch.attention_mask.sum())


def _to_cpu(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().cpu()
    if isinstance(value, dict):
        return type(value)({k: _to_cpu(v) for k, v in value.items()})
    if isinstance(value, list):
        return [_to_cpu(v) for v in value]
    return value


def gather_objects(obj: Any, ctx: DistContext) -> list[Any] | None:
    """Every rank's ``obj`` on rank 0 (in rank order; None elsewhere); tensors go via CPU."""
    if not ctx.active:
        return [obj]
    import torch.distributed as dist

    out = [None] * ctx.world_size if ctx.is_main else None
    dist.gather_object(_to_cpu(obj), out, dst=0)
    return out


def all_gather_objects(obj: Any, ctx: DistContext) -> list[Any]:
    """Every rank's ``obj`` on every rank, in rank order."""
    if not ctx.active:
        return [obj]
    import torch.distributed as dist

    out: list[Any] = [None] * ctx.world_size
    dist.all_gather_object(out, _to_cpu(obj))
    return out


def check_mergeable(analyzers: Sequence) -> None:
    """Refuse, before any work, analyzers whose state cannot travel (no ``state_fields``)."""
    stateless = [type(a).__name__ for a in analyzers if not prefix_bound(a) and not a.state_fields]
    if stateless:
        raise ConfigError(
            f"{stateless[0]} declares no state_fields, so its state cannot be merged across "
            "processes; run it without torchrun."
        )


def gather_analyzers(analyzers: Sequence, ctx: DistContext) -> None:
    """Merge every rank's analyzer states into rank 0's analyzers, in rank order.

    Each analyzer ships ``state_dict()``; rank 0 loads rank ``r``'s state into a shallow
    copy of its own analyzer (same settings) and merges it (``Analyzer.merge``).
    ``prefix_bound`` analyzers keep rank 0's state only.
    """
    if not ctx.active:
        return
    check_mergeable(analyzers)
    everyone = gather_objects(shipped_states(analyzers), ctx)
    if ctx.is_main:
        merge_states(analyzers, everyone[1:])


def shipped_states(analyzers: Sequence) -> list[dict | None]:
    """What a rank sends rank 0: each analyzer's ``state_dict`` (None if ``prefix_bound``)."""
    return [None if prefix_bound(a) else a.state_dict() for a in analyzers]


def merge_states(analyzers: Sequence, later_ranks: Sequence[list[dict | None]]) -> None:
    """Merge the states of ranks 1, 2, ... (``shipped_states`` of each) into ``analyzers``."""
    for rank_states in later_ranks:
        for analyzer, state in zip(analyzers, rank_states, strict=True):
            if state is None:
                continue
            other = copy.copy(analyzer)
            other.load_state_dict(state)
            analyzer.merge(other)


def prefix_bound(analyzer) -> bool:
    """True for analyzers that read only a corpus's first sentences: marked
    ``distributed = "rank0"``, or bounded by a ``max_sentences`` they count in ``sentences``."""
    mark = getattr(analyzer, "distributed", None)
    if mark is not None:
        return mark == "rank0"
    return getattr(analyzer, "max_sentences", None) is not None and hasattr(analyzer, "sentences")


def _wants_more(analyzer) -> bool:
    bound = getattr(analyzer, "max_sentences", None)
    return bound is None or analyzer.sentences < bound


def run_sharded(model, batches: Sequence, analyzers: Sequence, ctx: DistContext, **kwargs):
    """``runner.run_analyzers`` on this rank's share, then the states merged on rank 0.

    ``prefix_bound`` analyzers run on rank 0 only: over its share (the corpus's first
    batches) and, while they still want sentences, over the batches after it, so they see
    the same sentences as in one process. Returns ``analyzers`` (merged on rank 0).
    """
    from attnlens.stream.runner import run_analyzers

    if not ctx.active:
        return run_analyzers(model, batches, analyzers, **kwargs)
    check_mergeable(analyzers)
    batches = list(batches)
    mine = shard(batches, ctx, batch_tokens)
    bounded = [a for a in analyzers if prefix_bound(a)]
    fed = [a for a in analyzers if ctx.is_main or a not in bounded]
    kwargs["total"] = sum(b.size for b in mine)
    kwargs["show_progress"] = kwargs.get("show_progress", True) and ctx.is_main
    run_analyzers(model, mine, fed, **kwargs)
    if ctx.is_main:
        for batch in batches[len(mine):]:  # rank 0's share is a prefix of the batches
            hungry = [a for a in bounded if _wants_more(a)]
            if not hungry:
                break
            run_analyzers(model, [batch], hungry, show_progress=False)
    gather_analyzers(analyzers, ctx)
    return analyzers


def spread(tasks: Sequence[T], run: Callable[[T], Any], ctx: DistContext) -> list[Any]:
    """``[run(t) for t in tasks]``, task ``i`` on rank ``i % world_size``; all results on all
    ranks, in task order."""
    if not ctx.active:
        return [run(task) for task in tasks]
    mine = {i: run(task) for i, task in enumerate(tasks) if i % ctx.world_size == ctx.rank}
    merged: dict[int, Any] = {}
    for part in all_gather_objects(mine, ctx):
        merged.update(part)
    return [merged[i] for i in range(len(tasks))]
