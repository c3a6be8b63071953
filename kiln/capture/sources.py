"""Sources: where a value captured by the interpreter lives in the frame.

A source prints as a Python expression over the frame (`L['x']`, `G['w']`, `L['self'].fc`) used by
guards, and emits the bytecode that loads the value in the transformed code.
"""
from __future__ import annotations

import dataclasses
from typing import Any

_PY_IDENT_SAFE = str.isidentifier


def _memoized_name(compute):
    def name(self) -> str:
        try:
            return self.__dict__["_name"]
        except KeyError:
            text = self.__dict__["_name"] = compute(self)
            return text

    name.__doc__ = compute.__doc__
    return name


class Source:
    """Subclasses are frozen dataclasses: a source's printed name never changes, so it is computed
    once (guard compilation asks for every name many times, and names nest)."""

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "name" in cls.__dict__:
            cls.name = _memoized_name(cls.__dict__["name"])

    def name(self) -> str:
        raise NotImplementedError

    def emit(self, cg) -> None:
        """Append instructions that push this value onto the stack of the transformed code."""
        raise NotImplementedError

    def is_local_root(self) -> bool:
        return False

    def __str__(self) -> str:
        return self.name()


@dataclasses.dataclass(frozen=True)
class LocalSource(Source):
    local_name: str

    def name(self) -> str:
        return f"L[{self.local_name!r}]"

    def emit(self, cg) -> None:
        cg.load_fast(self.local_name)


@dataclasses.dataclass(frozen=True)
class GlobalSource(Source):
    global_name: str

    def name(self) -> str:
        return f"G[{self.global_name!r}]"

    def emit(self, cg) -> None:
        cg.load_global(self.global_name)


@dataclasses.dataclass(frozen=True)
class BuiltinSource(Source):
    builtin_name: str

    def name(self) -> str:
        return f"B[{self.builtin_name!r}]"

    def emit(self, cg) -> None:
        cg.load_global(self.builtin_name)


@dataclasses.dataclass(frozen=True)
class ClosureSource(Source):
    """The contents of the frame function's closure cell `index` (free variable `var_name`)."""

    index: int
    var_name: str

    def name(self) -> str:
        return f"C[{self.index}].cell_contents"

    def emit(self, cg) -> None:
        cg.load_deref(self.var_name)


@dataclasses.dataclass(frozen=True)
class ClosureCellSource(Source):
    """The frame function's closure cell `index` itself (free variable `var_name`), not its contents."""

    index: int
    var_name: str

    def name(self) -> str:
        return f"C[{self.index}]"

    def emit(self, cg) -> None:
        from kiln.capture import bytecode as bc

        cg.extend(bc.load_closure(self.var_name))


@dataclasses.dataclass(frozen=True)
class AttrSource(Source):
    base: Source
    attr: str

    def name(self) -> str:
        if _PY_IDENT_SAFE(self.attr):
            return f"{self.base.name()}.{self.attr}"
        return f"getattr({self.base.name()}, {self.attr!r})"

    def emit(self, cg) -> None:
        self.base.emit(cg)
        cg.load_attr(self.attr)


@dataclasses.dataclass(frozen=True)
class GenericAttrSource(Source):
    """`object.__getattribute__(base, attr)`: an attribute read that bypasses a class's own
    __getattribute__ (reading through it again would run that Python code, or recurse into it)."""

    base: Source
    attr: str

    def name(self) -> str:
        return f"___object_getattr({self.base.name()}, {self.attr!r})"

    def emit(self, cg) -> None:
        cg.prepare_call(object.__getattribute__)
        self.base.emit(cg)
        cg.load_const(self.attr)
        cg.call(2)


@dataclasses.dataclass(frozen=True)
class RawDictItemSource(Source):
    """`dict.__getitem__(base, key)` (or `dict.__contains__` with contains=True): an item of a dict
    subclass read as dict's C method does, bypassing the class's own __getitem__/__contains__."""

    base: Source
    key: Any  # a constant
    contains: bool = False

    def name(self) -> str:
        return f"___dict_{'contains' if self.contains else 'getitem'}({self.base.name()}, {self.key!r})"

    def emit(self, cg) -> None:
        cg.prepare_call(dict.__contains__ if self.contains else dict.__getitem__)
        self.base.emit(cg)
        cg.load_const(self.key)
        cg.call(2)


