"""Hook points and activation caching.

A ``HookPoint`` is an identity module placed at every interesting activation. The model
names each one after its position (``blocks.3.attn.hook_pattern``), so that a user can
read, edit or cache an activation by name without touching the model's code.

Long inputs: the attention's ``hook_scores`` and ``hook_pattern`` may fire once per block of
query rows (``[batch, head, rows, key_pos]``; ``hook.query_block`` says which rows) when every
function hooked there accepts blocks (``accepts_query_blocks``); a function that does not gets
the whole matrix, or is refused above the whole-matrix limit (``attnlens.model.query_blocks``).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from attnlens.errors import AttnlensError

HookFn = Callable[..., torch.Tensor | None]
NamesFilter = str | Sequence[str] | Callable[[str], bool] | None
BLOCKS_ATTRIBUTE = "accepts_query_blocks"


@dataclass(frozen=True)
class QueryBlock:
    """Which query rows an attention hook sees: ``start:stop`` of ``length`` query positions
    (``start == 0 and stop == length``: the whole matrix, one block)."""

    start: int
    stop: int
    length: int

    @property
    def rows(self) -> int:
        return self.stop - self.start

    @property
    def is_whole(self) -> bool:
        return self.start == 0 and self.stop == self.length

    @property
    def is_last(self) -> bool:
        return self.stop == self.length


def accepts_query_blocks(fn: HookFn) -> HookFn:
    """Mark a hook function as reading attention patterns block by block: on ``hook_scores``
    and ``hook_pattern`` it may be called once per block of query rows, and reads
    ``hook.query_block`` for the rows it got. Returns ``fn``."""
    setattr(fn, BLOCKS_ATTRIBUTE, True)
    return fn


def reads_blocks(fn: HookFn) -> bool:
    """True for a hook function marked with ``accepts_query_blocks`` (bound methods too)."""
    return bool(getattr(fn, BLOCKS_ATTRIBUTE, False))


class HookPoint(nn.Module):
    """Identity module whose forward and backward passes can be observed or edited.

    A forward hook is called as ``fn(activation, hook=self)``; a backward hook as
    ``fn(grad, hook=self)``. Either may return a tensor that replaces the value.
    """

    def __init__(self) -> None:
        super().__init__()
        self.name: str = ""
        self._fwd_fns: list[HookFn] = []
        self._bwd_fns: list[HookFn] = []
        self.query_block: QueryBlock | None = None  # set while an attention block is fired
        # set while a layer's pattern blocks are fired: (start, stop) -> those rows of the
        # pattern, recomputed from the layer's queries and keys (hooks' edits not applied)
        self.pattern_rows: Callable[[int, int], torch.Tensor] | None = None

    @property
    def has_hooks(self) -> bool:
        return bool(self._fwd_fns or self._bwd_fns)

    @property
    def needs_whole(self) -> bool:
        """Some function hooked here needs the whole matrix (backward hooks always do)."""
        return bool(self._bwd_fns) or not all(reads_blocks(fn) for fn in self._fwd_fns)

    def fire_block(self, x: torch.Tensor, block: QueryBlock) -> torch.Tensor:
        """``forward(x)`` with ``query_block`` set to ``block`` while the hooks run."""
        self.query_block = block
        try:
            return self(x)
        finally:
            self.query_block = None

    def add_hook(self, fn: HookFn, direction: str = "fwd") -> Callable[[], None]:
        """Attach ``fn``; returns a function that removes exactly this hook."""
        if direction not in ("fwd", "bwd"):
            raise AttnlensError(f"hook direction must be 'fwd' or 'bwd', not {direction!r}.")
        fns = self._fwd_fns if direction == "fwd" else self._bwd_fns
        fns.append(fn)

        def remove() -> None:
            if fn in fns:
                fns.remove(fn)

        return remove

    def remove_hooks(self) -> None:
        self._fwd_fns.clear()
        self._bwd_fns.clear()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for fn in self._fwd_fns:
            out = fn(x, hook=self)
            if out is not None:
                x = out
        if self._bwd_fns and x.requires_grad:
            # A fresh view, so the gradient seen is the one flowing into this point only.
            x = x.view_as(x)
            for fn in self._bwd_fns:
                x.register_hook(_bind_backward(fn, self))
        return x

    def extra_repr(self) -> str:
        return self.name


def _bind_backward(fn: HookFn, hook: HookPoint) -> Callable[[torch.Tensor], Any]:
    return lambda grad: fn(grad, hook=hook)


def name_hook_points(model: nn.Module) -> dict[str, HookPoint]:
    """Give every HookPoint in ``model`` its qualified name; return them in module order."""
    points = {}
    for name, module in model.named_modules():
        if isinstance(module, HookPoint):
            module.name = name
            points[name] = module
    return points


def make_filter(names_filter: NamesFilter) -> Callable[[str], bool]:
    """Turn a name, a list of names, a predicate or None (everything) into a predicate."""
    if names_filter is None:
        return lambda name: True
    if isinstance(names_filter, str):
        return lambda name: name == names_filter
    if callable(names_filter):
        return names_filter
    wanted = set(names_filter)
    return lambda name: name in wanted


class HookedModule(nn.Module):
    """Mixin for modules that own HookPoints: adds hooks, run_with_hooks and run_with_cache."""

    hook_dict: dict[str, HookPoint]

    def setup_hooks(self) -> None:
        self.hook_dict = name_hook_points(self)

    def _resolve(self, name_or_filter: str | Callable[[str], bool]) -> list[HookPoint]:
        if isinstance(name_or_filter, str):
            if name_or_filter not in self.hook_dict:
                raise AttnlensError(
                    f"unknown hook point {name_or_filter!r}; see model.hook_dict for the names."
                )
            return [self.hook_dict[name_or_filter]]
        return [hp for name, hp in self.hook_dict.items() if name_or_filter(name)]

    @contextmanager
    def hooks(
        self,
        fwd_hooks: Iterable[tuple[str | Callable[[str], bool], HookFn]] = (),
        bwd_hooks: Iterable[tuple[str | Callable[[str], bool], HookFn]] = (),
    ) -> Iterator[HookedModule]:
        """Attach hooks for the body of a ``with`` block; they are removed even if it raises."""
        removers: list[Callable[[], None]] = []
        try:
            for direction, pairs in (("fwd", fwd_hooks), ("bwd", bwd_hooks)):
                for name_or_filter, fn in pairs:
                    for hp in self._resolve(name_or_filter):
                        removers.append(hp.add_hook(fn, direction))
            yield self
        finally:
            for remove in removers:
                remove()

    def reset_hooks(self) -> None:
        for hp in self.hook_dict.values():
            hp.remove_hooks()

    def run_with_hooks(
        self,
        *args: Any,
        fwd_hooks: Iterable[tuple[str | Callable[[str], bool], HookFn]] = (),
        bwd_hooks: Iterable[tuple[str | Callable[[str], bool], HookFn]] = (),
        **kwargs: Any,
    ) -> Any:
        """Run ``forward(*args, **kwargs)`` with temporary hooks."""
        with self.hooks(fwd_hooks, bwd_hooks):
            return self(*args, **kwargs)

    def run_with_cache(
        self,
        *args: Any,
        names_filter: NamesFilter = None,
        to_cpu: bool = False,
        detach: bool = True,
        **kwargs: Any,
    ) -> tuple[Any, ActivationCache]:
        """Run forward and keep the activations whose names pass ``names_filter``.

        ``to_cpu=True`` moves each activation to the CPU as soon as it is produced, so a GPU
        run can cache more than fits on the device.
        """
        keep = make_filter(names_filter)
        store: dict[str, torch.Tensor] = {}

        def save(x: torch.Tensor, hook: HookPoint) -> None:
            value = x.detach() if detach else x
            store[hook.name] = value.to("cpu") if to_cpu else value

        names = [name for name in self.hook_dict if keep(name)]
        with self.hooks([(name, save) for name in names]):
            out = self(*args, **kwargs)
        ordered = {name: store[name] for name in names if name in store}
        return out, ActivationCache(ordered)


_ATTN_SHORT = {"q", "k", "v", "scores", "pattern", "z", "result"}
_MLP_SHORT = {"pre", "post"}


class ActivationCache(Mapping[str, torch.Tensor]):
    """Cached activations by hook name, with shorthand: ``cache["pattern", 3]``.

    ``cache["pattern", 3]`` is ``cache["blocks.3.attn.hook_pattern"]``; block-level names
    (``resid_pre``, ``attn_out``, ``resid_mid``, ``mlp_out``, ``resid_post``) resolve to
    ``blocks.{layer}.hook_{name}``; ``("mlp_pre", 2)`` to ``blocks.2.mlp.hook_pre``.
    """

    def __init__(self, activations: dict[str, torch.Tensor]) -> None:
        self._data = activations

    @staticmethod
    def full_name(name: str, layer: int | None = None) -> str:
        if layer is None:
            return name if name.startswith(("blocks.", "hook_")) else f"hook_{name}"
        short = re.sub(r"^hook_", "", name)
        if short in _ATTN_SHORT:
            return f"blocks.{layer}.attn.hook_{short}"
        if short.startswith("mlp_") and short[4:] in _MLP_SHORT:
            return f"blocks.{layer}.mlp.hook_{short[4:]}"
        return f"blocks.{layer}.hook_{short}"

    def __getitem__(self, key: str | tuple[str, int]) -> torch.Tensor:
        name = self.full_name(*key) if isinstance(key, tuple) else key
        if name not in self._data and isinstance(key, str) and self.full_name(key) in self._data:
            name = self.full_name(key)
        try:
            return self._data[name]
        except KeyError:
            raise KeyError(
                f"{name!r} is not in the cache; cached: {', '.join(list(self._data)[:6])}..."
            ) from None

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def stack(self, name: str, layers: Sequence[int]) -> torch.Tensor:
        """Stack one activation over layers: ``[layer, ...]``."""
        return torch.stack([self[name, layer] for layer in layers])

    def to(self, device: str | torch.device) -> ActivationCache:
        return ActivationCache({k: v.to(device) for k, v in self._data.items()})

    def __repr__(self) -> str:
        return f"ActivationCache({len(self)} activations: {list(self._data)[:4]}...)"
