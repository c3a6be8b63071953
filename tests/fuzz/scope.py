"""What the program generator knows about the names in scope: each name's kind and shape facts.

Kinds (the generator only writes expressions that are valid for the kind it tracks):
    T   a float tensor of shape (2, 3)          I   a Python int          B   a bool
    N   a tensor (2, 3) or an int (numlike)     STR a str
    LT / LI / LN   a list of T / I / N          TT / TI  a tuple of T / I
    D   a dict of str keys (``keys``: the keys known present, key -> kind; values are N)
    S   a set of ints                           V   a dict view (keys/values/items)
    O   an instance of a generated class (``cls``), NT a namedtuple, DC a dataclass instance
    FN  a callable taking one T and returning a T
Containers carry ``minlen``, a lower bound of their length that stays true on every path (the
generator only shrinks containers at the top level of a function body, never inside a branch or loop).
Aliases share one ``Box``, so a mutation through one name updates what every alias knows.
"""
from __future__ import annotations

import dataclasses
from typing import Optional

LISTS = ("LT", "LI", "LN")
TUPLES = ("TT", "TI")
ELEM = {"LT": "T", "LI": "I", "LN": "N", "TT": "T", "TI": "I"}
# kinds a function may return (iterators and callables compare by identity, so they are never returned)
RETURNABLE = ("T", "I", "B", "STR", "N", "LT", "LI", "LN", "TT", "TI", "D", "S", "V", "O", "NT", "DC")


@dataclasses.dataclass
class ClassSpec:
    """A generated class: a plain class (``kind="plain"``), namedtuple or dataclass."""
    name: str
    kind: str  # plain / nt / dc
    features: frozenset = frozenset()
    base: Optional["ClassSpec"] = None
    extra_field: bool = False  # subclasses: one more attribute (plain: c, dataclass: w)

    def has(self, feature: str) -> bool:
        if feature in self.features:
            return True
        return self.base is not None and self.base.has(feature)

    def root(self) -> "ClassSpec":
        return self.base.root() if self.base else self


@dataclasses.dataclass(eq=False)
class Box:
    kind: str
    minlen: int = 0
    keys: dict = dataclasses.field(default_factory=dict)
    cls: Optional[ClassSpec] = None
    locked: int = 0  # > 0 while a loop iterates over it (no mutation then)


class Scope:
    """Names visible at a point of the generated function, with their boxes."""

    def __init__(self, names: dict | None = None, top: bool = True):
        self.names: dict[str, Box] = dict(names or {})
        self.top = top  # at the top level of the function body (not in a branch/loop/try)
        self.in_loop = False

    def child(self) -> "Scope":
        s = Scope(self.names, top=False)
        s.in_loop = self.in_loop
        return s

    def of(self, *kinds: str) -> list[str]:
        return [n for n, b in self.names.items() if b.kind in kinds]

    def box(self, name: str) -> Box:
        return self.names[name]
