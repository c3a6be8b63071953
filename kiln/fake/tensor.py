"""FakeTensor: a tensor that carries shape, stride, dtype, device and requires_grad, but no data.

A FakeTensor *is* a meta tensor (its storage is a meta storage of the right size) that reports the
device the real tensor would have. ATen ops on fakes run ATen's meta kernels, which compute output
metadata without touching data. Views of a fake share its meta storage, so aliasing between fakes is
what it would be between the real tensors, and in-place metadata ops (``t_``, ``unsqueeze_``) change
the fake itself, as they would change the real tensor.

Ops whose output shape or value depends on data (``nonzero``, ``item``) and ops without a meta kernel
raise ``UnsupportedFakeOp``; the caller turns that into a graph break or an eager fallback.
"""
from __future__ import annotations

import math
import threading

import torch

from kiln.errors import KilnError
from kiln.fake.fast_meta import fast_meta
from kiln.fake.scalar_checks import check_scalars, wants_check
from kiln.fake.symbolic_meta import SymbolicShapeUnsupported, has_symbolic_tensor, pointwise_fallback, symbolic_meta
from kiln.fake.tree import leaves, map_leaves
from kiln.fake.unbacked import active_env, count_source, is_mask_index, unbacked_meta

aten = torch.ops.aten
prim = torch.ops.prim


class UnsupportedFakeOp(KilnError):
    """An ATen op cannot run on fake tensors: it has no meta kernel, or its output depends on data."""

    def __init__(self, func, reason: str):
        self.func = func
        self.reason = reason
        super().__init__(
            f"kiln cannot run {func} on fake tensors: {reason}. "
            f"The region that calls it runs eagerly instead (a graph break under kiln.compile)."
        )


def _ops(*names: str) -> frozenset:
    found = []
    for name in names:
        packet, _, overload = name.partition(".")
        packet_obj = getattr(aten, packet, None)
        if packet_obj is not None and overload in packet_obj.overloads():
            found.append(getattr(packet_obj, overload))
    return frozenset(found)


# ops whose output shape or value needs real data: never run on fakes
DATA_DEPENDENT = _ops(
    "_local_scalar_dense.default", "item.default", "nonzero.default", "nonzero_numpy.default",
    "masked_select.default", "unique.default", "_unique.default", "_unique2.default", "unique_dim.default",
    "unique_consecutive.default", "equal.default", "is_nonzero.default", "allclose.default",
    "repeat_interleave.Tensor", "bincount.default", "_assert_async.default", "_assert_async.msg",
    "segment_reduce.default", "histogram.bin_ct", "histogramdd.default", "tolist.default",
)

# ops that may take tensors on several devices (copies between devices, CPU index tensors)
MIXED_DEVICE_OK = _ops(
    "copy_.default", "_copy_from.default", "_copy_from_and_resize.default", "_to_copy.default",
    "copy.default", "index.Tensor", "index_put.default", "index_put_.default", "_index_put_impl_.default",
    "lift_fresh.default", "lift_fresh_copy.default", "set_.source_Storage_storage_offset", "set_.source_Tensor",
) | frozenset(  # CTC loss takes its length tensors on the CPU whatever the device of the log-probabilities
    getattr(packet, overload) for packet in (getattr(aten, name, None) for name in (
        "ctc_loss", "_ctc_loss", "_ctc_loss_backward", "_use_cudnn_ctc_loss", "_use_miopen_ctc_loss",
        "_cudnn_ctc_loss")) if packet is not None for overload in packet.overloads()
)


_state = threading.local()


def _in_kernel() -> bool:
    return getattr(_state, "in_kernel", 0) > 0


