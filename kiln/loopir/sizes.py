"""Sizes in the loop IR: Python ints (a static graph) or sympy expressions over a ShapeEnv's size symbols.

``compile_graph`` sets the graph's ShapeEnv for the time it lowers, schedules and generates code
(``size_context``). Lowering reads every size, stride and SymInt argument through ``size``/``shape_of``:
with a dynamic ShapeEnv a size stays an expression (``s0``, ``16*s0``), a number becomes an int; with
``concrete`` (a static compile of a graph whose fakes are symbolic: the env was specialized) each
becomes its hint. Static graphs keep plain ints, so their code is unchanged.

Decisions that need a value go through ``known`` (decided for every allowed size, or None: no guard),
``guard`` (decided at the hint, the fact recorded as a guard in the ShapeEnv: sound, the compiled code is
only used where it holds) or ``hint`` (a heuristic only: never a correctness decision). Code that cannot
handle a symbolic size raises ``DynamicUnsupported``; the backend then compiles the graph statically.
"""
from __future__ import annotations

import contextlib
import math
from typing import Iterable, Iterator

import sympy
import torch


class DynamicUnsupported(Exception):
    """A stage cannot generate size-generic code for this graph (the backend compiles it statically)."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


_env = None  # the ShapeEnv of the graph being compiled (None: a static graph)
_concrete = False  # symbols read as their hints (static compile of a symbolic graph)


@contextlib.contextmanager
def size_context(env, concrete: bool = False) -> Iterator[None]:
    global _env, _concrete
    saved = _env, _concrete
    _env, _concrete = env, concrete
    try:
        yield
    finally:
        _env, _concrete = saved


def dynamic() -> bool:
    """True while compiling size-generic code."""
    return _env is not None and not _concrete


def shape_env():
    return _env


def size(x):
    """A size from a fake tensor, an FX SymInt value or an index computation: int, or sympy expression."""
    if isinstance(x, bool):
        return int(x)
    if isinstance(x, int):
        return x
    if isinstance(x, torch.SymInt):
        expr = getattr(x.node, "expr", None)
        if expr is None:
            raise DynamicUnsupported(f"a SymInt without a sympy expression ({x!r})")
        x = expr
    if isinstance(x, sympy.Basic):
        if x.is_number:
            return int(x)
        if _concrete and _env is not None:
            return _env.size_hint(x)
        return x  # (outside a compile, e.g. printing the loop IR: as it is)
    return x


def sizes(seq: Iterable) -> tuple:
    return tuple(size(s) for s in seq)


def shape_of(val) -> tuple:
    return sizes(val.shape)


def strides_of(val) -> tuple:
    return sizes(val.stride())


def is_symbolic(x) -> bool:
    return isinstance(x, sympy.Basic) and not x.is_number


def any_symbolic(seq) -> bool:
    return any(is_symbolic(s) for s in seq)


def hint(x) -> int:
    """The value of a size for the inputs seen while compiling (a heuristic: never decides correctness)."""
    if isinstance(x, int):
        return x
    x = sympy.sympify(x)
    if x.is_number:
        return int(x)
    if _env is None:
        raise DynamicUnsupported(f"symbolic size {x} without a ShapeEnv")
    return _env.heuristic_hint(x)  # (an unbacked size: a stand-in value, heuristics only)


def prod(seq, start=1):
    """The product of sizes: an int when all are ints."""
    out = start
    for s in seq:
        out = out * s
    return size(sympy.expand(out)) if is_symbolic(out) else out


def _literal(fact):
    """(fact as sympy, its truth where it is a literal True/False, else None)."""
    if isinstance(fact, bool):
        return fact, fact
    fact = sympy.sympify(fact)
    return fact, (bool(fact) if fact is sympy.true or fact is sympy.false else None)


def known(fact) -> bool | None:
    """The truth of a fact over sizes for every allowed size, or None (no guard recorded)."""
    fact, literal = _literal(fact)
    if literal is not None:
        return literal
    if _env is None:
        return None
    return _env.static_value(fact)


def guard(fact) -> bool:
    """The truth of a fact over sizes for this compilation: where it depends on the sizes, decided at
    the hints and recorded as a guard (the compiled code serves only sizes for which it holds)."""
    fact, literal = _literal(fact)
    if literal is not None:
        return literal
    if _env is None:
        raise DynamicUnsupported(f"symbolic fact {fact} without a ShapeEnv")
    if fact.free_symbols & getattr(_env, "derived", {}).keys():  # (values are never decided on: no guard for them)
        raise DynamicUnsupported(f"a decision on a value computed from the sizes ({fact})")
    value = fact.xreplace({s: sympy.Integer(h) for s, h in _env.hints.items()})
    return _env.evaluate(fact, bool(value))


def eq(a, b) -> bool:
    """``a == b`` for sizes: structural for ints and equal expressions, else guarded."""
    if not (is_symbolic(a) or is_symbolic(b)):
        return int(a) == int(b)
    diff = sympy.expand(sympy.sympify(a) - sympy.sympify(b))
    if diff == 0:
        return True
    return guard(sympy.Eq(diff, 0))


def lt(a, b) -> bool:
    if not (is_symbolic(a) or is_symbolic(b)):
        return a < b
    return guard(sympy.Lt(a, b))


def gt(a, b) -> bool:
    return lt(b, a)


def le(a, b) -> bool:
    return not lt(b, a)


def ge(a, b) -> bool:
    return not lt(a, b)


def divides(d, n) -> bool:
    """``n % d == 0`` (``d`` an int): statically known, or False (no guard: used for optional rewrites)."""
    if not is_symbolic(n) and not is_symbolic(d):
        return int(n) % int(d) == 0
    if is_symbolic(d):
        num, den = sympy.fraction(sympy.cancel(sympy.sympify(n) / d))
        return den == 1 and all(c.is_Integer for c in sympy.Poly(num, *num.free_symbols).coeffs()) \
            if num.free_symbols else den == 1 and sympy.sympify(num).is_Integer
    const, rest = sympy.expand(sympy.sympify(n)).as_coeff_Add()
    coeffs_ok = all(t.as_coeff_Mul()[0] % d == 0 for t in sympy.Add.make_args(rest))
    return coeffs_ok and int(const) % d == 0


def symbols_of(*exprs) -> set:
    out: set = set()
    for e in exprs:
        if is_symbolic(e):
            out |= e.free_symbols
    return out


def static_prod(seq) -> int:
    """The product of sizes at their hints."""
    return math.prod(hint(s) for s in seq)


def used_size_symbols(source: str) -> list:
    """The size symbols of the graph being compiled that generated ``source`` names (``s0``, ...), in
    order: the kernel takes them as arguments."""
    if not dynamic():
        return []
    import re

    names = set(re.findall(r"\b[suv]\d+\b", source))
    return sorted((s for s in _size_symbols() if s.name in names), key=lambda s: ("suv".index(s.name[0]), int(s.name[1:])))


def _size_symbols() -> list:
    """The env's input size symbols (s0, ...), unbacked sizes (u0, ...: read from ATen results) and
    values the wrapper computes (v0, ...: ``exact_value``)."""
    return list(_env.hints) + list(getattr(_env, "unbacked", ())) + list(getattr(_env, "derived", ()))


def exact_value(x, wrap: bool = False):
    """``x``, a number that generated code uses as a value (an operand of the graph's arithmetic, not an
    index), as the kernels read it: an expression over the size and int symbols becomes a symbol the
    wrapper computes with Python's ints (``ShapeEnv.derived_value``; a kernel's 64-bit arithmetic wraps
    where Python's does not). ``wrap``: read by integer arithmetic, where eager wraps a number in
    [2**63, 2**64) to int64 (a floating read refuses it: eager converts it exactly). A number, a bare
    symbol, an expression of data-dependent sizes (bound after the op that makes them) or a static
    compile: ``x`` as it is."""
    if not dynamic() or not isinstance(x, sympy.Basic) or x.is_number or x.is_Symbol:
        return x
    if x.free_symbols & set(getattr(_env, "unbacked", ())):
        return x
    derive = getattr(_env, "derived_value", None)
    return derive(x, wrap) if derive is not None else x


def exact_sizes(expr):
    """``expr`` (a size or an index, as a kernel computes it) with each part over size symbols alone that
    is more than a sum of products (a floor division, a remainder, a ceiling, a max/min, a power, a
    difference) replaced by a symbol the wrapper computes exactly (``exact_value``). Triton computes
    sizes in 32 bits unless an index needs 64: ``(7*s0 - 1) // s0`` (arange's length) overflowed for
    ``s0 = 2**30`` though it is 6, and the kernel masked every element off. A sum of products with
    nonnegative coefficients is never larger than the bound the launcher checks, so it stays."""
    if not dynamic() or not isinstance(expr, sympy.Basic) or expr.is_number or expr.is_Symbol:
        return expr
    if expr.free_symbols and all(is_size_symbol(s) for s in expr.free_symbols) and _composite(expr):
        return exact_value(expr)
    if not expr.args:
        return expr
    args = [exact_sizes(a) for a in expr.args]
    return expr if all(a is b for a, b in zip(args, expr.args)) else expr.func(*args)


def _composite(expr) -> bool:
    if expr.is_Add:
        return any(t.could_extract_minus_sign() or _composite(t) for t in expr.args)
    if expr.is_Mul:
        return any(_composite(f) for f in expr.args)
    return not (expr.is_Symbol or expr.is_number)


def checked_value(x, dtype):
    """``exact_value(x)`` for an op that converts the number to ``dtype`` as eager's ``full`` (and the
    ``fill_`` that decomposes to it) does, raising where it does not fit ("value cannot be converted to type int8_t
    without overflow"): the wrapper checks it on each call (a constant is checked while tracing)."""
    x = exact_value(x)
    if dynamic() and isinstance(x, sympy.Symbol) and hasattr(_env, "value_checks"):
        _env.value_checks.setdefault(x, set()).add(dtype)
    return x


def value_checks() -> dict:
    """Symbol -> the dtypes its value must fit (``checked_value``)."""
    return dict(getattr(_env, "value_checks", {})) if _env is not None else {}


def derived_values() -> dict:
    """Symbol -> expression of the values the wrapper computes (``exact_value``), in order."""
    return dict(getattr(_env, "derived", {})) if _env is not None else {}


def broadcast_shapes(*shapes) -> tuple:
    """``torch.broadcast_shapes`` for sizes that may be symbolic (the graph's meta already checked that
    the shapes broadcast; a symbol is never 1, equal non-1 sizes are guarded equal where not structural)."""
    if not any(any_symbolic(s) for s in shapes):
        return tuple(torch.broadcast_shapes(*shapes))
    ndim = max((len(s) for s in shapes), default=0)
    out = []
    for d in range(ndim):
        dims = [s[len(s) - ndim + d] for s in shapes if len(s) - ndim + d >= 0]
        big = [n for n in dims if n != 1]
        if not big:
            out.append(1)
            continue
        for n in big[1:]:
            if not eq(n, big[0]):
                raise DynamicUnsupported(f"sizes {big[0]} and {n} do not broadcast")
        out.append(big[0])
    return tuple(out)


def is_size_symbol(s) -> bool:
    """A symbol of the graph's ShapeEnv (not a loop variable)."""
    return _env is not None and (s in _env.hints or s in getattr(_env, "unbacked", ())
                                 or s in getattr(_env, "derived", ()))
