"""Symbolic sizes: the ShapeEnv that owns size symbols, and kiln's SymNode behind each ``torch.SymInt``.

``torch.SymInt(node)`` wraps any Python object with the SymNode protocol: ATen's C++ (meta kernels,
SymInt arithmetic) calls the node's methods to add, compare and, where it must know a value, to
*guard* (``guard_bool``, ``guard_int``). kiln's ``SymNode`` holds a sympy expression over the size
symbols and the value it has for the inputs seen while compiling (its *hint*). A guard evaluates the
expression at the hints, records the fact it relied on (``s0 > 16``, or ``Eq(s0, 8)`` where a value
had to become a Python int) in the ``ShapeEnv``, and returns the value. The compiled code is valid
exactly where all recorded facts hold: ``ShapeEnv.check_source`` prints them as one Python function the
guards call with the input tensors.

Facts that follow from what is known about every symbol (sizes are integers >= 2: sizes seen as 0 or 1
stay constants, as broadcasting and empty tensors behave differently) are decided without a guard:
``Eq(s0, 1)`` is False for every allowed size. Each such decision is checked against sizes from 1 too: a
symbol none of whose decisions needed it to be >= 2 is checked at run time as ``>= 1``, so the graph
serves size 1 as well (a model compiled dynamic over batch sizes 2..64 runs batch 1 in the same graph).
"""
from __future__ import annotations

import dataclasses
import fractions
import math
import operator
from typing import Callable

from kiln.lazy import sympy
import torch

from kiln.errors import KilnError
from kiln.fake.shapes import contiguous_strides

SYMBOLIC_SCALARS = (torch.SymInt, torch.SymBool, torch.SymFloat)


class DataDependentSize(KilnError):
    """A decision needs the value of an unbacked size (``u0``: made by ``nonzero``, ``.item()``, ...) that
    its value range does not settle. There is no hint to guess from: the capture is traced again with
    data-dependent ops breaking the graph as before (``ShapeEnv.unbacked_failed`` says why)."""


class SpecializationError(KilnError):
    """A size the user marked dynamic had to become a constant (raised only for ``mark_dynamic``'d dims)."""


@dataclasses.dataclass
class ShapeGuard:
    fact: sympy.Basic  # holds for every call the compiled code may serve
    where: str  # the user's file:line whose code needed it ("" where unknown)


@dataclasses.dataclass
class InputBinding:
    """A graph input with symbolic sizes: the symbols are read from its sizes at run time."""

    name: str  # the place the guards read it from, e.g. L['x']
    sizes: tuple  # sympy expressions
    strides: tuple  # sympy expressions
    scalar: sympy.Symbol | None = None  # an int argument (Options.dynamic_ints): the input is this symbol


