"""The forward hooks and slot bindings that connect a Hugging Face model to its hook modules.

``Wiring`` attaches, for an ``HFAttentionModel``: one ``AttentionSlot`` per attention layer,
bound to the HF attention module that serves it (a module shared by several layers serves
them in call order); forward hooks on the layer modules for ``hook_resid_pre`` (and the first
layer's ``hook_embed``) and ``hook_resid_post``; a forward hook on each verified output
projection for ``hook_attn_out`` and ``hook_result``; and a forward pre-hook on the model that
resets the call counts at the start of every forward pass. ``remove()`` undoes all of it.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import torch
from torch import nn

from attnlens.backends.hf.blocks import HookAttention, HookBlock
from attnlens.backends.hf.slots import AttentionSlot, bind, binding_of, unbind
from attnlens.hooks import HookPoint
from attnlens.model.protocol import AttentionLayer


class Wiring:
    """Slots, residual hooks and output-projection hooks of one ``HFAttentionModel``."""

    def __init__(self, model: nn.Module) -> None:
        """``model``: the ``HFAttentionModel`` being built (its hook modules exist)."""
        self.model = model
        self.handles: list = []
        self.slots: list[AttentionSlot] = []
        slot_of: dict[int, AttentionSlot] = {}
        for row_index, layer in enumerate(model.attention_layers):
            hook_attention: HookAttention = layer.attn
            slot = AttentionSlot(row_index, hook_attention.points())
            self.slots.append(slot)
            slot_of[id(hook_attention.entry)] = slot
            self._wire_output(hook_attention, layer)
        slots_of: dict[nn.Module, list[AttentionSlot]] = defaultdict(list)
        for entry in model.layer_maps:  # call order: a shared module serves its slots in turn
            slots_of[entry.module].append(slot_of[id(entry)])
        for module, slots in slots_of.items():
            bind(module, slots)
        block_layers: dict[nn.Module, list[tuple[HookBlock, HookPoint | None]]] = defaultdict(
            list)
        for stack in model.stacks.values():
            for index, block in enumerate(stack.blocks):
                entry = block.attn.entry
                if entry.block is not None:
                    embed = stack.hook_embed if index == 0 else None
                    block_layers[entry.block].append((block, embed))
        self.block_calls = {module: 0 for module in block_layers}
        for module, blocks in block_layers.items():
            self.handles.append(module.register_forward_pre_hook(
                self._resid_pre_hook(blocks), with_kwargs=True))
            self.handles.append(module.register_forward_hook(self._resid_post_hook(blocks)))
        for top in {model.hf, model.hf.base_model}:
            self.handles.append(top.register_forward_pre_hook(self.reset_calls))

    def reset_calls(self, *_: Any) -> None:
        """Start a forward pass: every module's calls count from 0 again."""
        for row in self.model.layer_maps:
            binding = binding_of(row.module)
            if binding is not None:
                binding.calls = 0
        for module in self.block_calls:
            self.block_calls[module] = 0

    def remove(self) -> None:
        """Remove every hook and slot from the HF model (it runs as plain HF again)."""
        for handle in self.handles:
            handle.remove()
        self.handles = []
        for row in self.model.layer_maps:
            unbind(row.module)

    def _resid_pre_hook(self, blocks):
        def hook(module, args, kwargs):
            call = self.block_calls[module]
            if call >= len(blocks):
                return None
            block, embed = blocks[call]
            hidden, replace = first_tensor(args, kwargs)
            if hidden is None:
                return None
            if embed is not None and embed.has_hooks:
                hidden = embed(hidden)
            if block.hook_resid_pre.has_hooks:
                hidden = block.hook_resid_pre(hidden)
            return replace(hidden)

        return hook

    def _resid_post_hook(self, blocks):
        def hook(module, args, output):
            call = self.block_calls[module]
            self.block_calls[module] = call + 1
            if call >= len(blocks):
                return None
            block, _ = blocks[call]
            if not block.hook_resid_post.has_hooks:
                return None
            if isinstance(output, torch.Tensor):
                return block.hook_resid_post(output)
            if isinstance(output, tuple) and output and isinstance(output[0], torch.Tensor):
                return (block.hook_resid_post(output[0]), *output[1:])
            if hasattr(output, "last_hidden_state"):
                output.last_hidden_state = block.hook_resid_post(output.last_hidden_state)
                return output
            return None

        return hook

    def _wire_output(self, hook_attention: HookAttention, layer: AttentionLayer) -> None:
        """``hook_attn_out`` and ``hook_result`` from the verified output projection."""
        recipe = hook_attention.entry.recipe
        if recipe is None or recipe.out is None:
            return
        block = self.model.block_of(layer)
        attn_out = block.hook_cross_attn_out if layer.attention == "cross" else block.hook_attn_out

        def hook(module, args, output):
            if hook_attention.hook_result.has_hooks:
                z = args[0]  # [batch, pos, head * d_head_v]
                z = z.reshape(*z.shape[:2], hook_attention.n_heads, -1)
                result = torch.einsum("bphv,hvo->bpho", z, hook_attention.W_O)
                output = hook_attention.hook_result(result).sum(dim=2)
                if hook_attention.b_O is not None:
                    output = output + hook_attention.b_O
            return attn_out(output) if attn_out.has_hooks else output

        self.handles.append(recipe.out.register_forward_hook(hook))


def first_tensor(args: tuple, kwargs: dict):
    """The hidden states a layer receives, and a function returning the call with them replaced."""
    if args and isinstance(args[0], torch.Tensor):
        return args[0], lambda new: ((new, *args[1:]), kwargs)
    if isinstance(kwargs.get("hidden_states"), torch.Tensor):
        return kwargs["hidden_states"], lambda new: (args, {**kwargs, "hidden_states": new})
    return None, lambda new: None
