"""``simplify_with_ranges`` where extents or divisors are size expressions (a dynamic graph).

A view of a symbolic-size tensor indexes through ``FloorDiv``/``ModularIndexing`` of its flat index,
e.g. ``ModularIndexing(32*x0*s1 + 32*x1 + x2, 32, s1)`` for ``x1 < s1, x2 < 32``. Static sizes fold
these with integer ranges (``index.simplify_with_ranges``); this module folds them with the same rules
where the divisors, the coefficients and the loop extents are polynomials in size symbols: that is
``x1`` above. Without it a dynamic kernel recomputes nested divisions and remainders per element (no
vectorization) and the scheduler cannot prove reads local (softmax/layernorm not fused).

Every rewrite is proved for all sizes, never decided at the hints: a comparison holds when its
difference, with each size symbol written ``1 + n`` (sizes are positive) and each loop variable
nonnegative, expands to a polynomial whose coefficients are all nonnegative (``provably_nonneg``).
What cannot be proved stays as it was (correct, slower).
"""
from __future__ import annotations

import sympy

from kiln.loopir.index import FloorDiv, ModularIndexing


def provably_nonneg(e) -> bool:
    """``e >= 0`` for every positive value of its size symbols and nonnegative value of the rest."""
    e = sympy.expand(sympy.sympify(e))
    if e.is_number:
        return bool(e >= 0)
    shift = {}
    for s in e.free_symbols:
        if s.is_positive:
            shift[s] = s + 1  # s = 1 + n, n >= 0 (the symbol now stands for n)
        elif not s.is_nonnegative:
            return False
    e = sympy.expand(e.xreplace(shift)) if shift else e
    for term in sympy.Add.make_args(e):
        coeff, rest = term.as_coeff_Mul()
        if coeff < 0:
            return False
        if not all(f.is_nonnegative for f in sympy.Mul.make_args(rest)):
            return False
    return True


def _split_term(term, ranges):
    """(size coefficient, loop part) of a product: the factors free of loop variables, and the rest."""
    return term.as_independent(*ranges.keys(), as_Add=False)


def bounds(expr, ranges) -> tuple | None:
    """Inclusive (min, max) of ``expr`` over loop variables in ``[0, ranges[v])``, as size expressions,
    for sums of (size coefficient) * (a loop variable, a FloorDiv or a ModularIndexing); else None."""
    lo = hi = sympy.Integer(0)
    for term in sympy.Add.make_args(sympy.expand(expr)):
        coeff, part = _split_term(term, ranges)
        if part == 1:
            r = (coeff, coeff)
            coeff = sympy.Integer(1)
        else:
            r = _atom_bounds(part, ranges)
            if r is None:
                return None
        if provably_nonneg(coeff):
            lo, hi = lo + coeff * r[0], hi + coeff * r[1]
        elif provably_nonneg(-coeff):
            lo, hi = lo + coeff * r[1], hi + coeff * r[0]
        else:
            return None
    return sympy.expand(lo), sympy.expand(hi)


def _atom_bounds(part, ranges):
    if part in ranges:
        return sympy.Integer(0), sympy.expand(sympy.sympify(ranges[part]) - 1)
    if isinstance(part, ModularIndexing):
        inner = bounds(part.args[0], ranges)
        if inner is None or not provably_nonneg(inner[0]):
            return None
        return sympy.Integer(0), sympy.expand(part.args[2] - 1)
    if isinstance(part, FloorDiv):
        inner = bounds(part.args[0], ranges)
        if inner is None or not provably_nonneg(inner[0]):
            return None
        exact = _quotient(inner[1] + 1, part.args[1])  # (hi + 1) a multiple of b: floor(hi / b) = q - 1
        return sympy.Integer(0), (sympy.expand(exact - 1) if exact is not None else inner[1])
    return None


def _quotient(t, d):
    """``t / d`` where ``d`` divides ``t`` for every size (a polynomial with integer coefficients), else None."""
    q = sympy.cancel(sympy.sympify(t) / d)
    num, den = sympy.fraction(q)
    if den != 1:
        return None
    for term in sympy.Add.make_args(sympy.expand(num)):
        if not term.as_coeff_Mul()[0].is_Integer:
            return None
    return sympy.expand(num)


def _in_range(e, upper, ranges) -> bool:
    """0 <= e < upper for every size."""
    r = bounds(e, ranges)
    return r is not None and provably_nonneg(r[0]) and provably_nonneg(upper - 1 - r[1])