@dataclasses.dataclass(frozen=True)
class DictEntrySource(Source):
    """`base.__dict__[attr]`-like access used for module parameter/buffer/submodule dicts."""

    base: Source
    dict_attr: str
    key: str

    def name(self) -> str:
        return f"{self.base.name()}.{self.dict_attr}[{self.key!r}]"

    def emit(self, cg) -> None:
        self.base.emit(cg)
        cg.load_attr(self.dict_attr)
        cg.load_const(self.key)
        cg.binary_subscr()


@dataclasses.dataclass(frozen=True)
class GetItemSource(Source):
    base: Source
    index: Any  # a constant: int, str, or a slice of ints

    def name(self) -> str:
        return f"{self.base.name()}[{self.index!r}]"

    def emit(self, cg) -> None:
        self.base.emit(cg)
        cg.load_const(self.index)
        cg.binary_subscr()


@dataclasses.dataclass(frozen=True)
class ConstantSource(Source):
    """An object kiln holds on to directly (e.g. a function found through another object)."""

    label: str
    value: Any = dataclasses.field(compare=False, hash=False)

    def name(self) -> str:
        # named by identity: two held objects never share a name (guards bind the name to the object)
        return f"___k{id(self.value)}"

    def emit(self, cg) -> None:
        cg.load_const(self.value)


@dataclasses.dataclass(frozen=True)
class ObjectKeyItemSource(Source):
    """`base[key]` where the key is an object kiln holds (a tensor key of a dict from outside, whose keys'
    identities the dict's keys guard pins)."""

    base: Source
    key: ConstantSource

    def name(self) -> str:
        return f"{self.base.name()}[{self.key.name()}]"

    def emit(self, cg) -> None:
        self.base.emit(cg)
        self.key.emit(cg)
        cg.binary_subscr()


@dataclasses.dataclass(frozen=True)
class CallSource(Source):
    """`base()`: the answer of a state query without arguments that kiln holds (e.g. how many
    TorchDispatchModes are active), guarded like any other place."""

    base: Source

    def name(self) -> str:
        return f"{self.base.name()}()"

    def emit(self, cg) -> None:
        from kiln.capture import bytecode as bc

        cg.extend(bc.push_null())
        self.base.emit(cg)
        cg.call(0)


@dataclasses.dataclass(frozen=True)
class IteratorRemainingSource(Source):
    """The items an iterator from outside has left (list, tuple, dict and range iterators), read
    without advancing it: `___remaining(base)` (see iterator_remaining)."""

    base: Source

    def name(self) -> str:
        return f"___remaining({self.base.name()})"

    def emit(self, cg) -> None:
        cg.prepare_call(iterator_remaining)
        self.base.emit(cg)
        cg.call(1)


@dataclasses.dataclass(frozen=True)
class AutogradKindSource(Source):
    """Where a tensor sits in autograd's graph (leaf, non-leaf, a view refusing in-place ops):
    `___autograd_kind(base)` (kiln.fake.autograd_kind); guarded for inputs that are not leaves."""

    base: Source

    def name(self) -> str:
        return f"___autograd_kind({self.base.name()})"

    def emit(self, cg) -> None:
        from kiln.fake.autograd_kind import autograd_kind

        cg.prepare_call(autograd_kind)
        self.base.emit(cg)
        cg.call(1)


# the iterator types whose remaining items __reduce__ gives without advancing them
READABLE_ITERATOR_TYPES = tuple(type(it) for it in (
    iter([]), iter(()), iter({}), iter({}.values()), iter({}.items()), iter(range(0)), iter(range(1 << 64))))


def iterator_remaining(it) -> tuple:
    if type(it) not in READABLE_ITERATOR_TYPES:
        raise TypeError(f"cannot read ahead in a {type(it).__name__}")
    _, args, *state = it.__reduce__()
    items = tuple(args[0]) if args else ()
    return items[state[0]:] if state else items


def advance_iterator(it, n: int) -> None:
    """The replay of items consumed while tracing: the real iterator moves on as eager's would have
    (n < 0: tracing ran it out)."""
    if n < 0:
        for _ in it:
            pass
        return
    for _ in range(n):
        try:
            next(it)
        except StopIteration:  # the last call tracing made found it exhausted
            return
