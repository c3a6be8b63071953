"""What a generated wrapper needs at run time: the compiled ``Wrapper`` and the helpers its source
calls. Kept apart from the wrapper's generator (``wrapper.py``, which imports the loop IR, the
scheduler and sympy), so that a graph loaded from the warm cache imports none of those.
"""
from __future__ import annotations

import dataclasses

import torch


@dataclasses.dataclass
class Wrapper:
    source: str
    namespace: dict
    symbols: set = dataclasses.field(default_factory=set)  # size symbols the code uses
    bound: set = dataclasses.field(default_factory=set)  # size symbols read from the inputs

    def check_symbols(self) -> None:
        """Every size symbol the code uses is read from an input's size (else it cannot run)."""
        missing = self.symbols - self.bound
        if missing:
            from kiln.loopir.sizes import DynamicUnsupported

            raise DynamicUnsupported(f"size symbols {sorted(map(str, missing))} are not sizes of graph inputs")

    def compile(self):
        ns = dict(self.namespace)
        exec(compile(self.source, "<kiln wrapper>", "exec"), ns)
        return ns["call"]


def ensure_layout(t: torch.Tensor, size, stride) -> torch.Tensor:
    """An extern kernel's result with the strides the generated code assumes (copied if ATen chose others)."""
    if t is None:  # an optional output ATen left undefined (e.g. attention's unused logsumexp)
        return None
    if tuple(t.stride()) == stride or t.numel() <= 1:
        return t
    return torch.empty_strided(size, stride, dtype=t.dtype, device=t.device).copy_(t)


def pointer_call(fn: str, names: list[str], sizes=()) -> str:
    """A call of a C++ kernel: raw data pointers (ctypes), then the size symbols' values."""
    return f"{fn}({', '.join([f'{n}.data_ptr()' for n in names] + list(sizes))})"


def tensor_call(fn: str, names: list[str], sizes=()) -> str:
    """A call of a launcher that takes the tensors themselves (Triton), then the size symbols' values."""
    return f"{fn}({', '.join(list(names) + list(sizes))})"


# the wrapper's global that turns its in-place stores on (WrapperGen's ``inplace``)
INPLACE_FLAG = "_INPLACE"