class ShapeEnv:
    """The size symbols of one captured frame, their hints, and the facts its compiled code relies on."""

    MIN_SYMBOLIC_HINT = 2  # sizes 0 and 1 stay constants (broadcasting and empty tensors behave differently)
    MIN_SIZE = 2  # a symbol's lowest value while tracing (size 1 is served where no decision needed this)

    def __init__(self) -> None:
        self.hints: dict[sympy.Symbol, int] = {}
        self.lower: dict[sympy.Symbol, int] = {}
        self.upper: dict[sympy.Symbol, int | None] = {}
        self.origins: dict[sympy.Symbol, str] = {}  # symbol -> the input size it stands for
        self.marked: set[sympy.Symbol] = set()  # from mark_dynamic: specializing them is an error
        self.guards: list[ShapeGuard] = []
        self.inputs: list[InputBinding] = []
        self.where: Callable[[], str] = lambda: ""  # set by capture: the user line being traced
        self.failed: str | None = None  # set where sizes could not stay symbolic: compile static instead
        self.specialization_error: SpecializationError | None = None  # a marked-dynamic dim became a constant
        self._decided: dict[sympy.Basic, bool] = {}
        # symbols still checked as >= 1 at run time: every fact decided from their lower bound so far holds
        # for size 1 too (a decision that needs >= 2 removes the symbol: size 1 then compiles its own entry)
        self.serves_one: set[sympy.Symbol] = set()
        # > 0 while an op whose result aliases its input or not by the answers runs (reshape): ATen's
        # either-answer questions are then guarded at the hints, as eager answers them (aliasing_decisions)
        self.exact_answers = 0
        self._by_hint: dict[int, sympy.Symbol] = {}  # duck sizing: equal sizes share a symbol
        self.unbacked: dict[sympy.Symbol, str] = {}  # u0, u1, ...: data-dependent sizes -> the op that made them
        self.nonzero_counts: dict = {}  # id(tensor) -> (tensor, its version, u): one count per mask (unbacked.py)
        self.unbacked_failed: str | None = None  # set where a fact about one was needed: trace again without them
        # v0, v1, ...: numbers the kernels use as values, computed exactly by the wrapper (derived_value)
        self.derived: dict[sympy.Symbol, sympy.Expr] = {}
        self.derived_hints: dict[sympy.Symbol, int] = {}
        self.value_checks: dict[sympy.Symbol, set] = {}  # a value's symbol -> dtypes it must fit (checked_value)
        self.wrapped: set = set()  # derived values read by integer arithmetic (derived_value's wrap)

    # ---- symbols -----------------------------------------------------------------------------

    def create_symbol(self, hint: int, origin: str = "", lower: int | None = None, upper: int | None = None,
                      duck: bool = True, marked: bool = False) -> sympy.Symbol:
        """A positive integer symbol for a size that was ``hint`` while compiling. With ``duck``, a size
        equal to an earlier dynamic size gets its symbol (the guards check that they stay equal)."""
        if not isinstance(hint, int) or hint < 0:
            raise ValueError(f"a size symbol's hint must be a non-negative int, got {hint!r}")
        if duck and hint in self._by_hint and lower is None and upper is None and not marked:
            return self._by_hint[hint]
        symbol = sympy.Symbol(f"s{len(self.hints)}", integer=True, positive=True)
        self.hints[symbol] = hint
        self.lower[symbol] = max(self.MIN_SIZE, lower or 0)
        if (lower or 0) <= 1:
            self.serves_one.add(symbol)
        self.upper[symbol] = upper
        self.origins[symbol] = origin
        if marked:
            self.marked.add(symbol)
        if duck and not marked:
            self._by_hint.setdefault(hint, symbol)
        return symbol

    def create_unbacked(self, origin: str, lower: int | None = 0, upper: int | None = None) -> sympy.Symbol:
        """A symbol for a size or number known only at run time (``nonzero``'s row count, ``.item()``):
        no hint, only its value range [lower, upper] (None: unbounded). Facts its range does not decide
        raise ``DataDependentSize`` (never a guard: there is no value to guard on)."""
        symbol = sympy.Symbol(f"u{len(self.unbacked)}", integer=True, nonnegative=lower is not None and lower >= 0)
        self.unbacked[symbol] = origin
        if lower is not None:
            self.lower[symbol] = lower
        self.upper[symbol] = upper
        self.origins[symbol] = origin
        return symbol

    def derived_value(self, expr, wrap: bool = False) -> sympy.Symbol:
        """A symbol standing for ``expr``, a number over the size and int symbols that generated code
        uses as a value (an operand of the graph's arithmetic, not an index): the wrapper computes it
        with Python's ints and passes it to the kernels, whose 64-bit arithmetic would wrap where
        Python's does not (``x + n * 6364136223846793005 % 2**32``). No fact is ever decided about it."""
        expr = sympy.sympify(expr)
        for symbol, known in self.derived.items():
            if known == expr and (symbol in self.wrapped) == wrap:
                return symbol
        symbol = sympy.Symbol(f"v{len(self.derived)}", integer=True)
        self.derived[symbol] = expr
        if wrap:  # (read by integer arithmetic: [2**63, 2**64) wraps to int64, as eager's Scalar does)
            self.wrapped.add(symbol)
        self.derived_hints[symbol] = self.size_hint(expr)
        self.origins[symbol] = f"= {expr}"
        return symbol

    UNBACKED_HINT = 8192  # what speed heuristics assume for an unbacked size (never a correctness decision)

    def heuristic_hint(self, expr) -> int:
        """``size_hint``, with each unbacked symbol at ``UNBACKED_HINT`` (within its range): for layout and
        speed heuristics only, never for a decision the result's correctness depends on."""
        fallback = {}
        for u in sympy.sympify(expr).free_symbols & self.unbacked.keys():
            value = max(self.UNBACKED_HINT, self.lower.get(u, 0))
            fallback[u] = sympy.Integer(min(value, self.upper[u]) if self.upper.get(u) is not None else value)
        return self.size_hint(sympy.sympify(expr).xreplace(fallback))

    def is_unbacked(self, expr) -> bool:
        """``expr`` depends on an unbacked symbol."""
        return bool(self.unbacked) and bool(sympy.sympify(expr).free_symbols & self.unbacked.keys())

    def unbacked_error(self, what: str) -> DataDependentSize:
        """The error for a decision on unbacked sizes; remembered so capture traces again without them."""
        where = self.where()
        reason = f"{what} depends on a data-dependent size" + (f" (at {where})" if where else "")
        self.unbacked_failed = self.unbacked_failed or reason
        return DataDependentSize(reason)

    def symint(self, expr) -> torch.SymInt | int:
        expr = sympy.sympify(expr)
        if expr.is_number:
            return int(expr)
        hint = None if self.is_unbacked(expr) else self.size_hint(expr)
        return torch.SymInt(SymNode(expr, self, int, hint))

    def size_hint(self, expr) -> int:
        value = sympy.sympify(expr).xreplace({s: sympy.Integer(h) for s, h in self.hints.items()})
        if self.derived and not value.is_number:
            value = value.xreplace({s: sympy.Integer(h) for s, h in self.derived_hints.items()})
        if self.is_unbacked(value):
            raise self.unbacked_error(f"the value of {expr}")
        if not value.is_number:
            raise ValueError(f"size expression {expr} has symbols without hints: {value.free_symbols}")
        return int(value)

    @property
    def symbols(self) -> list[sympy.Symbol]:
        return list(self.hints)

    # ---- facts -------------------------------------------------------------------------------

    def static_value(self, fact) -> bool | None:
        """The truth of ``fact`` for every allowed value of the symbols, or None if it depends on them."""
        fact = sympy.sympify(fact)
        if fact is sympy.true or fact is sympy.false:
            return bool(fact)
        found = self._decided.get(fact)
        if found is not None:
            return found
        value = self._static(fact, self.lower)
        if value is not None:
            self._decided[fact] = value
            ones = self._needs_two(fact, value)
            self.serves_one -= ones  # decided only for sizes >= 2: the run-time check says so
        return value

    def _needs_two(self, fact, value: bool) -> set:
        """The symbols still serving size 1 whose range from 1 does not decide ``fact`` as ``value``."""
        ones = fact.free_symbols & self.serves_one
        if ones and self._static(fact, {**self.lower, **{s: 1 for s in ones}}) != value:
            return ones
        return set()

    def settled_value(self, fact) -> bool | None:
        """The truth of ``fact`` where it holds for every size the compiled code serves (size 1 too, for
        symbols that still serve it), or None; decides nothing. Folds new SymBools and answers ATen's
        ``GUARD_OR_FALSE`` questions, whose general path is right either way: ``Eq(s0, 1)`` built inside a
        contiguity check stays an expression rather than becoming False and costing size 1."""
        fact = sympy.sympify(fact)
        if fact is sympy.true or fact is sympy.false:
            return bool(fact)
        found = self._decided.get(fact)
        if found is not None:  # (decided or guarded already)
            return found
        value = self._static(fact, self.lower)
        return None if value is not None and self._needs_two(fact, value) else value

    def answer_or(self, fact, default: bool) -> bool:
        """A fact asked where either answer is right and ``default`` takes the general path (ATen's
        ``GUARD_OR_FALSE``/``GUARD_OR_TRUE``, torch's Python ``guard_or_false``, ``statically_known_true``):
        its truth where the sizes decide it, else ``default``; never a guard. Where only sizes >= 2 decide
        it, and against the default, that answer is kept (as before sizes 1 were served) and the symbols
        stop serving size 1."""
        settled = self.settled_value(fact)
        if settled is not None:
            return settled
        value = self._static(sympy.sympify(fact), self.lower)
        if value is None or value == default:
            return default
        return self.static_value(fact)

    def _static(self, fact, lower: dict) -> bool | None:
        from kiln.loopir.index import FloorDiv, ModularIndexing
        if isinstance(fact, sympy.Not):
            inner = self._static(fact.args[0], lower)
            return None if inner is None else not inner
        if isinstance(fact, (sympy.And, sympy.Or)):
            parts = [self._static(a, lower) for a in fact.args]
            if isinstance(fact, sympy.And):
                return False if False in parts else (True if all(p is True for p in parts) else None)
            return True if True in parts else (False if all(p is False for p in parts) else None)
        if not isinstance(fact, sympy.core.relational.Relational):
            return None
        # each symbol is lower + (a nonnegative integer): the sign of lhs - rhs decides many facts
        shift = {s: lower[s] + sympy.Symbol(f"_n{i}", integer=True, nonnegative=True)
                 for i, s in enumerate(fact.free_symbols) if s in lower}
        diff = (fact.lhs - fact.rhs).xreplace(shift)
        value = _decide(type(fact), sympy.expand(_without_divisions(diff)))
        if value is None and diff.has(FloorDiv, ModularIndexing):  # the remainders' other bound
            value = _decide(type(fact), sympy.expand(_without_divisions(diff, high=True)))
        return value

    def evaluate(self, fact, hint: bool) -> bool:
        """The truth of ``fact`` for this compilation: decided statically, or guarded at its hint."""
        fact = sympy.sympify(fact)
        value = self.static_value(fact)
        if value is not None:
            return value
        if self.is_unbacked(fact):
            raise self.unbacked_error(f"the fact {fact}")
        hint = bool(hint)
        if hint and isinstance(fact, sympy.Eq) and (fact.lhs.is_number or fact.rhs.is_number):
            other = fact.rhs if fact.lhs.is_number else fact.lhs
            number = fact.lhs if fact.lhs.is_number else fact.rhs
            if other.free_symbols & self.marked:
                self.specialize(other, int(number))  # pins a marked size: the error names the line
        self._record(fact if hint else sympy.Not(fact))
        self._decided[fact] = hint
        return hint

    def specialize(self, expr, hint: int) -> int:
        """``expr`` as the constant ``hint`` (a guard that it stays so): where a size must become an int."""
        expr = sympy.sympify(expr)
        if expr.is_number:
            return int(expr)
        if self.is_unbacked(expr):
            raise self.unbacked_error(f"the value of {expr}")
        marked = expr.free_symbols & self.marked
        if marked:
            names = ", ".join(self.origins[s] for s in marked)
            self.specialization_error = SpecializationError(
                f"{names} was marked dynamic (kiln.mark_dynamic), but the code at {self.where() or 'an unknown line'} "
                f"needs it as a constant ({expr} == {hint}). Remove the mark_dynamic call, or change the code so "
                f"it does not need the size as a Python int (keep it in tensor operations).")
            raise self.specialization_error
        self._record(sympy.Eq(expr, hint))
        self._decided[sympy.Eq(expr, hint)] = True
        return int(hint)

    def specialize_all(self) -> None:
        """Every symbol becomes its hint: the compiled code then serves only the sizes seen (a backend
        that cannot generate size-generic code calls this). Unbacked sizes have no value to become:
        ``DataDependentSize`` (capture then traces again, breaking the graph at the data-dependent op)."""
        if self.unbacked:
            raise self.unbacked_error("a compile for the sizes seen (a static fallback)")
        for s, hint in self.hints.items():
            if self.static_value(sympy.Eq(s, hint)) is not True:
                self._record(sympy.Eq(s, hint))
        self.marked.clear()

    def _record(self, fact) -> None:
        fact = sympy.simplify_logic(fact) if isinstance(fact, (sympy.And, sympy.Or, sympy.Not)) else fact
        if fact is sympy.true:
            return
        if fact is sympy.false:
            raise ValueError("a shape guard that can never hold")
        if isinstance(fact, sympy.core.relational.Relational):
            self._tighten(fact)
        self.guards.append(ShapeGuard(fact, self.where()))

    def _tighten(self, fact) -> None:
        """A guard ``s >= k`` (or ``s > k``) raises what ``static_value`` knows of s's lower bound."""
        lhs, rhs = fact.lhs, fact.rhs
        if isinstance(fact, (sympy.GreaterThan, sympy.StrictGreaterThan)) and lhs.is_Symbol and rhs.is_Integer:
            bound = int(rhs) + (1 if isinstance(fact, sympy.StrictGreaterThan) else 0)
        elif isinstance(fact, (sympy.LessThan, sympy.StrictLessThan)) and rhs.is_Symbol and lhs.is_Integer:
            lhs, bound = rhs, int(lhs) + (1 if isinstance(fact, sympy.StrictLessThan) else 0)
        else:
            return
        if lhs in self.lower and bound > self.lower[lhs]:
            self.lower[lhs] = bound  # (decisions made so far held for the wider range: still true)

    # ---- inputs and the run-time check -------------------------------------------------------

    def bind_input(self, name: str, sizes, strides) -> None:
        self.inputs.append(InputBinding(name, tuple(sympy.sympify(s) for s in sizes),
                                        tuple(sympy.sympify(s) for s in strides)))

    def bind_scalar(self, name: str, symbol: sympy.Symbol) -> None:
        """An int graph input (``L['n']``) that is the symbol itself: read as ``s3 = n`` at run time."""
        self.inputs.append(InputBinding(name, (), (), scalar=symbol))

    def int_symbol(self, value: int, origin: str, duck: bool = False) -> torch.SymInt:
        """A symbol for an int argument that was ``value`` while compiling (``value >= MIN_SYMBOLIC_HINT``: 0, 1 and
        negative values stay constants). Not duck-sized (equal to a tensor size is no reason to share),
        except with ``duck``: an item of a ``torch.Size`` argument, most likely a tensor's size (the guards
        check that they stay equal)."""
        return self.symint(self.create_symbol(value, origin, duck=duck))

    def run_time_lower(self, s: sympy.Symbol) -> int:
        """The lowest value of ``s`` the compiled code serves: 1 where no decision needed ``s >= 2``."""
        lo = self.lower[s]
        return 1 if s in self.serves_one and lo == self.MIN_SIZE else lo

    def ranges(self) -> str:
        """``s0 >= 1, s1 >= 2, s2 in [4, 64]``: the backed symbols' ranges as the run-time check has them."""
        def one(s):
            lo, hi = self.run_time_lower(s), self.upper.get(s)
            return f"{s} >= {lo}" if hi is None else f"{s} in [{lo}, {hi}]"
        return ", ".join(one(s) for s in self.hints)

    def check_source(self) -> str:
        """``check_shapes(t0, t1, ...)`` over the bound inputs: None when every size, stride and fact holds,
        else the text of the first that fails."""
        lines = ["def check_shapes(*ts):"]
        bound: dict[sympy.Symbol, str] = {}
        checks: list[tuple[str, str]] = []
        for i, inp in enumerate(self.inputs):
            if inp.scalar is not None:  # an int argument: the symbol itself (its type is guarded apart)
                if inp.scalar in bound:
                    checks.append((f"ts[{i}] == {inp.scalar}", f"{inp.name} == {inp.scalar}"))
                else:
                    bound[inp.scalar] = f"{inp.scalar}"
                    lines.append(f"    {inp.scalar} = ts[{i}]")
                continue
            lines.append(f"    sz{i} = ts[{i}].size()")
            lines.append(f"    st{i} = ts[{i}].stride()")
            lines.append(f"    if len(sz{i}) != {len(inp.sizes)}: return {inp.name + '.dim() == ' + str(len(inp.sizes))!r}")
            for d, size in enumerate(inp.sizes):
                place = f"sz{i}[{d}]"
                if size.is_Symbol and size not in bound:
                    bound[size] = f"{size}"
                    lines.append(f"    {size} = {place}")
                    continue
                checks.append((f"{place} == {_py(size)}", f"{inp.name}.size({d}) == {size}"))
        for s in self.lower:
            lo = self.run_time_lower(s) if s in self.hints else self.lower[s]
            if s in bound:
                checks.append((f"{s} >= {lo}", f"{self.origins.get(s) or s} >= {lo} ({s})"))
                if self.upper.get(s) is not None:
                    checks.append((f"{s} <= {self.upper[s]}", f"{self.origins.get(s) or s} <= {self.upper[s]} ({s})"))
        for i, inp in enumerate(self.inputs):
            for d, (size, stride) in enumerate(zip(inp.sizes, inp.strides)):
                if size == 1:
                    continue  # the stride of a size-1 dim is never used
                checks.append((f"st{i}[{d}] == {_py(stride)}", f"{inp.name}.stride({d}) == {stride}"))
        for g in self.guards:
            where = f" (from {g.where})" if g.where else ""
            checks.append((_py(g.fact), f"{g.fact}{where}"))
        for expr, what in checks:
            lines.append(f"    if not ({expr}): return {what!r}")
        lines.append("    return None")
        return "\n".join(lines) + "\n"

    def expr_function(self, expr) -> tuple[Callable[..., int], list[int]]:
        """(fn, input indices): ``fn(*tensors)`` computes ``expr`` from the sizes of those bound inputs."""
        expr = sympy.sympify(expr)
        needed = set(expr.free_symbols)
        lines, used = ["def size_expr(*ts):"], []
        for i, inp in enumerate(self.inputs):
            if inp.scalar is not None and inp.scalar in needed:
                used.append(i)
                lines.append(f"    {inp.scalar} = ts[{used.index(i)}]")
                needed.discard(inp.scalar)
            for d, size in enumerate(inp.sizes):
                if size.is_Symbol and size in needed:
                    if i not in used:
                        used.append(i)
                    lines.append(f"    {size} = ts[{used.index(i)}].size({d})")
                    needed.discard(size)
        if needed:
            raise ValueError(f"symbols {needed} of {expr} are bound to no input")
        lines.append(f"    return {_py(expr)}")
        ns: dict = {"Fraction": fractions.Fraction}
        exec(compile("\n".join(lines) + "\n", "<kiln size expression>", "exec"), ns)
        return ns["size_expr"], used

    def check_function(self) -> Callable[..., str | None]:
        ns: dict = {"Fraction": fractions.Fraction}
        exec(compile(self.check_source(), "<kiln shape guards>", "exec"), ns)
        return ns["check_shapes"]

    def describe(self) -> str:
        """Symbols and guards, for explain()."""
        rows = [f"{s} = {self.origins.get(s) or '?'} (was {h}, >= {self.lower[s]}"
                + (", also serves 1)" if s in self.serves_one and self.lower[s] == self.MIN_SIZE else ")")
                for s, h in self.hints.items()]
        rows += [f"{s} = {origin} (data-dependent, >= {self.lower.get(s, '-inf')})" for s, origin in self.unbacked.items()]
        rows += [f"{s} {self.origins[s]} (computed by the wrapper)" for s in self.derived]
        rows += [f"guard: {g.fact}" + (f"  # {g.where}" if g.where else "") for g in self.guards]
        return "\n".join(rows)