class FakeTensor(torch.Tensor):
    """A meta tensor that reports ``fake_device`` as its device."""

    fake_device: torch.device

    @staticmethod
    def __new__(cls, meta: torch.Tensor, device: torch.device | str, requires_grad: bool = False):
        if meta.device.type != "meta":
            raise ValueError(f"FakeTensor wraps a meta tensor, got one on {meta.device}")
        device = torch.device(device)
        if device.type == "cuda" and device.index is None:
            device = torch.device("cuda", 0)
        out = torch.Tensor._make_subclass(
            cls, meta, requires_grad, dispatch_device=True, device_for_backend_keys=device
        )
        out.fake_device = device
        return out

    @property
    def _meta(self) -> torch.Tensor:
        """A plain meta tensor with this fake's storage and metadata."""
        return meta_alias(self)

    def __repr__(self) -> str:  # there is no data to print
        grad = ", requires_grad=True" if self.requires_grad else ""
        return f"FakeTensor(size={tuple(self.shape)}, dtype={self.dtype}, device={self.fake_device}{grad})"

    __torch_function__ = torch._C._disabled_torch_function_impl

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        return run_on_fakes(func, args, kwargs or {})


def meta_alias(t: torch.Tensor) -> torch.Tensor:
    """A plain meta tensor viewing ``t``'s storage with ``t``'s size, stride and offset (not a view: its
    metadata is its own). ``detach`` with Python dispatch off copies the metadata as it is; ``set_``
    recomputed contiguity with a guard on every symbolic size (whether it is 1) even where nothing asks."""
    with torch.no_grad(), _kernel_context(), torch._C._DisableTorchDispatch():
        return t.detach()


class _kernel_context:
    """While a meta kernel runs on fakes: dispatch to Meta, and fakes report device meta."""

    def __enter__(self):
        self.prev = torch._C._meta_in_tls_dispatch_include()
        torch._C._set_meta_in_tls_dispatch_include(True)
        self.guards = [torch._C._DisableTorchDispatch(), torch._C._AutoDispatchBelowAutograd()]
        for guard in self.guards:
            guard.__enter__()
        _state.in_kernel = getattr(_state, "in_kernel", 0) + 1
        return self

    def __exit__(self, *exc):
        _state.in_kernel -= 1
        for guard in reversed(self.guards):
            guard.__exit__(*exc)
        torch._C._set_meta_in_tls_dispatch_include(self.prev)
        return False


def output_device(func, args, kwargs) -> torch.device:
    """The device a real call would produce, with ATen's rule for mixing devices.

    An explicit ``device=`` wins. Otherwise tensors that are not 0-dim CPU tensors must agree;
    0-dim CPU tensors (wrapped scalars) mix with any device.
    """
    explicit = kwargs.get("device")
    if explicit is not None:
        return torch.device(explicit)
    flat = leaves((args, kwargs))
    tensors = [t for t in flat if isinstance(t, torch.Tensor)]
    if not tensors:
        return torch.get_default_device() if hasattr(torch, "get_default_device") else torch.device("cpu")
    devices = [(t.dim() == 0 and _device_of(t).type == "cpu", _device_of(t)) for t in tensors]
    common = None
    for is_cpu_scalar, device in devices:
        if is_cpu_scalar:
            continue
        if common is None:
            common = device
        elif device != common and func not in MIXED_DEVICE_OK:
            raise RuntimeError(
                f"Expected all tensors to be on the same device, but found at least two devices, "
                f"{common} and {device}! (in {func}, run on fake tensors)"
            )
    if common is None:
        common = devices[0][1]
    return common


def _device_of(t: torch.Tensor) -> torch.device:
    return t.fake_device if isinstance(t, FakeTensor) else t.device


def _as_kernel_arg(x):
    if isinstance(x, FakeTensor):
        return x
    if isinstance(x, torch.Tensor) and not x.is_meta:
        # a real tensor (a constant) in a fake computation: only its metadata matters
        return torch.empty_strided(x.size(), x.stride(), dtype=x.dtype, device="meta")
    if isinstance(x, torch.device):
        return torch.device("meta")
    return x


def _transformer_encoder_layer_meta(src, *args, **kwargs):
    return src.clone() if src.numel() == 0 else torch.empty_like(src)


