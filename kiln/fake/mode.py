"""FakeTensorMode and the conversion of real tensors into fakes.

Converting keeps aliasing: two real tensors that share a storage become two fakes that share one meta
storage, with the same offsets and strides, so views and in-place ops on them interact as on the real
tensors.
"""
from __future__ import annotations

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from kiln.fake.tensor import FakeTensor, UnsupportedFakeOp, _kernel_context, run_on_fakes
from kiln.fake.tree import map_leaves


class DispatchMode(TorchDispatchMode):
    """Base of kiln's dispatch modes. Recent torch wraps every mode's ``__torch_dispatch__`` in
    ``torch._disable_dynamo``, which imports torch._dynamo on the first op (about 1.2 s of a warm
    start) and swaps the frame-evaluation hook around every op; kiln's modes opt out of that."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        return False


class FakeTensorMode(DispatchMode):
    """Turns real tensors into fakes, keeping aliasing between tensors that share storage.

    Used as a context manager it also makes factory functions (``torch.zeros``, ``torch.arange``, ...)
    return fakes, and turns real tensors met by an op (constants) into fakes.
    """

    def __init__(self) -> None:
        super().__init__()
        self._storage_bases: dict[int, torch.UntypedStorage] = {}  # real storage key -> meta storage
        self._memo: dict[int, tuple[torch.Tensor, FakeTensor]] = {}  # id(real) -> (real, fake)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}

        def to_fake(x):
            if isinstance(x, torch.Tensor) and not isinstance(x, FakeTensor) and not x.is_meta:
                return self.from_real(x)
            return x

        return run_on_fakes(func, map_leaves(to_fake, args), map_leaves(to_fake, kwargs))

    def from_real(self, t: torch.Tensor) -> FakeTensor:
        """The fake for real tensor ``t`` (the same fake each time for the same tensor object)."""
        found = self._memo.get(id(t))
        if found is not None and found[0] is t:
            return found[1]
        fake = fake_from_real(t, self._storage_bases)
        self._memo[id(t)] = (t, fake)  # holding t keeps its id from being reused
        return fake


def _storage_key(storage: torch.UntypedStorage) -> int:
    ptr = storage.data_ptr()
    return ptr if ptr != 0 else id(storage)


def fake_from_real(t: torch.Tensor, storage_bases: dict | None = None) -> FakeTensor:
    """A fake with ``t``'s size, stride, offset, dtype, device and requires_grad.

    ``storage_bases`` maps real storages to meta storages; fakes made with the same map share a meta
    storage exactly when their real tensors share a storage.
    """
    if isinstance(t, FakeTensor):
        return t
    if t.layout != torch.strided:
        raise UnsupportedFakeOp("fake_from_real", f"tensors with layout {t.layout} are not supported yet")
    if t.is_quantized or t.is_nested:
        raise UnsupportedFakeOp("fake_from_real", "quantized and nested tensors are not supported yet")
    if type(t).__torch_dispatch__ is not torch.Tensor.__torch_dispatch__:
        raise UnsupportedFakeOp("fake_from_real", f"tensor subclass {type(t).__name__} is not supported yet")
    storage = t.untyped_storage()
    key = _storage_key(storage)
    meta_storage = None if storage_bases is None else storage_bases.get(key)
    if meta_storage is None:
        meta_storage = torch.empty(storage.nbytes(), dtype=torch.uint8, device="meta").untyped_storage()
        if storage_bases is not None:
            storage_bases[key] = meta_storage
    with torch.no_grad(), _kernel_context():
        meta = torch.empty(0, dtype=t.dtype, device="meta")
        meta.set_(meta_storage, t.storage_offset(), t.size(), t.stride())
    fake = FakeTensor(meta, t.device, requires_grad=t.requires_grad)
    if t.requires_grad and (t._is_view() or not t.is_leaf):  # in-place ops as on t (fake/autograd_kind.py)
        from kiln.fake.autograd_kind import like_autograd_place

        bases = storage_bases if storage_bases is not None else {key: meta_storage}
        return like_autograd_place(fake, t, lambda: fake_from_real(t._base, bases))
    return fake


def fake_like(t: torch.Tensor, device: torch.device | str | None = None) -> FakeTensor:
    """A fresh fake (its own storage) with ``t``'s size, stride and dtype."""
    with _kernel_context():
        meta = torch.empty_strided(t.size(), t.stride(), dtype=t.dtype, device="meta")
    return FakeTensor(meta, device if device is not None else t.device, requires_grad=t.requires_grad)
