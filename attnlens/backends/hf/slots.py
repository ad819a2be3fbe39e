"""Which attention layer a call of the attention function is, and the hook points it fires.

An ``AttentionSlot`` is one attention layer as attnlens numbers it (a gate row): its hook
points ``hook_q`` ... ``hook_z`` and its head gate. A ``SlotBinding`` is attached to each
attention module of the Hugging Face model: the ``k``-th call of that module in one forward
pass is its ``k``-th slot (a module shared across layers, as in ALBERT, has one slot per
layer). ``HFAttentionModel`` resets the call counts at the start of every forward pass.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from attnlens.errors import AttnlensError
from attnlens.hooks import HookPoint, QueryBlock
from attnlens.model.query_blocks import DEFAULT_BLOCKS, QueryBlocks

_BINDING = "_attnlens_binding"
SLOT_HOOKS = ("q", "k", "v", "scores", "pattern", "z")


@dataclass(eq=False)
class AttentionSlot:
    """One attention layer: its hook points and, during a forward pass, its head gate."""

    row: int  # gate row: the index in the model's attention_layers
    points: dict[str, HookPoint]
    gate_value: torch.Tensor | None = None  # [head] or None
    use_sdpa: bool = True  # the fast path, when no hook reads scores or patterns
    query_blocks: QueryBlocks = DEFAULT_BLOCKS  # long inputs: blocks of query rows

    @property
    def fast(self) -> bool:
        """True when the SDPA fast path may run: allowed and no hook needs the pattern."""
        return self.use_sdpa and not (self.points["scores"].has_hooks
                                      or self.points["pattern"].has_hooks)

    def fire(self, kind: str, x: torch.Tensor) -> torch.Tensor:
        point = self.points[kind]
        return point(x) if point.has_hooks else x

    def fire_block(self, kind: str, x: torch.Tensor, block: QueryBlock) -> torch.Tensor:
        """``fire`` for one block of query rows (``hook.query_block`` set while hooks run)."""
        point = self.points[kind]
        return point.fire_block(x, block) if point.has_hooks else x

    def block_rows(self, batch: int, heads: int, query_len: int, key_len: int,
                   device: torch.device) -> int:
        """Query rows per block: all of them when a hook on scores or patterns needs the
        whole matrix (refused above the whole-matrix limit), else ``query_blocks``'s."""
        for kind in ("scores", "pattern"):
            point = self.points[kind]
            if point.has_hooks and point.needs_whole:
                self.query_blocks.check_whole(query_len,
                                              f"a hook on {point.name or 'hook_' + kind}")
                return query_len
        return self.query_blocks.block_rows(batch, heads, query_len, key_len, device)

    def gate(self, z: torch.Tensor) -> torch.Tensor:
        """Scale each head's output ``z [batch, pos, head, d_head_v]`` by its gate."""
        if self.gate_value is not None:
            z = z * self.gate_value.to(z.dtype)[:, None]  # [head] -> [head, 1]
        return z


@dataclass(eq=False)
class SlotBinding:
    """The slots one attention module serves, in call order, and its calls so far."""

    slots: list[AttentionSlot]
    calls: int = 0

    def next_slot(self, module: torch.nn.Module) -> AttentionSlot:
        if self.calls >= len(self.slots):
            raise AttnlensError(
                f"{type(module).__name__} was called more often in one forward pass than when "
                "attnlens mapped the model; run the model as a whole (model(...)), not one "
                "of its parts."
            )
        slot = self.slots[self.calls]
        self.calls += 1
        return slot


def bind(module: torch.nn.Module, slots: list[AttentionSlot]) -> None:
    module.__dict__[_BINDING] = SlotBinding(slots)


def unbind(module: torch.nn.Module) -> None:
    module.__dict__.pop(_BINDING, None)


def binding_of(module: torch.nn.Module) -> SlotBinding | None:
    return module.__dict__.get(_BINDING)


def current_slot(module: torch.nn.Module) -> AttentionSlot | None:
    """The slot of this call of ``module`` (None for a model attnlens did not map)."""
    binding = binding_of(module)
    return None if binding is None else binding.next_slot(module)


@dataclass(eq=False)
class CallRecord:
    """One call of the attention function while recording (``recording``), batch row 0 only."""

    module: torch.nn.Module
    query: torch.Tensor  # [query_pos, head, d_head], as received (after rotary embeddings)
    key: torch.Tensor  # [key_pos, kv_head, d_head]
    value: torch.Tensor  # [key_pos, kv_head, d_head_v]
    mask: torch.Tensor | None  # [query_pos, key_pos] additive (head 0), or None
    z: torch.Tensor  # [query_pos, head, d_head_v], the function's output
    keywords: tuple[str, ...]
    scaling: float


_RECORDS: list[list[CallRecord]] = []


@contextmanager
def recording() -> Iterator[list[CallRecord]]:
    """Record every call of the attention function inside the block (model mapping)."""
    records: list[CallRecord] = []
    _RECORDS.append(records)
    try:
        yield records
    finally:
        _RECORDS.remove(records)


def recording_calls() -> bool:
    """Whether a ``recording`` block is open (``record`` keeps the calls)."""
    return bool(_RECORDS)


def record(module, query, key, value, mask, z, keywords, scaling) -> None:
    """Keep batch row 0 of one call when a ``recording`` block is open."""
    if not _RECORDS:
        return
    row_mask = None if mask is None else mask[0, 0].detach().clone()
    _RECORDS[-1].append(CallRecord(
        module, query[0].transpose(0, 1).detach().clone(), key[0].transpose(0, 1).detach().clone(),
        value[0].transpose(0, 1).detach().clone(), row_mask, z[0].detach().clone(),
        tuple(sorted(keywords)), float(scaling),
    ))
