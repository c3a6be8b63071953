"""Structural pattern matching (`match` statements): MATCH_SEQUENCE, MATCH_MAPPING, MATCH_KEYS,
MATCH_CLASS and GET_LEN (the same semantics on 3.11 and 3.12; the rest of a match is COPY/SWAP,
comparisons, UNPACK_* and DICT_UPDATE/DELETE_SUBSCR, handled elsewhere).

What a pattern asks is answered from the subject's type (exactly as CPython: the type's
Py_TPFLAGS_SEQUENCE / Py_TPFLAGS_MAPPING flags, isinstance, __match_args__) and from its items or
attributes read through the usual symbolic lookups (so reading them guards what they depend on).
"""
from __future__ import annotations

from kiln.capture.opcodes.registry import handles
from kiln.capture.values.base import ConstantValue, unsupported

_TPFLAGS_SEQUENCE = 1 << 5
_TPFLAGS_MAPPING = 1 << 6
# builtin types whose single positional sub-pattern matches the subject itself (CPython's MATCH_SELF)
_MATCH_SELF = (bool, bytearray, bytes, dict, float, frozenset, int, list, set, str, tuple)


def _subject_flags(subject) -> int:
    return subject.python_type().__flags__


@handles()
def MATCH_SEQUENCE(tx, inst):
    tx.push(ConstantValue(bool(_subject_flags(tx.stack[-1]) & _TPFLAGS_SEQUENCE)))


@handles()
def MATCH_MAPPING(tx, inst):
    tx.push(ConstantValue(bool(_subject_flags(tx.stack[-1]) & _TPFLAGS_MAPPING)))


@handles()
def GET_LEN(tx, inst):
    from kiln.capture.values.builtins import BuiltinValue

    tx.push(BuiltinValue(len).call(tx, [tx.stack[-1]], {}))


@handles()
def MATCH_KEYS(tx, inst):
    """TOS is a tuple of keys, TOS1 the mapping: push a tuple of their values, or None if one is missing.
    CPython looks each key up with the mapping's `get` (so a defaultdict does not insert)."""
    from kiln.capture.values.containers import DictValue, TupleValue
    from kiln.capture.values.container_keys import dict_key

    keys = tx.stack[-1].as_constant()
    subject = tx.stack[-2]
    if len(set(keys)) != len(keys):
        unsupported("mapping pattern checks duplicate key", hint="CPython raises ValueError here")
    if isinstance(subject, DictValue):
        entries = subject.entries
        found = []
        for key in keys:
            k = dict_key(tx, ConstantValue(key), entries)
            if k not in entries:
                tx.push(ConstantValue(None))
                return
            found.append(entries[k])
        tx.push(TupleValue(found))
        return
    marker = object()
    found = []
    for key in keys:
        value = subject.call_method(tx, "get", [ConstantValue(key), ConstantValue(marker)], {})
        if value.is_constant() and value.as_constant() is marker:
            tx.push(ConstantValue(None))
            return
        found.append(value)
    tx.push(TupleValue(found))


@handles()
def MATCH_CLASS(tx, inst):
    """Pops the keyword names, the class and the subject; pushes the tuple of matched attributes
    (positional ones first, through __match_args__), or None when the subject does not match."""
    from kiln.capture.values.builtins import BuiltinValue
    from kiln.capture.values.containers import TupleValue

    names = tx.pop().as_constant()
    cls_value = tx.pop()
    subject = tx.pop()
    if not cls_value.is_constant() or not isinstance(cls_value.as_constant(), type):
        unsupported(f"class pattern with {cls_value}, which is not a known class",
                    hint="CPython raises TypeError: called match pattern must be a class")
    cls = cls_value.as_constant()
    if not BuiltinValue(isinstance).call(tx, [subject, cls_value], {}).as_constant():
        tx.push(ConstantValue(None))
        return
    count = inst.arg
    attrs = _positional_names(cls, count)
    if attrs is None:  # a MATCH_SELF builtin type with one positional sub-pattern: the subject itself
        found = [subject]
        attrs = ()
    else:
        found = []
    attrs = tuple(attrs) + tuple(names)
    if len(set(attrs)) != len(attrs):
        unsupported(f"class pattern {cls.__name__}(...) names an attribute twice",
                    hint="CPython raises TypeError here")
    for name in attrs:
        value = _match_attr(tx, subject, name)
        if value is None:
            tx.push(ConstantValue(None))
            return
        found.append(value)
    tx.push(TupleValue(found))


def _positional_names(cls: type, count: int):
    """The attribute names of `count` positional sub-patterns (None: MATCH_SELF's subject itself)."""
    if count == 0:
        return ()
    match_args = getattr(cls, "__match_args__", None)
    if match_args is None:
        if count == 1 and issubclass(cls, _MATCH_SELF):
            return None
        unsupported(f"{cls.__name__}() accepts 0 positional sub-patterns ({count} given)",
                    hint="CPython raises TypeError here")
    if type(match_args) is not tuple or not all(type(a) is str for a in match_args):
        unsupported(f"{cls.__name__}.__match_args__ must be a tuple of strings")
    if count > len(match_args):
        unsupported(f"{cls.__name__}() accepts {len(match_args)} positional sub-patterns ({count} given)",
                    hint="CPython raises TypeError here")
    return match_args[:count]


def _match_attr(tx, subject, name: str):
    """getattr(subject, name), or None when it raises AttributeError (no match, as CPython)."""
    from kiln.capture.values.builtins import BuiltinValue
    from kiln.capture.values.exceptions import TracedRaise
    from kiln.capture.values.modules import NNModuleValue
    from kiln.capture.values.objects import NewObjectValue, UserObjectValue
    from kiln.capture.values.tensors import TensorValue

    asks_hasattr = isinstance(subject, (NewObjectValue, UserObjectValue, NNModuleValue, TensorValue)) or \
        subject.is_constant()
    if asks_hasattr and not BuiltinValue(hasattr).call(tx, [subject, ConstantValue(name)], {}).as_constant():
        return None
    try:
        return tx.getattr(subject, name)
    except TracedRaise as exc:
        if exc.matches(AttributeError):
            return None
        raise