def _nonneg_expr(e, ranges) -> bool:
    r = bounds(e, ranges)
    return r is not None and provably_nonneg(r[0])


def _split_multiples(a, d, ranges):
    """a = d*q + r where q gathers the terms that ``d`` divides."""
    q, r = sympy.Integer(0), sympy.Integer(0)
    for term in sympy.Add.make_args(sympy.expand(a)):
        t = _quotient(term, d)
        if t is not None:
            q += t
        else:
            r += term
    return q, r


def _magnitude(term, ranges) -> float:
    """A sort key only (which terms to try dropping first): the coefficient with sizes at 64."""
    coeff, _ = _split_term(term, ranges)
    value = coeff.xreplace({s: 64 for s in coeff.free_symbols})
    try:
        return abs(float(value))
    except TypeError:
        return 0.0


def _drop_small_terms(a, b, ranges):
    """(a1, b1) with floor(a / b) == floor(a1 / b1): a = g*a1 + r with 0 <= r < g and g | b."""
    terms = sorted(sympy.Add.make_args(sympy.expand(a)), key=lambda t: -_magnitude(t, ranges))
    for i in range(len(terms) - 1, 0, -1):
        big, small = terms[:i], terms[i:]
        g = sympy.sympify(b)
        for t in big:
            g = sympy.gcd(g, _split_term(t, ranges)[0])
        g = sympy.expand(abs(g)) if g.is_number else sympy.expand(g)
        if g == 1 or _quotient(b, g) is None:
            continue
        if _in_range(sympy.Add(*small), g, ranges):
            a1 = _quotient(sympy.Add(*big), g)
            if a1 is not None:
                return a1, _quotient(b, g)
    return None


def simplify_symbolic(expr, ranges):
    """``index.simplify_with_ranges`` for size-expression divisors and extents (see the module doc)."""

    def visit(e):
        if not e.args:
            return e
        args = [visit(a) for a in e.args]
        if isinstance(e, FloorDiv):
            return _floordiv(*args)
        if isinstance(e, ModularIndexing):
            return _modular(*args)
        return e.func(*args)

    def _floordiv(a, b):
        if not _positive(b):
            return FloorDiv(a, b)
        dropped = _drop_small_terms(a, b, ranges)
        if dropped is not None:
            return visit(FloorDiv(*dropped))
        q, r = _split_multiples(a, b, ranges)
        if _in_range(r, b, ranges):
            return q
        if q != 0 and _nonneg_expr(r, ranges):
            return q + FloorDiv(r, b)
        return FloorDiv(a, b)

    def _modular(a, b, c):
        if not (_positive(b) and _positive(c)):
            return ModularIndexing(a, b, c)
        dropped = _drop_small_terms(a, b, ranges)
        if dropped is not None:
            return visit(ModularIndexing(dropped[0], dropped[1], c))
        if _in_range(a, b, ranges):
            return sympy.Integer(0)
        _, r = _split_multiples(a, sympy.expand(b * c), ranges)
        if _in_range(r, sympy.expand(b * c), ranges):
            return visit(FloorDiv(r, b))
        return ModularIndexing(r, b, c) if _nonneg_expr(r, ranges) else ModularIndexing(a, b, c)

    return recombine(sympy.expand(visit(expr)), ranges)


def _positive(b) -> bool:
    return provably_nonneg(sympy.expand(b - 1))


def recombine(expr, ranges):
    """``c*b*FloorDiv(e, b) + c*ModularIndexing(e, 1, b) -> c*e`` with size-expression ``c`` and ``b``
    (a dim that a view split and joined again reads as one dim)."""
    if not isinstance(expr, sympy.Add):
        return expr
    coeffs: dict = {}
    for term in expr.args:
        c, part = _split_term(term, ranges)
        coeffs[part] = sympy.expand(coeffs.get(part, 0) + c)
    changed = False
    for part in list(coeffs):
        if not (isinstance(part, ModularIndexing) and part.args[1] == 1):
            continue
        e, b = part.args[0], part.args[2]
        fd = FloorDiv(e, b)
        c = coeffs.get(part, 0)
        if c != 0 and fd in coeffs and sympy.expand(coeffs[fd] - c * b) == 0:
            coeffs[part] = 0
            coeffs[fd] = 0
            coeffs[e] = sympy.expand(coeffs.get(e, 0) + c)
            changed = True
    if not changed:
        return expr
    return sympy.expand(sympy.Add(*[c * p for p, c in coeffs.items()]))
