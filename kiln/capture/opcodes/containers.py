"""Building and unpacking tuples, lists, sets, dicts, slices and strings."""
from __future__ import annotations

from kiln.capture.opcodes.registry import handles
from kiln.capture.values.base import ConstantValue, unsupported
from kiln.capture.values.scalars import defer, format_value, join_strings
from kiln.capture.values.containers import DictValue, ListValue, SetValue, SliceValue, TupleValue
from kiln.capture.values.container_keys import dict_key


@handles()
def BUILD_TUPLE(tx, inst):
    tx.push(TupleValue(tx.popn(inst.arg)))


@handles()
def BUILD_LIST(tx, inst):
    tx.push(ListValue(tx.popn(inst.arg)))


@handles()
def BUILD_SET(tx, inst):
    tx.push(SetValue([]).add_each(tx, tx.popn(inst.arg)))


@handles()
def BUILD_MAP(tx, inst):
    items = tx.popn(2 * inst.arg)
    entries: dict = {}
    for i in range(0, len(items), 2):  # inserted one by one: equal keys keep the first key object
        entries[dict_key(tx, items[i], entries)] = items[i + 1]
    tx.push(DictValue(entries))


@handles()
def BUILD_CONST_KEY_MAP(tx, inst):
    keys = tx.pop().as_constant()
    values = tx.popn(inst.arg)
    tx.push(DictValue(dict(zip(keys, values))))


@handles()
def BUILD_SLICE(tx, inst):
    parts = tx.popn(inst.arg)
    if len(parts) == 2:
        parts.append(ConstantValue(None))
    tx.push(SliceValue(*parts))


@handles()
def BUILD_STRING(tx, inst):
    parts = tx.popn(inst.arg)
    deferred = defer(join_strings, parts)  # pieces formatted from values not guarded by value
    tx.push(deferred if deferred is not None else ConstantValue("".join(p.as_constant() for p in parts)))


@handles()
def FORMAT_VALUE(tx, inst):
    flags = inst.arg
    spec = tx.pop().as_constant() if flags & 0x04 else ""
    value = tx.pop()
    deferred = defer(format_value, [value, ConstantValue(flags & 0x03), ConstantValue(spec)])
    if deferred is not None:  # e.g. f"{loss.item():.4f}" of a value handed to a resume function
        tx.push(deferred)
        return
    from kiln.capture.values.exceptions import ExceptionValue, format_exception

    if isinstance(value, ExceptionValue):
        tx.push(format_exception(tx, value, flags & 0x03, spec))
        return
    if not value.is_constant():
        text = _format_python_object(tx, value, flags & 0x03, spec)
        if text is None:
            unsupported(f"formatting {value} into a string")
        tx.push(text)
        return
    tx.push(ConstantValue(format_value(value.as_constant(), flags & 0x03, spec)))


def _format_python_object(tx, value, conversion: int, spec: str):
    """f"{obj}", f"{obj!r:>8}" of a Python object with a Python __str__/__repr__ (and object's __format__
    where no conversion is given: str(obj), which refuses a spec): that method traced. None: not modelled."""
    from kiln.capture.values.builtins import python_str_or_repr
    from kiln.capture.values.ops import is_python_object

    if not is_python_object(value) or conversion == 3:
        return None
    if conversion == 0 and (value.python_type().__format__ is not object.__format__ or spec):
        return None
    text = python_str_or_repr(tx, value, conversion == 2)
    if text is NotImplemented:
        return None
    return ConstantValue(format(text.as_constant(), spec))


# The targets below are usually built by the same comprehension or display, but in a resume function
# they can be containers handed in from before a break: the mutation then goes through the container's
# own methods, which record it as a side effect.

@handles()
def LIST_APPEND(tx, inst):
    value = tx.pop()
    tx.stack[-inst.arg].call_method(tx, "append", [value], {})


@handles()
def SET_ADD(tx, inst):
    value = tx.pop()
    tx.stack[-inst.arg].call_method(tx, "add", [value], {})


@handles()
def MAP_ADD(tx, inst):
    value = tx.pop()
    key = tx.pop()
    tx.stack[-inst.arg].setitem(tx, key, value)


@handles()
def LIST_EXTEND(tx, inst):
    values = tx.pop()
    tx.stack[-inst.arg].call_method(tx, "extend", [values], {})


@handles()
def SET_UPDATE(tx, inst):
    values = tx.pop()
    tx.stack[-inst.arg].call_method(tx, "update", [values], {})


@handles("DICT_UPDATE", "DICT_MERGE")
def DICT_UPDATE(tx, inst):
    other = tx.pop()
    target = tx.stack[-inst.arg]
    if isinstance(other, DictValue) and type(target) is DictValue:
        if inst.opname == "DICT_MERGE":
            dup = set(target.entries) & set(other.entries)
            if dup:
                unsupported(f"got multiple values for keyword argument {sorted(dup)[0]!r}")
        # through the dict's own check: one handed in from before a break records the change
        target._check_mutable(tx, "dict update")
        target.entries.update(other.entries)
        return
    from kiln.capture.values.modules import NNModuleValue

    unsupported(f"** of {other}")


@handles()
def LIST_TO_TUPLE(tx, inst):
    tx.push(TupleValue(tx.items(tx.pop())))


@handles()
def UNPACK_SEQUENCE(tx, inst):
    seq = tx.pop()
    items = tx.items(seq)
    if len(items) != inst.arg:
        unsupported(f"unpacking {len(items)} values into {inst.arg} names")
    for v in reversed(items):
        tx.push(v)


@handles()
def UNPACK_EX(tx, inst):
    before = inst.arg & 0xFF
    after = inst.arg >> 8
    items = tx.items(tx.pop())
    if len(items) < before + after:
        unsupported("not enough values to unpack")
    middle = items[before:len(items) - after]
    values = items[:before] + [ListValue(middle)] + items[len(items) - after:]
    for v in reversed(values):
        tx.push(v)
