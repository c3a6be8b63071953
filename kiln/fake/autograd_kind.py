"""Where a real tensor that requires grad sits in autograd's graph, and fakes that sit the same way.

In-place ops are allowed or refused by autograd from that place alone: a leaf that requires grad
refuses them (with grad mode on), a tensor with history takes them, a view of a leaf refuses them, and a
view made under no_grad, by an op with several view outputs (``unbind``, ``split``) or by a custom
Function refuses them (its ``CreationMeta``). A fake of an input has the same place, so tracing allows
and refuses what eager does (with eager's message); the cache entry guards the place
(``autograd_kind``) for inputs that are not leaves, since the tensor guard does not see it.
"""
from __future__ import annotations

import torch

from kiln.fake.tensor import FakeTensor

_CreationMeta = torch._C._autograd.CreationMeta


def autograd_kind(t: torch.Tensor) -> str:
    """``t``'s place in autograd's graph, as far as in-place ops care: "leaf" (also for tensors that do
    not require grad), "non-leaf", "view of a leaf", or "view (<CreationMeta>)" (a view made under
    no_grad is one, though autograd calls it a leaf)."""
    if not t.requires_grad:
        return "leaf"
    if t._is_view():
        meta = torch._C._autograd._get_creation_meta(t)
        if meta != _CreationMeta.DEFAULT:
            return f"view ({meta.name})"
        if t._base.requires_grad and t._base.is_leaf:
            return "view of a leaf"
    return "leaf" if t.is_leaf else "non-leaf"


def as_non_leaf(fake: FakeTensor) -> FakeTensor:
    """A fake over ``fake``'s storage, with its metadata, that is neither a leaf of autograd's graph nor a
    view. Its history is one node that raises if a backward ever reaches it (the real history is the
    caller's; TorchDynamo's fakes are made the same way)."""
    with torch.enable_grad():
        return torch._C._functions.DelayedError("kiln: a backward reached a fake input's history", 1)(fake)


def like_autograd_place(fake: FakeTensor, real: torch.Tensor, base_fake) -> FakeTensor:
    """``fake`` (a leaf with ``real``'s metadata and storage) put where ``real`` sits in autograd's graph.
    ``base_fake()`` makes the fake of ``real._base``, for the views that refuse in-place ops."""
    kind = autograd_kind(real)
    if kind == "leaf":
        return fake
    if kind == "non-leaf":
        return as_non_leaf(fake)
    if real._base.dtype != real.dtype:  # (view_as_real and dtype views: an as_strided of the base cannot be
        return fake                    # one; the leaf refuses the same in-place ops, with another message)
    meta = torch._C._autograd._get_creation_meta(real)
    with torch.set_grad_enabled(meta != _CreationMeta.NO_GRAD_MODE):  # (no history, as the real one)
        view = base_fake().as_strided(real.size(), real.stride(), real.storage_offset())
    if view.requires_grad != real.requires_grad:  # (a custom Function's output viewing a tensor without
        return fake                                # grad: the leaf refuses the same in-place ops)
    if meta not in (_CreationMeta.DEFAULT, _CreationMeta.NO_GRAD_MODE):
        torch._C._autograd._set_creation_meta(view, meta)
    return view
