"""FakeTensor: a tensor subclass that carries metadata but no data.

Each FakeTensor wraps a meta tensor (which does the shape/stride/dtype work through ATen's meta
kernels) and reports the device the real tensor would have. Views of a fake tensor are views of its
meta tensor, so aliasing between fakes is what it would be between real tensors.
"""
from __future__ import annotations

import torch
from torch.utils._pytree import tree_map
from torch.utils._python_dispatch import TorchDispatchMode

from kiln.errors import KilnError

aten = torch.ops.aten


class UnsupportedFakeOp(KilnError):
    """An ATen op has no meta kernel, so its output metadata cannot be computed without data."""


# ops that need real data to know their output (shape or value): never run on fakes
_DATA_DEPENDENT = {
    aten._local_scalar_dense.default,
    aten.nonzero.default,
    aten.masked_select.default,
    aten.unique.default if hasattr(aten, "unique") else None,
    aten._unique2.default,
    aten.item.default,
    aten.equal.default,
    aten.is_nonzero.default,
    aten.allclose.default,
}
_DATA_DEPENDENT.discard(None)


class FakeTensor(torch.Tensor):
    _meta: torch.Tensor
    fake_device: torch.device

    @staticmethod
    def __new__(cls, meta: torch.Tensor, device: torch.device):
        assert meta.device.type == "meta", meta.device
        out = torch.Tensor._make_wrapper_subclass(
            cls,
            meta.size(),
            strides=meta.stride(),
            storage_offset=meta.storage_offset(),
            dtype=meta.dtype,
            layout=meta.layout,
            device=device,
            requires_grad=meta.requires_grad,
        )
        out._meta = meta
        out.fake_device = device
        return out

    def __repr__(self) -> str:  # no data to print
        return f"FakeTensor(size={tuple(self.shape)}, dtype={self.dtype}, device={self.fake_device})"

    __torch_function__ = torch._C._disabled_torch_function_impl

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        return run_on_fakes(func, args, kwargs or {})


def _common_device(args, kwargs) -> torch.device:
    devices = []

    def visit(x):
        if isinstance(x, FakeTensor):
            devices.append((x.dim() == 0, x.fake_device))
        return x

    tree_map(visit, (args, kwargs))
    explicit = kwargs.get("device")
    if explicit is not None:
        return torch.device(explicit)
    # a non-scalar tensor decides; CPU 0-dim tensors mix with any device, as in ATen
    for is_scalar, device in devices:
        if not is_scalar:
            return device
    for _, device in devices:
        if device.type != "cpu":
            return device
    return devices[0][1] if devices else torch.device("cpu")


def run_on_fakes(func, args, kwargs):
    if func in _DATA_DEPENDENT:
        raise UnsupportedFakeOp(f"{func} needs tensor data to compute its result")
    device = _common_device(args, kwargs)
    by_meta: dict[int, FakeTensor] = {}

    def to_meta(x):
        if isinstance(x, FakeTensor):
            by_meta[id(x._meta)] = x
            return x._meta
        if isinstance(x, torch.Tensor) and not x.is_meta:
            # a real tensor (e.g. a constant) reaching a fake computation
            return torch.empty_strided(x.size(), x.stride(), dtype=x.dtype, device="meta")
        if isinstance(x, torch.device):
            return torch.device("meta")
        return x

    meta_args = tree_map(to_meta, args)
    meta_kwargs = tree_map(to_meta, kwargs)
    if "device" in meta_kwargs:
        meta_kwargs["device"] = torch.device("meta")
    try:
        with torch._C._DisableTorchDispatch():
            out = func(*meta_args, **meta_kwargs)
    except NotImplementedError as exc:
        raise UnsupportedFakeOp(f"{func} has no meta kernel, so kiln cannot infer its output shape: {exc}") from None

    def wrap(x):
        if isinstance(x, torch.Tensor) and x.is_meta:
            same = by_meta.get(id(x))
            if same is not None:  # in-place ops and `out=` return their input
                return same
            return FakeTensor(x, device)
        return x

    return tree_map(wrap, out)


class FakeTensorMode(TorchDispatchMode):
    """Converts real tensors to fakes, keeping aliasing between tensors that share storage.

    Used as a context manager, it also makes factory functions (torch.zeros, torch.arange, ...)
    return fakes, and turns real tensors met by an op (constants) into fakes.
    """

    def __init__(self) -> None:
        super().__init__()
        self._storage_bases: dict[int, torch.Tensor] = {}  # real storage id -> meta base of its size
        self._memo: dict[int, FakeTensor] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}

        def to_fake(x):
            if isinstance(x, torch.Tensor) and not isinstance(x, FakeTensor) and not x.is_meta:
                return self.from_real(x)
            return x

        return run_on_fakes(func, tree_map(to_fake, args), tree_map(to_fake, kwargs))

    def from_real(self, t: torch.Tensor) -> FakeTensor:
        found = self._memo.get(id(t))
        if found is not None:
            return found
        fake = fake_from_real(t, self._storage_bases)
        self._memo[id(t)] = fake
        return fake


def fake_from_real(t: torch.Tensor, storage_bases: dict | None = None) -> FakeTensor:
    if isinstance(t, FakeTensor):
        return t
    if t.layout != torch.strided:
        raise UnsupportedFakeOp(f"tensors with layout {t.layout} are not supported yet")
    storage = t.untyped_storage()
    key = storage.data_ptr() if storage.data_ptr() != 0 else id(storage)
    base = None if storage_bases is None else storage_bases.get(key)
    if base is None:
        nbytes = storage.nbytes()
        base = torch.empty(nbytes, dtype=torch.uint8, device="meta")
        if storage_bases is not None:
            storage_bases[key] = base
    with torch.no_grad():
        meta = torch.empty(0, dtype=t.dtype, device="meta")
        meta.set_(base.untyped_storage(), t.storage_offset(), t.size(), t.stride())
    if t.requires_grad:
        meta = meta.detach().requires_grad_(True)
    fake = FakeTensor(meta, t.device)
    if t.requires_grad:
        fake.requires_grad_(True)
    return fake
