"""Sizes as sympy expressions.

Every size, stride and offset kiln reasons about is a sympy expression. Today they are all integers
(``sympy.Integer``); when dynamic shapes arrive, a ``ShapeEnv`` hands out positive integer symbols
(``s0``, ``s1``, ...) with a hint (the size seen at compile time), and the same functions return
expressions in those symbols. Later stages (indexing, code generation) only ever see expressions.
"""
from __future__ import annotations

import dataclasses
from typing import Iterable

from kiln.lazy import sympy
import torch

Expr = "sympy.Expr"  # in annotations only (sympy is imported at its first use: kiln/lazy.py)


def to_expr(value) -> Expr:
    """A Python int, sympy expression or ``torch.SymInt`` (with a sympy-backed node) as an expression."""
    if isinstance(value, sympy.Expr):
        return value
    if isinstance(value, bool):
        return sympy.Integer(int(value))
    if isinstance(value, int):
        return sympy.Integer(value)
    if isinstance(value, torch.SymInt):
        expr = getattr(value.node, "expr", None)
        if isinstance(expr, sympy.Expr):
            return expr
        raise TypeError(f"SymInt {value!r} does not carry a sympy expression")
    raise TypeError(f"cannot turn {type(value).__name__} into a size expression")


def sym_sizes(t: torch.Tensor) -> tuple[Expr, ...]:
    return tuple(to_expr(s) for s in t.size())


def sym_strides(t: torch.Tensor) -> tuple[Expr, ...]:
    return tuple(to_expr(s) for s in t.stride())


def sym_offset(t: torch.Tensor) -> Expr:
    return to_expr(t.storage_offset())


def sym_numel(t: torch.Tensor) -> Expr:
    return sympy.Mul(*sym_sizes(t)) if t.dim() else sympy.Integer(1)


def contiguous_strides(sizes: Iterable) -> tuple[Expr, ...]:
    """Row-major strides for ``sizes`` (ints or expressions)."""
    out: list[Expr] = []
    running: Expr = sympy.Integer(1)
    for size in reversed([to_expr(s) for s in sizes]):
        out.append(running)
        # like torch, a size-0 dim counts as 1 (size symbols are positive)
        running = running * (sympy.Integer(max(int(size), 1)) if size.is_number else size)
    return tuple(reversed(out))


def is_dense(sizes, strides) -> bool:
    """Whether elements of these (concrete) sizes and strides fill one block of memory exactly, each
    once, in some order of dims: ATen's non-overlapping and dense."""
    expected = 1
    for stride, n in sorted((st, n) for n, st in zip(sizes, strides) if n != 1):
        if stride != expected:
            return False
        expected *= n
    return True


def is_static(expr) -> bool:
    return to_expr(expr).is_number


@dataclasses.dataclass
class ShapeEnv:
    """Owns the size symbols of one compilation and what is known about them.

    ``create_symbol(hint)`` returns a fresh positive integer symbol whose value at compile time was
    ``hint``; ``size_hint(expr)`` evaluates an expression at the hints; ``guards`` collects the facts
    a compiled graph relies on (filled in once dynamic shapes exist).
    """

    hints: dict[sympy.Symbol, int] = dataclasses.field(default_factory=dict)
    guards: list[sympy.Basic] = dataclasses.field(default_factory=list)

    def create_symbol(self, hint: int, name: str | None = None) -> sympy.Symbol:
        if not isinstance(hint, int) or hint < 0:
            raise ValueError(f"a size symbol's hint must be a non-negative int, got {hint!r}")
        symbol = sympy.Symbol(name or f"s{len(self.hints)}", integer=True, positive=True)
        if symbol in self.hints:
            raise ValueError(f"size symbol {symbol} exists already")
        self.hints[symbol] = hint
        return symbol

    def size_hint(self, expr) -> int:
        value = to_expr(expr).subs(self.hints)
        if not value.is_number:
            raise ValueError(f"size expression {expr} has symbols without hints: {value.free_symbols}")
        return int(value)

    def add_guard(self, fact: sympy.Basic) -> None:
        if fact is sympy.true:
            return
        if fact is sympy.false:
            raise ValueError("a shape guard that can never hold")
        self.guards.append(fact)