def _convolution_layout(out, args, kwargs):
    """The memory format the real device's convolution returns (cuDNN and oneDNN give channels-last
    results for channels-last inputs or weights; the meta kernel always says contiguous), chosen by
    ATen's own backend selection on the fakes, which carry the real device."""
    try:
        x, w, bias, stride, padding, dilation, transposed, output_padding, groups = (list(args) + [None] * 9)[:9]
        if kwargs or x.dim() < 4:
            return out
        if has_symbolic_tensor((x,)) and _plain_contiguous(x) and _plain_contiguous(w):
            return out  # every backend keeps contiguous operands contiguous (and its choice guards on sizes)
        backend = torch._C._select_conv_backend(x, w, bias, stride, padding, dilation, transposed, output_padding, groups)
        fmt = torch._C._conv_determine_backend_memory_format(x, w, backend)
    except (RuntimeError, TypeError, AttributeError):  # another torch: keep the meta kernel's layout
        return out
    if fmt == torch.contiguous_format or out.is_contiguous(memory_format=fmt):
        return out
    with _kernel_context():
        return out.contiguous(memory_format=fmt)


def _plain_contiguous(t) -> bool:
    """Contiguous and not channels-last. A tensor both are true of only because its channel or spatial
    sizes are 1 (a 1x1 kernel's weight) is NCHW, as ATen reads such ambiguous strides; asking the backend
    choice about it asked whether the batch is 1 (``s0 > 1``), which cost dynamic graphs batch 1."""
    if not (isinstance(t, torch.Tensor) and t.is_contiguous()):
        return False
    if not t.is_contiguous(memory_format=torch.channels_last):
        return True
    rest = t.shape[1:]
    return all(type(n) is int for n in rest) and (rest[0] == 1 or math.prod(rest[1:]) == 1)


# outputs whose strides the meta kernel does not give as the real kernel does: fixed after it
OUTPUT_LAYOUT = {aten.convolution.default: _convolution_layout}


# meta kernels that some supported torch versions lack (torch 2.11 has none for these), as newer torch
# registers them: used only where the op's own meta kernel is missing
FALLBACK_META = {aten._transformer_encoder_layer_fwd.default: _transformer_encoder_layer_meta}


def _metadata_ops() -> frozenset:
    names = ("size.int", "size.default", "sym_size.int", "sym_size.default", "stride.int", "stride.default",
             "sym_stride.int", "sym_stride.default", "numel.default", "sym_numel.default", "dim.default",
             "storage_offset.default", "sym_storage_offset.default")
    return _ops(*names)


# size and stride queries: some torch versions send them through Python dispatch for tensors with
# symbolic sizes; they are answered from the fake's own metadata
METADATA_OPS = _metadata_ops()


def _answer_metadata(name: str, t: torch.Tensor, dim=None):
    """A size or stride query answered by the tensor's own metadata (Tensor.size() and friends read the
    TensorImpl; calling the ATen op again would dispatch back here)."""
    if name in ("size", "sym_size"):
        return t.size() if dim is None else t.size(dim)
    if name in ("stride", "sym_stride"):
        return t.stride() if dim is None else t.stride(dim)
    if name in ("numel", "sym_numel"):
        return t.numel()
    if name == "dim":
        return t.dim()
    return t.storage_offset()


def metadata_query(func, args, kwargs):
    name = func._schema.name.split("::")[-1]
    if isinstance(args[0], torch.Tensor) and not kwargs and len(args) <= 2:
        answer = _answer_metadata(name, args[0], *args[1:])
        if not name.startswith("sym_") and has_symbolic_tensor((answer,)):
            # (a C++ body wants plain ints: the sizes would be specialized silently)
            raise _refused(func, args, "its C++ caller asks for concrete sizes")
        return list(answer) if func._overloadname == "default" and name in ("size", "stride") else answer
    with torch._C._DisableTorchDispatch():
        return func(*args, **kwargs)


