"""Calling an Enum class while tracing: `Color(value)` looks a member up by value.

`EnumType.__call__(cls, value)` calls `Enum.__new__(cls, value)`, which returns `value` itself when it is
a member of cls, else `cls._value2member_map_[value]`; a value not in the map goes on to a linear search
(unhashable values) and `_missing_` (user code; Flag makes pseudo-members there and caches them in the
map). kiln takes the first two paths with the real map when the value and every key of the map are
literals (hashing and comparing them runs no user code), and breaks on everything else. Members are
never removed from the map, so a member found there is what eager finds on every later call too.
"""
from __future__ import annotations

import enum

from kiln.capture.values.base import ConstantValue, Value, is_constant_literal, unsupported


def is_enum_class(cls) -> bool:
    return isinstance(cls, enum.EnumMeta) and issubclass(cls, enum.Enum)


def call_enum_class(tx, cls, args, kwargs) -> Value:
    """`cls(value)` for an Enum class cls: the member, as a constant."""
    if type(cls).__call__ is not enum.EnumMeta.__call__ or cls.__new__ is not enum.Enum.__new__:
        unsupported(f"calling enum class {cls.__qualname__}: its metaclass or __new__ is not Enum's")
    if len(args) != 1 or kwargs or not args[0].is_constant():
        unsupported(f"{cls.__qualname__}(...) with other than one constant value (the functional API, or "
                    f"a value only known at run time)")
    value = args[0].as_constant()
    if type(value) is cls:
        return ConstantValue(value)
    table = cls._value2member_map_
    if not (is_constant_literal(value) and all(is_constant_literal(k) for k in table)):
        unsupported(f"looking up {cls.__qualname__}({value!r}): hashing or comparing the value could run "
                    f"user code")
    member = table.get(value)
    if member is None:
        unsupported(f"{cls.__qualname__}({value!r}) is not a value of its members: eager searches further "
                    f"and calls _missing_")
    return ConstantValue(member)


def enum_class_members(cls) -> list[Value]:
    """`iter(cls)` of an Enum class: its members in definition order (aliases skipped), as EnumType.__iter__
    gives them. An Enum class's members are fixed once it is made (EnumType refuses to rebind or delete them)."""
    if type(cls).__iter__ is not enum.EnumMeta.__iter__:
        unsupported(f"iterating over enum class {cls.__qualname__}: its metaclass defines __iter__")
    return [ConstantValue(cls._member_map_[name]) for name in cls._member_names_]


def enum_member_method(tx, member: Value, name: str) -> Value | None:
    """`member.method` of an Enum member (a constant) where the class defines `method` as a plain Python
    function kiln traces: the bound method, so calls are inlined (with tensor arguments too). None: not
    such a method (other attributes are read as before)."""
    import types

    from kiln.capture.skipfiles import is_inlinable
    from kiln.capture.sources import ConstantSource
    from kiln.capture.values.builder import wrap
    from kiln.capture.values.functions import UserMethodValue

    cls = type(member.as_constant())
    if name in vars(member.as_constant()):
        return None
    attr = next((vars(k)[name] for k in cls.__mro__ if name in vars(k)), None)
    if not isinstance(attr, types.FunctionType) or not is_inlinable(attr.__code__):
        return None
    return UserMethodValue(wrap(tx, attr, ConstantSource(attr.__qualname__, attr)), member)