def _decide(kind, diff) -> bool | None:
    """The truth of ``diff <kind> 0`` from the signs sympy can tell, or None."""
    positive, negative, zero = diff.is_positive, diff.is_negative, diff.is_zero
    nonneg, nonpos = diff.is_nonnegative, diff.is_nonpositive
    if kind is sympy.Eq:
        return True if zero else (False if (positive or negative) else None)
    if kind is sympy.Ne:
        return False if zero else (True if (positive or negative) else None)
    if kind is sympy.StrictGreaterThan:
        return True if positive else (False if nonpos else None)
    if kind is sympy.GreaterThan:
        return True if nonneg else (False if negative else None)
    if kind is sympy.StrictLessThan:
        return True if negative else (False if nonneg else None)
    if kind is sympy.LessThan:
        return True if nonpos else (False if positive else None)
    return None


def _without_divisions(expr, high: bool = False):
    """``expr`` with each ``FloorDiv(a, c)`` (c a positive int) written ``(a - m) / c`` and each
    ``ModularIndexing(a, d, c)`` written ``m``, where the remainder m is a fresh nonnegative r
    (``high=False``) or, for a constant c, ``c - 1 - r`` (``high=True``: m <= c - 1). Either form holds
    for the true remainder, so a sign proven for every r >= 0 holds for the true value (only ever sound)."""
    from kiln.loopir.index import FloorDiv, ModularIndexing
    count = iter(range(10 ** 6))

    def remainder(c):
        r = sympy.Symbol(f"_r{next(count)}", integer=True, nonnegative=True)
        return c - 1 - r if high and c.is_Integer and int(c) > 0 else r

    done: dict = {}  # one remainder per distinct division, wherever it occurs

    def rewrite(e):
        if e in done or not e.has(FloorDiv, ModularIndexing):
            return done.get(e, e)
        if isinstance(e, ModularIndexing):
            out = remainder(e.args[2])
        elif isinstance(e, FloorDiv) and e.args[1].is_Integer and int(e.args[1]) > 0:
            out = (rewrite(e.args[0]) - remainder(e.args[1])) / e.args[1]
        elif isinstance(e, (sympy.Min, sympy.Max)):  # (unevaluated: evaluating them again is slow)
            out = e.func(*[rewrite(a) for a in e.args], evaluate=False)
        else:
            out = e.func(*[rewrite(a) for a in e.args])
        done[e] = out
        return out

    return rewrite(expr)


