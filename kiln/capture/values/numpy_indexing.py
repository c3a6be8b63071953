"""Indexing NumPy arrays: a[i], a[1:, None], a[idx_array], a[...] = v, a[mask] = v.

Basic indexes (ints, slices with a positive step, None, Ellipsis) give torch views, as NumPy gives
views; all-int indexes of every axis give a NumPy scalar (a copy: a later write to the array must not
change it). Integer arrays and lists (advanced indexing) give copies in both libraries. Boolean masks
give a result whose size depends on the data: reading one breaks the graph; writing a scalar through a
mask of the array's own shape is `where(mask, value, a)` written back.
"""
from __future__ import annotations

import operator

import torch

from kiln.capture.values.base import ConstantValue, Value, unsupported
from kiln.capture.values.containers import ListValue, SliceValue, TupleValue
from kiln.capture.values.numpy_values import NDArrayValue, cast, is_python_number, numpy_module, view_array

def _parts(index: Value) -> list[Value]:
    if isinstance(index, TupleValue):
        return list(index.elements)
    if _is_tuple(index):
        return [ConstantValue(v) for v in index.as_constant()]
    return [index]


def _is_tuple(index: Value) -> bool:
    return isinstance(index, TupleValue) or index.is_constant() and type(index.as_constant()) is tuple


def _basic_constant(part: Value):
    """The Python object of a basic index part, or None when the part is not basic."""
    if isinstance(part, SliceValue):
        if not part.is_constant():
            unsupported("a slice with non-constant bounds indexing a NumPy array")
        s = part.as_constant()
        if s.step is not None and s.step <= 0:
            unsupported(f"slice step {s.step} on a NumPy array (a negative-step view has no torch equivalent)")
        return s
    if part.is_constant() and not isinstance(part, ListValue):
        value = part.as_constant()
        if value is None or value is Ellipsis or type(value) is int or isinstance(value, slice):
            if isinstance(value, slice) and value.step is not None and value.step <= 0:
                unsupported(f"slice step {value.step} on a NumPy array")
            return value
        unsupported(f"index {value!r} of a NumPy array")
    return None


def _torch_index(tx, arr: NDArrayValue, index: Value, *, for_write: bool):
    """(torch index as a Value, basic constant index or None, all-int-over-every-axis)."""
    np = numpy_module()
    parts = _parts(index)
    constants = [_basic_constant(p) for p in parts]
    if all(c is not None or p.is_constant() and p.as_constant() is None for c, p in zip(constants, parts)):
        const = tuple(constants) if _is_tuple(index) else constants[0]
        all_ints = all(type(c) is int for c in constants) and len(constants) == arr.ndim
        return ConstantValue(const), const, all_ints
    torch_parts = []
    for part, c in zip(parts, constants):
        if c is not None or (part.is_constant() and not isinstance(part, ListValue) and part.as_constant() is None):
            torch_parts.append(ConstantValue(c))
            continue
        if isinstance(part, ListValue) and part.is_constant():
            value = np.asarray(part.as_constant())
            if value.dtype.kind not in "i":
                unsupported(f"index list {part.as_constant()!r} of a NumPy array")
            if for_write and len(set(value.ravel().tolist())) != value.size:
                unsupported("assignment through an index list with repeats (NumPy's last write wins; torch's "
                            "order is unspecified)")
            part = ConstantValue(None)
            torch_parts.append(tx.output.call("call_function", torch.tensor, [ConstantValue(value.tolist())],
                                              {"dtype": ConstantValue(torch.int64)}))
            continue
        if isinstance(part, NDArrayValue):
            if part.dtype.kind == "b":
                if not for_write:
                    unsupported("boolean-mask indexing of a NumPy array: the result's size depends on the data",
                                hint="use np.where(mask, a, 0) to keep one graph")
                torch_parts.append(part.tensor)
                continue
            if part.dtype.kind not in "iu":
                unsupported(f"a {part.dtype} array used as an index (NumPy raises IndexError)")
            if for_write:
                unsupported("assignment through an integer-array index: with repeated indices NumPy's last "
                            "write wins, torch's order is unspecified (it depends on the data)")
            torch_parts.append(cast(tx, part.tensor, np.dtype(np.int64)))
            continue
        unsupported(f"index {part} of a NumPy array")
    index_value = TupleValue(torch_parts) if _is_tuple(index) else torch_parts[0]
    return index_value, None, False


def array_getitem(tx, arr: NDArrayValue, index: Value) -> Value:
    torch_index, const, all_ints = _torch_index(tx, arr, index, for_write=False)
    if arr.ndim == 0 and const == ():
        # a[()] of a 0-d array is its NumPy scalar
        return NDArrayValue(tx.output.call("call_method", "clone", [arr.tensor], {}), arr.dtype, scalar=True)
    if arr.scalar:
        unsupported("indexing a NumPy scalar")
    result = tx.output.call("call_function", operator.getitem, [arr.tensor, torch_index], {})
    if all_ints:
        return NDArrayValue(tx.output.call("call_method", "clone", [result], {}), arr.dtype, scalar=True)
    if const is not None:
        return view_array(tx, arr, result, operator.getitem, (const,))
    if result.example.dim() == 0:
        unsupported("advanced indexing of a NumPy array giving a 0-d result")
    return NDArrayValue(result, arr.dtype)


def array_setitem(tx, arr: NDArrayValue, index: Value, value: Value) -> None:
    """`a[index] = value`: value cast to a's dtype as NumPy's assignment does (Python numbers checked
    by NumPy itself: np.array(300, dtype=uint8) raises where the assignment would)."""
    np = numpy_module()
    from kiln.capture.values.numpy_values import as_array

    if arr.scalar:
        unsupported("item assignment on a NumPy scalar (NumPy raises TypeError)")
    if arr.readonly:
        unsupported("writing to a read-only array (np.broadcast_to gives one; NumPy raises ValueError)")
    if is_python_number(value):
        try:
            converted = np.array(value.as_constant(), dtype=arr.dtype).item()
        except Exception as exc:
            unsupported(f"assigning {value.as_constant()!r} into a {arr.dtype} array raised "
                        f"{type(exc).__name__}: {exc}")
        source = ConstantValue(converted)
    else:
        other = as_array(tx, value, "array assignment")
        source = cast(tx, other.tensor, arr.dtype)
        if source is other.tensor:  # it may overlap the target (a[1:] = a[:-1]): NumPy reads it first
            source = tx.output.call("call_method", "clone", [source], {})
    mask = index if isinstance(index, NDArrayValue) and index.dtype.kind == "b" else None
    if mask is not None:
        if mask.shape != arr.shape or not isinstance(source, ConstantValue) and source.example.dim() != 0:
            unsupported("boolean-mask assignment other than a scalar through a mask of the array's shape")
        blended = tx.output.call("call_function", torch.where, [mask.tensor, source, arr.tensor], {})
        tx.output.call("call_method", "copy_", [arr.tensor, cast(tx, blended, arr.dtype)], {})
        return
    torch_index, _, _ = _torch_index(tx, arr, index, for_write=True)
    tx.output.call("call_function", operator.setitem, [arr.tensor, torch_index, source], {})