def _check_index_put(x, indices, values, *rest, **kwargs):
    """What eager checks and the meta kernel does not: ``values`` broadcasts to the indexed shape."""
    if not isinstance(values, torch.Tensor) or any(isinstance(n, torch.SymInt) for n in values.shape):
        return
    if any(isinstance(i, torch.Tensor) and i.dtype in (torch.bool, torch.uint8) for i in indices):
        return  # (a mask's indexed shape depends on its data)
    with _kernel_context():
        result = aten.index.Tensor(meta_alias(x), [None if i is None else meta_alias(i) for i in indices])
    if any(isinstance(n, torch.SymInt) for n in result.shape):
        return
    try:
        ok = tuple(torch.broadcast_shapes(tuple(values.shape), tuple(result.shape))) == tuple(result.shape)
    except RuntimeError:
        ok = False
    if not ok:
        raise RuntimeError(f"shape mismatch: value tensor of shape {list(values.shape)} cannot be broadcast to "
                           f"indexing result of shape {list(result.shape)}")


def _check_sorter(sorted_sequence, value, *rest, sorter=None, **kwargs):
    if isinstance(sorter, torch.Tensor) and sorter.dtype != torch.int64:
        raise RuntimeError(f"torch.searchsorted(): sorter must be a tensor of long dtype but got dtype "
                           f"{_ATEN_DTYPE_NAMES.get(sorter.dtype, sorter.dtype)}")


_ATEN_DTYPE_NAMES = {torch.int32: "Int", torch.int16: "Short", torch.int8: "Char", torch.uint8: "Byte",
                     torch.bool: "Bool", torch.float32: "Float", torch.float64: "Double", torch.float16: "Half",
                     torch.bfloat16: "BFloat16"}


def _check_scan_in_place(name):
    def check(x, dim, dtype=None, **kwargs):
        if x.dtype == torch.bool and dtype in (None, torch.bool):  # (eager has no bool kernel)
            raise NotImplementedError(f'"{name}_out_{_device_of(x).type}" not implemented for \'Bool\'')
    return check


def _check_as_strided(x, size, stride, storage_offset=None, **kwargs):
    """The view must lie inside ``x``'s storage (meta storages are not checked; eager raises)."""
    offset = x.storage_offset() if storage_offset is None else storage_offset
    if not all(isinstance(v, int) for v in (*size, *stride, offset)) or any(n == 0 for n in size):
        return
    nbytes = x.untyped_storage().nbytes()
    if not isinstance(nbytes, int):
        return
    itemsize = x.element_size()
    required = (offset + sum((n - 1) * st for n, st in zip(size, stride)) + 1) * itemsize
    if required > nbytes:
        raise RuntimeError(f"setStorage: sizes {list(size)}, strides {list(stride)}, storage offset {offset}, and "
                           f"itemsize {itemsize} requiring a storage size of {required} are out of bounds for "
                           f"storage of size {nbytes}")


# argument checks eager makes that the meta kernels skip: run before the meta kernel
META_CHECKS = {
    aten.as_strided.default: _check_as_strided,
    aten.as_strided_.default: _check_as_strided,
    aten.index_put.default: _check_index_put,
    aten.index_put_.default: _check_index_put,
    aten._index_put_impl_.default: _check_index_put,
    aten.searchsorted.Tensor: _check_sorter,
    aten.searchsorted.Scalar: _check_sorter,
    aten.cumsum_.default: _check_scan_in_place("cumsum"),
    aten.cumprod_.default: _check_scan_in_place("cumprod"),
}


