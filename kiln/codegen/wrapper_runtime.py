"""What a generated wrapper needs at run time: the compiled ``Wrapper`` and the helpers its source
calls. Kept apart from the wrapper's generator (``wrapper.py``, which imports the loop IR, the
scheduler and sympy), so that a graph loaded from the warm cache imports none of those.
"""
from __future__ import annotations

import dataclasses

import torch

from kiln.errors import IndexOutOfBoundsError


@dataclasses.dataclass
class Wrapper:
    source: str
    namespace: dict
    symbols: set = dataclasses.field(default_factory=set)  # size symbols the code uses
    bound: set = dataclasses.field(default_factory=set)  # size symbols read from the inputs
    locations: dict = dataclasses.field(default_factory=dict)  # error messages' marks -> user lines

    def check_symbols(self) -> None:
        """Every size symbol the code uses is read from an input's size (else it cannot run)."""
        missing = self.symbols - self.bound
        if missing:
            from kiln.loopir.sizes import DynamicUnsupported

            raise DynamicUnsupported(f"size symbols {sorted(map(str, missing))} are not sizes of graph inputs")

    def compile(self):
        from kiln.codegen.locations import resolve_locations

        ns = dict(self.namespace)
        exec(compile(resolve_locations(self.source, self.locations), "<kiln wrapper>", "exec"), ns)
        return ns["call"]


def ensure_layout(t: torch.Tensor, size, stride) -> torch.Tensor:
    """An extern kernel's result with the strides the generated code assumes (copied if ATen chose others)."""
    if t is None:  # an optional output ATen left undefined (e.g. attention's unused logsumexp)
        return None
    if tuple(t.stride()) == stride or t.numel() <= 1:
        return t
    return torch.empty_strided(size, stride, dtype=t.dtype, device=t.device).copy_(t)


def aligned_attention_bias(bias):
    """The attention bias as the memory-efficient kernel takes it: rows 16-element aligned (ATen's own
    composite pads the last dim to a multiple of 16 and slices it back). kiln may realize the bias it
    computed densely (rows of the sequence length: "attn_bias is not correctly aligned" for a length
    of 510); such a bias is copied into padded rows here, its broadcast dims kept broadcast."""
    if bias is None:
        return None
    size, stride = bias.shape, bias.stride()
    if (stride[-1] == 1 or size[-1] == 1) and bias.data_ptr() % 16 == 0 and \
            all(st % 16 == 0 for n, st in zip(size[:-1], stride[:-1]) if n > 1):
        return bias
    compact = bias
    for d in range(bias.dim() - 1):
        if stride[d] == 0 and size[d] > 1:
            compact = compact.narrow(d, 0, 1)
    n = size[-1]
    padded = torch.nn.functional.pad(compact, (0, (-n) % 16))
    return padded[..., :n].expand(size)


# extern ops whose arguments the wrapper passes through an adapter: schema name -> {position: adapter}
EXTERN_ARGUMENT_ADAPTERS = {
    "aten::_scaled_dot_product_efficient_attention": {3: "aligned_attention_bias"},
    "aten::_scaled_dot_product_efficient_attention_backward": {4: "aligned_attention_bias"},
}


# the names every wrapper's namespace starts with (the warm cache stores them by name)
def check_int64(value: int, what: str, wrap: bool = False) -> int:
    """A number the wrapper hands to kernels (a value computed from sizes and int arguments, or an int
    argument), which take 64-bit signed ints. Outside that range eager PyTorch raises OverflowError for a
    number beyond 64 bits, as this does; one in [2**63, 2**64) eager wraps for integer arithmetic (``wrap``:
    so does this) and converts exactly for floating arithmetic (refused here, with why)."""
    if -(1 << 63) <= value < (1 << 63):
        return value
    if wrap and (1 << 63) <= value < (1 << 64):
        return value - (1 << 64)
    if value >= 1 << 64:
        raise OverflowError(f"int too big to convert ({what} = {value})")
    if value < 0:
        raise OverflowError(f"can't convert negative int to unsigned ({what} = {value})")
    raise OverflowError(f"{what} = {value} is above 2**63 - 1: the compiled graph's kernels take it as a 64-bit "
                        "signed int (eager PyTorch wraps it for integer tensors); compute it outside the "
                        "compiled function or keep it below 2**63")


_C_TYPE_NAMES = {torch.int8: "int8_t", torch.uint8: "uint8_t", torch.int16: "int16_t", torch.int32: "int",
                 torch.int64: "int64_t", torch.float16: "c10::Half", torch.bfloat16: "c10::BFloat16",
                 torch.float32: "float", torch.float64: "double"}


def check_fits(value: int, dtype: torch.dtype) -> None:
    """Eager's check where ``full``, ``fill_`` and ``scalar_tensor`` convert a Python int to ``dtype``."""
    if dtype == torch.bool or dtype.is_complex:
        return
    if dtype.is_floating_point:
        fits = abs(value) <= torch.finfo(dtype).max
    else:
        info = torch.iinfo(dtype)
        fits = info.min <= value <= info.max
    if not fits:
        raise RuntimeError(f"value cannot be converted to type {_C_TYPE_NAMES.get(dtype, dtype)} without overflow")


def kernel_error(code: int, index_message: str) -> Exception:
    """The exception for a kernel's error flag (codegen/cpp/prelude.h): 1 (or True, Triton's interpreter)
    an index out of bounds, 2 an integer division by zero (eager's CPU kernels raise
    ``RuntimeError: ZeroDivisionError``)."""
    if code == 2:
        return RuntimeError("ZeroDivisionError")
    return IndexOutOfBoundsError(index_message)


WRAPPER_HELPERS = {"empty_strided": torch.empty_strided, "ensure_layout": ensure_layout, "torch": torch,
                   "aligned_attention_bias": aligned_attention_bias, "IndexOutOfBoundsError": IndexOutOfBoundsError,
                   "kernel_error": kernel_error,
                   "check_int64": check_int64, "check_fits": check_fits}


def pointer_call(fn: str, names: list[str], sizes=()) -> str:
    """A call of a C++ kernel: raw data pointers (ctypes), then the size symbols' values."""
    return f"{fn}({', '.join([f'{n}.data_ptr()' for n in names] + list(sizes))})"


def tensor_call(fn: str, names: list[str], sizes=()) -> str:
    """A call of a launcher that takes the tensors themselves (Triton), then the size symbols' values."""
    return f"{fn}({', '.join(list(names) + list(sizes))})"


# the wrapper's global that turns its in-place stores on (WrapperGen's ``inplace``)
INPLACE_FLAG = "_INPLACE"
