"""Index expressions: sympy over loop variables, plus the integer division ops that views need.

Loop variables are nonnegative integer symbols (``x0, x1, ...`` for the iteration space, ``r0, ...``
for reduction loops). ``FloorDiv`` and ``ModularIndexing`` stay unevaluated until
``simplify_with_ranges`` knows each variable's extent and can drop what cannot matter.
"""
from __future__ import annotations

import functools
import math
from typing import Mapping, Sequence

import sympy


@functools.lru_cache(maxsize=None)
def var(prefix: str, i: int) -> sympy.Symbol:
    return sympy.Symbol(f"{prefix}{i}", integer=True, nonnegative=True)


def vars_for(prefix: str, n: int) -> list[sympy.Symbol]:
    return [var(prefix, i) for i in range(n)]


class FloorDiv(sympy.Function):
    """floor(a / b) for a >= 0, b > 0 (an index computation, never a user value)."""

    is_integer = True
    is_nonnegative = True

    @classmethod
    def eval(cls, a, b):
        if b == 1:
            return a
        if a == 0:
            return sympy.Integer(0)
        if a.is_Integer and b.is_Integer:
            return sympy.Integer(int(a) // int(b))
        if b.is_Integer and b > 1:
            terms = sympy.Add.make_args(a)
            if all(t.as_coeff_Mul()[0].is_Integer and t.as_coeff_Mul()[0] % b == 0 for t in terms):
                return sympy.Add(*[t / b for t in terms])  # 3*s0 // 3 == s0 (a reshape's -1)
        if not b.is_number:
            q = sympy.cancel(a / b)  # 128*s0 // (32*s0) == 4: sizes in symbols cancel
            if q.is_Integer or _integer_polynomial(q):
                return q  # (s0*s1 // s0 == s1: b divides a for every value, a reshape's -1 is exact)
        return None


def _integer_polynomial(q) -> bool:
    """``q`` is a polynomial in its symbols with integer coefficients (an integer for every size)."""
    if not q.free_symbols or sympy.fraction(q)[1] != 1:
        return False
    try:
        return all(c.is_Integer for c in sympy.Poly(q, *sorted(q.free_symbols, key=str)).coeffs())
    except sympy.PolynomialError:
        return False


class ModularIndexing(sympy.Function):
    """(a // b) % c for a >= 0: the digit of ``a`` with place value ``b`` in base ``c``."""

    is_integer = True
    is_nonnegative = True

    @classmethod
    def eval(cls, a, b, c):
        if c == 1 or a == 0:
            return sympy.Integer(0)
        if a.is_Integer and b.is_Integer and c.is_Integer:
            return sympy.Integer((int(a) // int(b)) % int(c))
        if b == 1 and not c.is_number and sympy.cancel(a / c).is_Integer:
            return sympy.Integer(0)  # a multiple of c (sizes in symbols cancel)
        return None


class InRange(sympy.Function):
    """``a`` itself, in code that only matters where ``0 <= a < n``: the read of a padded or
    concatenated input under its mask (lanes outside the range take the fill value instead).

    The simplifier may use the range: the read of a pad's input ``[256, 1003]`` through a view of
    its flat index at ``x1 < 1004`` folds ``(1003*x0 + x1) // 1003`` to ``x0`` for ``x1 < 1003``, where
    without it every element loaded its row's values at a computed row index. ``simplify_with_ranges``
    leaves no ``InRange`` in its result (it becomes ``a``), so code generators and analyses never see
    one; printing and evaluating it gives ``a``.
    """

    is_integer = True

    @classmethod
    def eval(cls, a, n):
        if a.is_Integer and n.is_Integer and 0 <= int(a) < int(n):
            return a
        return None


def without_in_range(expr: sympy.Expr) -> sympy.Expr:
    return expr.replace(lambda e: isinstance(e, InRange), lambda e: e.args[0]) if expr.has(InRange) else expr


def linear_index(index: Sequence, stride: Sequence[int], offset: int = 0) -> sympy.Expr:
    """``offset + sum(index[d] * stride[d])``, skipping dims of stride 0 (strides and offset may be
    size expressions)."""
    expr = sympy.sympify(offset)
    for i, s in zip(index, stride):
        if s != 0:
            expr = expr + i * s
    return expr


def expr_range(expr: sympy.Expr, ranges: Mapping[sympy.Symbol, int]) -> tuple[int, int] | None:
    """Inclusive (min, max) of an affine ``expr`` over variables in ``[0, ranges[v])``; None if not affine."""
    expr = sympy.expand(expr)
    lo = hi = 0
    for term in sympy.Add.make_args(expr):
        coeff, rest = term.as_coeff_Mul()
        if rest == 1:
            lo += int(coeff)
            hi += int(coeff)
            continue
        if rest.is_Symbol and rest in ranges:
            if not isinstance(ranges[rest], (int, sympy.Integer)):
                return None  # a symbolic extent (kiln.loopir.sizes): see expr_bounds
            top = int(coeff) * (ranges[rest] - 1)
            lo, hi = lo + min(0, top), hi + max(0, top)
            continue
        if isinstance(rest, (FloorDiv, ModularIndexing, InRange)):
            r = _func_range(rest, ranges)
            if r is None:
                return None
            a, b = int(coeff) * r[0], int(coeff) * r[1]
            lo, hi = lo + min(a, b), hi + max(a, b)
            continue
        return None
    return lo, hi


def expr_bounds(expr: sympy.Expr, ranges: Mapping) -> tuple | None:
    """Inclusive (min, max) of an affine ``expr`` over variables in ``[0, ranges[v])`` where extents and
    coefficients may be size expressions (positive symbols); None where a sign is unknown."""
    expr = sympy.expand(expr)
    lo = hi = sympy.Integer(0)
    for term in sympy.Add.make_args(expr):
        found = [v for v in term.free_symbols if v in ranges]
        if not found:
            if term.is_nonnegative:
                lo, hi = lo + term, hi + term
                continue
            if not term.is_number:
                return None
            lo, hi = lo + term, hi + term
            continue
        if len(found) != 1:
            return None
        v = found[0]
        coeff, rest = term.as_independent(v, as_Add=False)
        if rest != v:
            return None
        top = coeff * (ranges[v] - 1)
        if coeff.is_nonnegative:
            hi += top
        elif coeff.is_nonpositive:
            lo += top
        else:
            return None
    return sympy.expand(lo), sympy.expand(hi)


def _func_range(e, ranges):
    if isinstance(e, InRange):
        return (0, int(e.args[1]) - 1) if e.args[1].is_Integer else None
    inner = expr_range(e.args[0], ranges)
    if inner is None or inner[0] < 0:
        return None
    if isinstance(e, FloorDiv):
        return inner[0] // int(e.args[1]), inner[1] // int(e.args[1])
    return 0, int(e.args[2]) - 1


def _split_divisible(expr: sympy.Expr, d: int):
    """expr = d * q + r where q gathers the terms whose integer coefficient ``d`` divides."""
    q = sympy.Integer(0)
    r = sympy.Integer(0)
    for term in sympy.Add.make_args(sympy.expand(expr)):
        coeff, rest = term.as_coeff_Mul()
        if coeff.is_Integer and int(coeff) % d == 0:
            q += (int(coeff) // d) * rest
        else:
            r += term
    return q, r


def _drop_small_terms(a: sympy.Expr, b: int, ranges):
    """(a1, b1) with floor(a / b) == floor(a1 / b1), or None: a = g*a1 + r with 0 <= r < g and g | b.

    ``floor((32*x0 + x1) / 512) == floor(x0 / 16)`` when ``0 <= x1 < 32``."""
    terms = sorted(sympy.Add.make_args(sympy.expand(a)), key=lambda t: -abs(int(t.as_coeff_Mul()[0])))
    for i in range(len(terms) - 1, 0, -1):
        big, small = terms[:i], terms[i:]
        g = b
        for t in big:
            c = t.as_coeff_Mul()[0]
            if not c.is_Integer:
                return None
            g = math.gcd(g, int(c))
        if g <= 1:
            continue
        r = expr_range(sympy.Add(*small), ranges)
        if r is not None and r[0] >= 0 and r[1] < g:
            return sympy.expand(sympy.Add(*big) / g), b // g
    return None


def simplify_with_ranges(expr: sympy.Expr, ranges: Mapping[sympy.Symbol, int]) -> sympy.Expr:
    """Rewrite FloorDiv / ModularIndexing away where the variables' extents allow (size expressions as
    extents, coefficients or divisors: ``index_symbolic.simplify_symbolic``). An ``InRange`` lends its
    range to the rewrites and is gone from the result."""
    if not expr.has(FloorDiv, ModularIndexing):
        return without_in_range(expr)
    if _has_sizes(expr, ranges):
        from kiln.loopir.index_symbolic import simplify_symbolic

        return simplify_symbolic(without_in_range(expr), ranges)

    def visit(e):
        if not e.args:
            return e
        args = [visit(a) for a in e.args]
        if isinstance(e, FloorDiv):
            a, b = args
            if b.is_Integer and int(b) > 0:
                dropped = _drop_small_terms(a, int(b), ranges)
                if dropped is not None:
                    return visit(FloorDiv(dropped[0], dropped[1]))
                q, r = _split_divisible(a, int(b))
                rr = expr_range(r, ranges)
                if rr is not None and 0 <= rr[0] and rr[1] < int(b):
                    return q
                return q + FloorDiv(r, b) if q != 0 and rr is not None and rr[0] >= 0 else FloorDiv(a, b)
            return FloorDiv(a, b)
        if isinstance(e, ModularIndexing):
            a, b, c = args
            if b.is_Integer and c.is_Integer and int(b) > 0 and int(c) > 0:  # 0: a loop of no iterations
                dropped = _drop_small_terms(a, int(b), ranges)
                if dropped is not None:
                    return visit(ModularIndexing(dropped[0], dropped[1], c))
                a_range = expr_range(a, ranges)
                if a_range is not None and a_range[0] >= 0 and a_range[1] < int(b):
                    return sympy.Integer(0)
                # drop whole multiples of b*c (they do not change the digit)
                _, r = _split_divisible(a, int(b) * int(c))
                rr = expr_range(r, ranges)
                if rr is not None and rr[0] >= 0 and rr[1] < int(b) * int(c):
                    return visit(FloorDiv(r, b))
                return ModularIndexing(r, b, c) if rr is not None and rr[0] >= 0 else ModularIndexing(a, b, c)
            return ModularIndexing(a, b, c)
        return e.func(*args)

    return without_in_range(_recombine(sympy.expand(visit(expr))))


def _has_sizes(expr, ranges) -> bool:
    """Whether ``expr`` or an extent in ``ranges`` names a size symbol (a dynamic graph: sizes are
    positive symbols; loop variables and loaded indices are nonnegative ones)."""
    if any(s.is_positive for s in expr.free_symbols - set(ranges)):
        return True
    return any(isinstance(n, sympy.Basic) and not n.is_number for n in ranges.values())


def _recombine(expr: sympy.Expr) -> sympy.Expr:
    """``c*b*FloorDiv(e, b) + c*ModularIndexing(e, 1, b) -> c*e`` (for e >= 0), so that a dim that was
    split by a view and joined again reads as one dim."""
    if not isinstance(expr, sympy.Add):
        return expr
    coeffs: dict = {}
    for term in expr.args:
        c, rest = term.as_coeff_Mul()
        coeffs[rest] = coeffs.get(rest, 0) + c
    changed = False
    for rest in list(coeffs):
        if not (isinstance(rest, ModularIndexing) and rest.args[1] == 1 and rest.args[2].is_Integer):
            continue
        e, b = rest.args[0], rest.args[2]
        fd = FloorDiv(e, b)
        c = coeffs.get(rest, 0)
        if c != 0 and coeffs.get(fd, 0) == c * b:
            coeffs[rest] = 0
            coeffs[fd] = 0
            coeffs[e] = coeffs.get(e, 0) + c
            changed = True
    if not changed:
        return expr
    return sympy.expand(sympy.Add(*[c * r for r, c in coeffs.items()]))