def run_on_fakes(func, args, kwargs):
    """Run ``func`` through its meta kernel; wrap new meta outputs as fakes on the right device."""
    check = META_CHECKS.get(func)
    if check is not None:
        check(*args, **kwargs)
    if wants_check(func, args, kwargs):  # (eager's checks of numbers given to integer ops)
        check_scalars(func, args, kwargs)
    if func is prim.device.default:
        return torch.device("meta") if _in_kernel() else args[0].fake_device
    if func in METADATA_OPS:
        return metadata_query(func, args, kwargs)
    device = output_device(func, args, kwargs)
    if func in DATA_DEPENDENT or is_mask_index(func, args, kwargs):
        out = _run_unbacked(func, args, kwargs)
        if out is not None:
            return map_leaves(lambda x: FakeTensor(x, device) if isinstance(x, torch.Tensor) else x, out)
        if func in DATA_DEPENDENT:
            raise UnsupportedFakeOp(func, "its output shape or value depends on tensor data")
        raise UnsupportedFakeOp(func, "indexing with a boolean mask gives a result whose size depends on the mask's "
                                      "data (kept in the graph only where its size can stay a run-time size)")
    kernel_args = map_leaves(_as_kernel_arg, args)
    kernel_kwargs = map_leaves(_as_kernel_arg, kwargs)
    if "device" in kernel_kwargs:
        kernel_kwargs["device"] = torch.device("meta")
    try:
        if has_symbolic_tensor(kernel_args) or has_symbolic_tensor(tuple(kernel_kwargs.values())):
            out = _run_symbolic(func, kernel_args, kernel_kwargs)
        else:
            with _kernel_context():
                out = fast_meta(func, kernel_args, kernel_kwargs)
                if out is None:
                    out = func(*kernel_args, **kernel_kwargs)
    except NotImplementedError as exc:
        if func not in FALLBACK_META:
            raise UnsupportedFakeOp(func, f"it has no meta kernel ({str(exc).splitlines()[0][:200]})") from None
        with _kernel_context():
            out = FALLBACK_META[func](*kernel_args, **kernel_kwargs)
    except RuntimeError as exc:
        if "as opposed to FakeTensors" not in str(exc):
            raise
        out = _custom_op_with_dynamic_size(func, kernel_args, kernel_kwargs)

    layout = OUTPUT_LAYOUT.get(func)
    if layout is not None:
        out = layout(out, args, kwargs)

    def wrap(x):
        if isinstance(x, torch.Tensor) and not isinstance(x, FakeTensor) and x.is_meta:
            return FakeTensor(x, device)
        return x

    return map_leaves(wrap, out)


class _DynamicSizeContext:
    """What ``torch.library.get_ctx()`` gives a custom op's fake implementation under kiln: a
    ``new_dynamic_size`` is an unbacked size symbol of the capture's ShapeEnv (read from the op's
    result at run time, as ``nonzero``'s count is)."""

    def __init__(self, env, func):
        self.env, self.func = env, func

    def new_dynamic_size(self, *, min=0, max=None) -> torch.SymInt:
        if min < 0 or (max is not None and max < min):
            raise ValueError(f"new_dynamic_size(min={min}, max={max}): the range must be 0 <= min <= max")
        return self.env.symint(self.env.create_unbacked(f"{self.func} (its fake's new_dynamic_size)", min, max))

    def create_unbacked_symint(self, *, min=2, max=None) -> torch.SymInt:  # (torch's deprecated name)
        return self.new_dynamic_size(min=min, max=max)


def _custom_op_with_dynamic_size(func, args, kwargs):
    """A custom op whose fake implementation asks ``torch.library.get_ctx()`` for a data-dependent size:
    the registered fake runs under a context of kiln's (torch's meta kernel refuses it: plain meta
    tensors have no shape environment)."""
    from torch._library import fake_impl, simple_registry

    env = active_env()
    entry = simple_registry.singleton.find(func._schema.name) if hasattr(func, "_schema") else None
    kernel = getattr(getattr(entry, "fake_impl", None), "kernel", None)
    if env is None or kernel is None:
        raise UnsupportedFakeOp(func, "its fake implementation asks for a data-dependent size "
                                      "(torch.library.get_ctx().new_dynamic_size) where kiln has no sizes to give")
    with _kernel_context(), fake_impl.set_ctx_getter(lambda: _DynamicSizeContext(env, func)):
        return kernel.func(*args, **kwargs)


def _run_unbacked(func, args, kwargs):
    """A data-dependent op's fake result with unbacked sizes (kiln/fake/unbacked.py), or None."""
    if active_env() is None:
        return None
    source = count_source(func, args, kwargs)  # (the fake itself: one count per tensor and version)
    args = map_leaves(lambda x: meta_alias(x) if isinstance(x, FakeTensor) else x, args)
    kwargs = map_leaves(lambda x: meta_alias(x) if isinstance(x, FakeTensor) else x, kwargs)
    with _kernel_context():
        return unbacked_meta(func, args, kwargs, source)