def _py(expr) -> str:
    """A sympy size expression or fact as Python source over the symbols' names."""
    from kiln.loopir.index import FloorDiv, ModularIndexing
    e = expr
    if e is sympy.true or e is sympy.false:
        return str(bool(e))
    if e.is_Integer:
        return str(int(e))
    if e.is_Rational:  # 3*s0/8 in a fact: exact arithmetic with fractions.Fraction
        return f"Fraction({int(e.p)}, {int(e.q)})"
    if e.is_Float:
        return repr(float(e))
    if e.is_Symbol:
        return e.name
    if isinstance(e, sympy.Add):
        return "(" + " + ".join(_py(a) for a in e.args) + ")"
    if isinstance(e, sympy.Mul):
        return "(" + " * ".join(_py(a) for a in e.args) + ")"
    if isinstance(e, sympy.Pow) and e.exp.is_Integer and int(e.exp) >= 0:
        return f"({_py(e.base)} ** {int(e.exp)})"
    if isinstance(e, FloorDiv):
        return f"({_py(e.args[0])} // {_py(e.args[1])})"
    if isinstance(e, ModularIndexing):
        return f"(({_py(e.args[0])} // {_py(e.args[1])}) % {_py(e.args[2])})"
    if isinstance(e, (sympy.Max, sympy.Min)):
        return f"{'max' if isinstance(e, sympy.Max) else 'min'}({', '.join(_py(a) for a in e.args)})"
    if isinstance(e, sympy.core.relational.Relational):
        op = {sympy.Eq: "==", sympy.Ne: "!=", sympy.StrictLessThan: "<", sympy.LessThan: "<=",
              sympy.StrictGreaterThan: ">", sympy.GreaterThan: ">="}[type(e)]
        return f"({_py(e.lhs)} {op} {_py(e.rhs)})"
    if isinstance(e, sympy.Not):
        return f"(not {_py(e.args[0])})"
    if isinstance(e, (sympy.And, sympy.Or)):
        join = " and " if isinstance(e, sympy.And) else " or "
        return "(" + join.join(_py(a) for a in e.args) + ")"
    raise NotImplementedError(f"no Python form for the size expression {e} ({type(e).__name__})")


