"""Build a model's modules without memory and without random initialisation.

A loader builds the module tree only to replace every weight with the checkpoint's right
after (``load_state_dict(..., assign=True)``). On the meta device the tensors take no memory,
and skipping ``torch.nn.init`` matters for speed too: torch's meta kernel for ``normal_``
imports ``torch._dynamo`` on its first call, about 1 s of every command that loads a model.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch

# In-place initialisers modules call from their reset_parameters (normal_, kaiming_uniform_...)
_INITIALISERS = tuple(name for name in dir(torch.nn.init)
                      if name.endswith("_") and not name.startswith("_"))


def _leave(tensor: torch.Tensor, *args, **kwargs) -> torch.Tensor:
    return tensor


@contextmanager
def empty_modules() -> Iterator[None]:
    """Inside this block, modules are built on the meta device and not initialised."""
    saved = {name: getattr(torch.nn.init, name) for name in _INITIALISERS}
    try:
        for name in saved:
            setattr(torch.nn.init, name, _leave)
        with torch.device("meta"):
            yield
    finally:
        for name, function in saved.items():
            setattr(torch.nn.init, name, function)