# In-place changes of a tensor's sizes or strides. On symbolic fakes they are refused (the frame is
# compiled for the sizes seen): a graph input's symbols are read from the input itself, which the op
# changes (``x.t_(); return x.shape`` returned the first call's sizes), and ``squeeze_`` of a meta alias
# with symbolic sizes crashed the process.
_METADATA_INPLACE = frozenset({"t_", "transpose_", "swapdims_", "swapaxes_", "unsqueeze_", "squeeze_",
                               "as_strided_", "resize_", "resize_as_", "set_"})


def _changes_nothing(x, size, stride, storage_offset=None) -> bool:
    """``x.as_strided_(size, stride, offset)`` keeps x's sizes and offset and changes strides only where a
    size is 1, which no index reads: ATen's ``adaptive_avg_pool2d`` to 1x1 relabels its ``(n, c, 1, 1)``
    mean as channels-last that way (on CUDA, where convolutions return channels-last tensors)."""
    from kiln.fake.shapes import to_expr

    try:
        old, new = [to_expr(n) for n in x.size()], [to_expr(n) for n in size]
        if old != new or (storage_offset is not None and to_expr(storage_offset) != to_expr(x.storage_offset())):
            return False
        return all(n == 1 or to_expr(a) == to_expr(b) for n, a, b in zip(new, x.stride(), stride))
    except TypeError:
        return False


def _run_symbolic(func, args, kwargs):
    """The meta kernel (or kiln's rule, symbolic_meta.py) on plain meta aliases of symbolic fakes: a
    tensor with symbolic sizes would re-enter Python dispatch through torch's Python meta kernels."""
    if getattr(getattr(func, "overloadpacket", None), "__name__", "") in _METADATA_INPLACE:
        if func is aten.as_strided_.default and _changes_nothing(*args, **kwargs):
            return args[0]
        raise _refused(func, args, "an in-place change of a tensor's sizes or strides")

    def plain(x):
        return meta_alias(x) if isinstance(x, FakeTensor) else x

    args, kwargs = map_leaves(plain, args), map_leaves(plain, kwargs)
    with _kernel_context():
        try:
            out = fast_meta(func, args, kwargs)
            if out is None:
                out = symbolic_meta(func, args, kwargs)
            if out is None:
                out = func(*args, **kwargs)
        except (RecursionError, NotImplementedError) as exc:
            raise _refused(func, args, f"{type(exc).__name__}: {str(exc)[:200]}") from None
        except SymbolicShapeUnsupported as exc:
            raise _refused(func, args, exc.why) from None
        except RuntimeError as exc:
            text = str(exc)
            if "concrete integers" in text or "dispatch_on_subclass" in text or "symbolic sizes" in text:
                out = pointwise_fallback(func, args, kwargs)
                if out is None:
                    raise _refused(func, args, text.splitlines()[0][:200]) from None
                return out
            raise
    return out


def _refused(func, args, why: str) -> SymbolicShapeUnsupported:
    """The error for an op that cannot run on symbolic sizes; the ShapeEnv remembers it (``failed``), so
    capture traces the frame again with static sizes even where the error itself was caught."""
    for x in leaves(args):
        for n in (x.shape if isinstance(x, torch.Tensor) else [x]):
            if isinstance(n, torch.SymInt) and hasattr(n.node, "env") and n.node.env.is_unbacked(n.node.expr):
                n.node.env.unbacked_error(f"{func} ({why})")  # (traced again with the graph broken before)
                return SymbolicShapeUnsupported(func, why)
    for x in leaves(args):
        for n in (x.shape if isinstance(x, torch.Tensor) else [x]):
            if isinstance(n, torch.SymInt) and hasattr(n.node, "env"):
                n.node.env.failed = n.node.env.failed or f"{func} cannot run on symbolic sizes ({why})"
                return SymbolicShapeUnsupported(func, why)
    return SymbolicShapeUnsupported(func, why)