# ---- the SymNode protocol --------------------------------------------------------------------------

def _nonneg(env: ShapeEnv, expr) -> bool:
    return expr.is_nonnegative is True or env.static_value(sympy.Ge(expr, 0)) is True


class SymNode:
    """The node of a ``torch.SymInt``/``SymBool``/``SymFloat``: a sympy expression, its value at the
    hints, and the ShapeEnv that records what is guarded."""

    def __init__(self, expr, env: ShapeEnv, pytype: type, hint):
        self.expr = expr
        self.env = env
        self.pytype = pytype
        self.hint = hint

    @property
    def _hint(self):
        """The value at the hints, as torch's own SymNode caches it (``statically_known_true`` in torch's
        Python meta kernels reads it: ``Tensor.unfold``'s backward failed without it)."""
        return self.hint

    # what torch asks of every node
    def is_int(self) -> bool:
        return self.pytype is int

    def is_bool(self) -> bool:
        return self.pytype is bool

    def is_float(self) -> bool:
        return self.pytype is float

    def is_nested_int(self) -> bool:
        return False

    def nested_int(self):
        return None

    def is_symbolic(self) -> bool:
        return not self.expr.is_number

    def is_constant(self) -> bool:
        return False

    def has_hint(self) -> bool:
        return self.hint is not None

    def constant_int(self):
        return None

    def constant_bool(self):
        return None

    def maybe_as_int(self):
        return int(self.expr) if self.expr.is_number and self.pytype is int else None

    def maybe_as_bool(self):
        return bool(self.expr) if self.expr in (sympy.true, sympy.false) else None

    def clone(self) -> "SymNode":
        return self

    def str(self) -> str:
        return str(self.expr)

    _graph_repr = str
    __str__ = str

    def __repr__(self) -> str:
        return f"SymNode({self.expr}, hint={self.hint})"

    def _new(self, expr, pytype, hint) -> "SymNode":
        if pytype is bool and expr not in (sympy.true, sympy.false):
            known = self.env.settled_value(expr)
            if known is not None:
                expr = sympy.true if known else sympy.false
        return SymNode(expr, self.env, pytype, hint)

    def wrap_int(self, n: int) -> "SymNode":
        return SymNode(sympy.Integer(n), self.env, int, n)

    def wrap_bool(self, b: bool) -> "SymNode":
        return SymNode(sympy.true if b else sympy.false, self.env, bool, b)

    def wrap_float(self, f: float) -> "SymNode":
        return SymNode(sympy.Float(f), self.env, float, f)

    # arithmetic
    def _binary(self, other: "SymNode", fn, pyfn, pytype=None) -> "SymNode":
        if pytype is None:  # int op float is a float
            pytype = float if float in (self.pytype, other.pytype) else self.pytype
        return self._new(fn(self.expr, other.expr), pytype, _at_hints(pyfn, self.hint, other.hint))

    def add(self, other):
        return self._binary(other, operator.add, operator.add)

    def sub(self, other):
        return self._binary(other, operator.sub, operator.sub)

    def mul(self, other):
        return self._binary(other, operator.mul, operator.mul)

    def neg(self):
        return self._new(-self.expr, self.pytype, _at_hints(operator.neg, self.hint))

    def floordiv(self, other):
        from kiln.loopir.index import FloorDiv
        env = self.env
        if self.pytype is int and other.pytype is int and other.expr == 1:
            return self  # n // 1 == n for any int (unfold's (s0 - size) // 1 may be negative)
        if self._by_negative_constant(other):  # n // -k == (-n) // k for ints
            return self.neg().floordiv(other.neg())
        sign = self._sign_for_division(other)
        if sign is True:
            if env.static_value(sympy.Lt(self.expr, other.expr)) is True:
                return self.wrap_int(0)  # 1 // s0 with s0 >= 2
            return self._new(FloorDiv(self.expr, other.expr), int, _at_hints(operator.floordiv, self.hint, other.hint))
        if sign is False:
            # -(-n // k), ceil division as Python code writes it: (-n) // k == -((n + k - 1) // k)
            up = FloorDiv(-self.expr + other.expr - 1, other.expr)
            return self._new(-up, int, _at_hints(operator.floordiv, self.hint, other.hint))
        return self.wrap_int(self._concrete() // other._concrete())

    def _sign_for_division(self, other) -> bool | None:
        """For ``self // other`` and ``self % other`` with ints and ``other > 0``: True if self >= 0, False
        if self <= 0, decided for all sizes where possible, else by a guard on the sign at the hint (a
        conv's output size over a pooled size: ``(s0 // 2 - 2) // 2``; pinning the dividend's value
        recompiled every size). None where neither holds (the caller specializes)."""
        env = self.env
        if self.pytype is not int or other.pytype is not int or env.static_value(sympy.Gt(other.expr, 0)) is not True:
            return None
        if _nonneg(env, self.expr):
            return True
        if _nonneg(env, -self.expr):
            return False
        if self.hint is None or env.is_unbacked(self.expr) or not other.expr.is_Integer:
            return None
        return env.evaluate(sympy.Ge(self.expr, 0), self.hint >= 0)

    int_floordiv = floordiv

    def _by_negative_constant(self, other) -> bool:
        return self.pytype is int and other.pytype is int and other.expr.is_Integer and int(other.expr) < 0

    def mod(self, other):
        from kiln.loopir.index import ModularIndexing
        if self._by_negative_constant(other):  # n % -k == -((-n) % k) for ints (the divisor's sign)
            return self.neg().mod(other.neg()).neg()
        sign = self._sign_for_division(other)
        if sign is True:
            if self.env.static_value(sympy.Lt(self.expr, other.expr)) is True:
                return self  # 1 % s0 with s0 >= 2 (roll's shift)
            return self._new(ModularIndexing(self.expr, 1, other.expr), int, _at_hints(operator.mod, self.hint, other.hint))
        if sign is False:
            # (-n) % k, padding to a multiple of k: Python's remainder is (k - n % k) % k, k - n % k >= 1
            up = other.expr - ModularIndexing(-self.expr, 1, other.expr)
            return self._new(ModularIndexing(up, 1, other.expr), int, _at_hints(operator.mod, self.hint, other.hint))
        return self.wrap_int(self._concrete() % other._concrete())

    def pow(self, other):
        if other.expr.is_Integer and int(other.expr) >= 0 and self.pytype is int:
            return self._new(self.expr ** other.expr, int, _at_hints(operator.pow, self.hint, other.hint))
        return self._specialized(operator.pow, other)

    pow_by_natural = pow

    def truediv(self, other):
        return self._specialized(operator.truediv, other)

    int_truediv = truediv
    float_truediv = truediv

    def _specialized(self, fn, other):
        value = fn(self._concrete(), other._concrete())
        return self.wrap_float(value) if isinstance(value, float) else self.wrap_int(value)

    def sym_max(self, other):
        known = self.env.static_value(sympy.Ge(self.expr, other.expr))
        if known is not None:
            return self if known else other
        return self._binary(other, sympy.Max, max)

    def sym_min(self, other):
        known = self.env.static_value(sympy.Le(self.expr, other.expr))
        if known is not None:
            return self if known else other
        return self._binary(other, sympy.Min, min)

    def sym_sum(self, args):  # (self is one of args)
        total, hint = sympy.Integer(0), 0
        for o in args:
            total, hint = total + o.expr, _at_hints(operator.add, hint, o.hint)
        return self._new(total, self.pytype, hint)

    def sym_float(self):
        return self._new(self.expr, float, _at_hints(float, self.hint))

    def sym_int(self):
        return self.wrap_int(int(self._concrete()))

    # (a float made of sizes is specialized by _concrete: its sizes become constants, which is sound)
    def ceil(self):
        return self.wrap_int(math.ceil(self._concrete())) if self.pytype is float else self

    def floor(self):
        return self.wrap_int(math.floor(self._concrete())) if self.pytype is float else self

    def trunc(self):
        return self.wrap_int(math.trunc(self._concrete())) if self.pytype is float else self

    # comparisons and logic
    def eq(self, other):
        return self._binary(other, sympy.Eq, operator.eq, bool)

    def ne(self, other):
        return self._binary(other, sympy.Ne, operator.ne, bool)

    def lt(self, other):
        return self._binary(other, sympy.Lt, operator.lt, bool)

    def le(self, other):
        return self._binary(other, sympy.Le, operator.le, bool)

    def gt(self, other):
        return self._binary(other, sympy.Gt, operator.gt, bool)

    def ge(self, other):
        return self._binary(other, sympy.Ge, operator.ge, bool)

    def sym_and(self, other):
        return self._binary(other, sympy.And, lambda a, b: bool(a and b), bool)

    def sym_or(self, other):
        return self._binary(other, sympy.Or, lambda a, b: bool(a or b), bool)

    def sym_not(self):
        return self._new(sympy.Not(self.expr), bool, _at_hints(operator.not_, self.hint))

    def sym_ite(self, then, other):
        return then if self._concrete() else other

    def is_non_overlapping_and_dense_indicator(self, *args):
        raise NotImplementedError

    # where a value must be known: guard it
    def _concrete(self):
        env = self.env
        if self.pytype is bool:
            return env.evaluate(self.expr, self.hint)
        if self.expr.is_number:
            return self.pytype(self.expr)
        if self.pytype is float:
            if env.is_unbacked(self.expr):
                raise env.unbacked_error(f"the value of {self.expr}")
            for s in self.expr.free_symbols:  # a float of sizes: the sizes it is made of become constants
                env.specialize(s, env.hints[s])
            return float(self.hint)
        return env.specialize(self.expr, self.hint)

    def guard_int(self, file=None, line=None) -> int:
        return int(self._concrete())

    def guard_float(self, file=None, line=None) -> float:
        return float(self._concrete())

    def guard_bool(self, file=None, line=None) -> bool:
        if self.pytype is bool and self.env.settled_value(self.expr) is None:
            default = _python_guard_or_default()
            if default is not None:  # torch's Python ``guard_or_false``
                if self.hint is None:  # its default, as torch answers unbacked
                    return default
                value = self.env._static(self.expr, self.env.lower)
                if value is not None and value == default:  # (right for size 1 too: the general path)
                    return default
        return bool(self._concrete())

    guard_size_oblivious = guard_bool  # (torch: its answers may differ from eager's for sizes 0 and 1)

    # ATen's C++ asks ``TORCH_GUARD_OR_FALSE(fact)`` where either answer is correct and the default one
    # takes the general path (contiguity fast paths, broadcasting, which then checks its assumption with
    # TORCH_SYM_CHECK: ``expect_true`` records that as a guard). Where the fact is not decided for every
    # size, answer the default without a guard (as ATen does for sizes without a hint): a guard there
    # (``s0 - 1 != 1`` from a slice's contiguity) would only split the sizes into more compiles.
    def guard_or_false(self, file=None, line=None) -> bool:
        if self.env.exact_answers and self.pytype is bool and self.hint is not None:
            return bool(self._concrete())
        return self.env.answer_or(self.expr, False) if self.pytype is bool else False

    def guard_or_true(self, file=None, line=None) -> bool:
        if self.env.exact_answers and self.pytype is bool and self.hint is not None:
            return bool(self._concrete())
        return self.env.answer_or(self.expr, True) if self.pytype is bool else True
    expect_true = guard_bool

    def expect_size(self, file=None, line=None) -> bool:
        return self.env.evaluate(sympy.Ge(self.expr, 0), self.hint is not None and self.hint >= 0)

    def statically_known_true(self, file=None, line=None) -> bool:
        return self.pytype is bool and self.env.answer_or(self.expr, False)

    def bool_(self) -> bool:
        return bool(self._concrete())

    def int_(self) -> int:
        return int(self._concrete())

    def float_(self) -> float:
        return float(self._concrete())


class aliasing_decisions:
    """While an op runs whose result is a view of its input or a copy depending on ATen's either-answer
    questions (``reshape``: ``computeStride`` asks ``GUARD_OR_TRUE(view_numel != tensor_numel)``), those
    questions are guarded at the hints: answered by default, ``x.t().reshape(n, m, 2)`` was a copy where
    eager returns a view, and a later in-place change of it did not reach ``x``."""

    def __init__(self, args):
        self.envs = []
        for t in args:
            if isinstance(t, torch.Tensor) and not _row_major(t):  # (a row-major tensor always reshapes to a view)
                for n in t.shape:
                    if is_symbolic(n) and n.node.env not in self.envs:
                        self.envs.append(n.node.env)

    def __enter__(self):
        for env in self.envs:
            env.exact_answers += 1

    def __exit__(self, *exc):
        for env in self.envs:
            env.exact_answers -= 1


def _row_major(t: torch.Tensor) -> bool:
    """Strides row-major for every size, by the expressions themselves (no question asked)."""
    from kiln.fake.shapes import sym_sizes, sym_strides

    try:
        want = contiguous_strides(sym_sizes(t))
        return all(sympy.expand(a - b) == 0 for a, b in zip(sym_strides(t), want))
    except TypeError:
        return False


def _python_guard_or_default() -> bool | None:
    """The default of the ``torch.fx.experimental.symbolic_shapes._guard_or(fact, default)`` call that asks
    (torch's Python meta kernels call ``guard_or_false`` through it, which reaches ``guard_bool``), or None
    where the question comes from elsewhere."""
    import sys

    frame = sys._getframe(2)
    for _ in range(3):
        if frame is None:
            return None
        if frame.f_code.co_name == "_guard_or" and frame.f_code.co_filename.endswith("symbolic_shapes.py"):
            default = frame.f_locals.get("default")
            return default if isinstance(default, bool) else None
        frame = frame.f_back
    return None


def _at_hints(fn, *hints):
    """``fn`` of the operands' hints; None where one has none (an unbacked size)."""
    return None if any(h is None for h in hints) else fn(*hints)


def is_symbolic(x) -> bool:
    return isinstance(x, SYMBOLIC_SCALARS) and isinstance(x.node, SymNode) and x.node.is_symbolic()


def symbolic_fake(real: torch.Tensor, env: ShapeEnv, name: str, dims, marked=None):
    """A fake of ``real`` whose sizes at ``dims`` are symbols (strides follow as expressions), bound to
    the input ``name``; None where ``real`` keeps static sizes (a layout other than row-major, or no dim
    of size >= 2 asked for). ``marked``: dim -> (min, max) from mark_dynamic. The fake starts at offset 0
    whatever ``real``'s storage offset (a batch ``data[i:i + b]``): kernels index from the data pointer,
    and a trace that reads the offset is refused (``OutputGraph.guard_storage_offset``)."""
    from kiln.fake.autograd_kind import as_non_leaf, autograd_kind
    from kiln.fake.tensor import FakeTensor, _kernel_context

    marked = marked or {}
    kind = autograd_kind(real)
    if kind not in ("leaf", "non-leaf"):  # a view refusing in-place ops: static sizes, as its base's fake
        return None
    sizes = list(real.size())
    if tuple(real.stride()) != tuple(int(st) for st in contiguous_strides(sizes)):
        return None
    exprs: list = []
    for d, n in enumerate(sizes):
        if d in dims and n >= ShapeEnv.MIN_SYMBOLIC_HINT:
            lo, hi = marked.get(d, (None, None))
            exprs.append(env.create_symbol(n, f"{name}.size({d})", lo, hi, marked=d in marked))
        else:
            exprs.append(sympy.Integer(n))
    if all(e.is_number for e in exprs):
        return None
    strides = contiguous_strides(exprs)
    env.bind_input(name, exprs, strides)
    with torch.no_grad(), _kernel_context():
        meta = torch.empty_strided([env.symint(e) for e in exprs], [env.symint(s) for s in strides],
                                   dtype=real.dtype, device="meta")
    fake = FakeTensor(meta, real.device, requires_grad=real.requires_grad)
    return as_non_leaf(fake) if kind == "non-leaf" else fake
