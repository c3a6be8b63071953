"""Float arguments as graph inputs (automatic dynamic for Python floats, ``Options.dynamic_floats``).

A float argument whose value changed between two compiles of the same code (``lr`` of a learning-rate
schedule, a ``scale`` passed each call) is, from then on, a graph input: a 0-dim float64 CPU tensor made
from the float at each call (``FloatTensorSource``), as torch.compile promotes unspecialized floats to
tensor inputs. Later values hit the same entry.

A ``SymbolicFloat`` is such a float, or a number computed from one with Python arithmetic, held twice:

- as an expression over the float places (``(L['lr'] * 0.5)``), evaluated with Python floats where the
  number must be known at run time: a guard on a comparison (``if lr > 0.1`` records that
  ``(L['lr'] > 0.1) is True`` must hold, not the value), or the number handed on (returned, stored),
  computed again from the places by a small function;
- as a graph node (the 0-dim float64 tensor, made at its first use by a tensor operation). Float64
  tensor arithmetic is IEEE double arithmetic, as Python's floats are.

Only these uses stay symbolic: ``+ - * /`` and unary minus with ints, floats and other SymbolicFloats
(a division guards that its divisor is not zero, where Python would raise), comparisons and truth
(guards), and ``tensor op float`` for ``+ - * /`` where the tensor has dims and a real dtype: the float
enters as the 0-dim tensor (an integer or bool tensor gets it as the default dtype, so the result dtype is
Python-scalar promotion's). ATen computes a 0-dim CPU operand of a dimensioned tensor in the op math type,
as it does a Python scalar, so results equal eager's. Anything else (``alpha=``, ``math.sqrt``, a size, a
tensor-op argument other than these) reads ``value``, which guards every place the number depends on to
keep its value: the old behaviour, sound by construction.
"""
from __future__ import annotations

import dataclasses
import math
import operator
import re

import torch

from kiln.capture.sources import Source
from kiln.capture.values.base import ConstantValue, Value
from kiln.capture.values.scalars import _KnownScalar

_ARITHMETIC = {operator.add: "+", operator.sub: "-", operator.mul: "*", operator.truediv: "/"}
_INPLACE = {operator.iadd: operator.add, operator.isub: operator.sub, operator.imul: operator.mul,
            operator.itruediv: operator.truediv}
_PLACE = re.compile(r"\ba(\d+)\b")
_COMPARISONS = {operator.eq: "==", operator.ne: "!=", operator.lt: "<", operator.le: "<=",
                operator.gt: ">", operator.ge: ">="}


def as_double_tensor(value: float) -> torch.Tensor:
    """The graph input made from a float argument at each call."""
    return torch.tensor(value, dtype=torch.float64, device="cpu")


@dataclasses.dataclass(frozen=True)
class FloatTensorSource(Source):
    """The float at ``base`` as a 0-dim float64 CPU tensor (a graph input)."""

    base: Source

    def name(self) -> str:
        return self.base.name()

    def emit(self, cg) -> None:
        cg.prepare_call(as_double_tensor)
        self.base.emit(cg)
        cg.call(1)


@dataclasses.dataclass(frozen=True)
class FloatPredicateSource(Source):
    """A Python expression over float places (``(L['lr'] > 0.1)``), read by a guard."""

    text: str

    def name(self) -> str:
        return self.text

    def emit(self, cg) -> None:  # (guards only read it)
        raise NotImplementedError("a float predicate is only read by guards")


@dataclasses.dataclass(frozen=True)
class SizePlace(Source):
    """An int computed from the frame's symbolic sizes (a ``SymbolicInt``) as a place of a float
    expression: ``text`` computes it from the frame's inputs (``L['x'].size(0) * 2``), exactly (Python
    ints), for guards; handed on, the int is computed again as the SymbolicInt is."""

    text: str
    symbolic: object = dataclasses.field(compare=False, hash=False)

    def name(self) -> str:
        return self.text

    def emit(self, cg) -> None:
        self.symbolic.reconstruct(cg)


def size_place(v) -> SizePlace | None:
    """The place of a symbolic int (None where it is not computable from the frame's inputs: a
    data-dependent size)."""
    from kiln.fake.symbolic import _py
    from kiln.lazy import sympy

    node = getattr(v.example, "node", None)
    env = getattr(node, "env", None)
    if env is None or node.hint is None or env.is_unbacked(node.expr):
        return None
    names: dict = {}
    for inp in env.inputs:
        if inp.scalar is not None:
            names.setdefault(inp.scalar, inp.name)
        for d, size in enumerate(inp.sizes):
            if size.is_Symbol:
                names.setdefault(size, f"{inp.name}.size({d})")
    expr = node.expr
    if not expr.free_symbols <= names.keys():
        return None
    text = _py(expr.xreplace({sym: sympy.Symbol(f"({names[sym]})") for sym in expr.free_symbols}))
    return SizePlace(text, v)


def guarded_size_place(output, v, low: int, high: int) -> SizePlace | None:
    """``size_place(v)`` with a guard that the size expression stays in ``[low, high)`` (None where it has
    no place or is outside the range now: the caller's usual path makes it a constant)."""
    place = size_place(v)
    if place is None or output is None or not low <= int(v.example.node.hint) < high:
        return None
    predicate(output, f"({low} <= a0 < {high})", [place], True)
    return place


EXACT_INT = 2 ** 53  # below this an int is a float64 exactly, and p / k rounds once either way


def _size_operand(v):
    """(text, places, value) of a symbolic int in float arithmetic, guarded to stay below 2**53 in
    magnitude (None where it is not: the usual path makes it a constant)."""
    place = guarded_size_place(v.output, v, -EXACT_INT + 1, EXACT_INT)
    return None if place is None else ("a0", [place], int(v.example.node.hint))


def _literal(v) -> str | None:
    """The exact source text of a constant operand (None: not one the expressions take)."""
    if type(v) is bool or type(v) is int:
        return repr(int(v))
    if type(v) is float and math.isfinite(v):
        return repr(v)  # (repr round-trips a float exactly)
    return None


class SymbolicFloat(_KnownScalar):
    """A float argument traced as a graph input, or Python arithmetic on such floats."""

    def __init__(self, output, value: float, text: str, places: list[Source], build=None):
        self.output = output
        self._value = value
        self.text = text  # a Python expression over a0, a1, ... (the places, in order)
        self.places = places
        self._build = build  # () -> the TensorValue of a computed number (None: an input float)
        self._tensor = None  # made at the first use by a tensor op (pure Python float code adds no graph)
        self.source = None
        self.ratio = None  # (SymbolicInt p, int k > 0) where the number is p / k: floor/ceil/int stay exact

    @property
    def value(self) -> float:
        """The number as a constant: every place it depends on is guarded to keep its value."""
        for place in self.places:
            if isinstance(place, SizePlace):
                place.symbolic.value  # (the size expression pinned to its value: Eq(expr, hint))
            else:
                self.output.guards.constant(place, _place_value(self.output, place))
        return self._value

    def python_type(self) -> type:
        return float

    def guard_text(self) -> str:
        return _substitute(self.text, [p.name() for p in self.places])

    def tensor(self):
        """The graph's 0-dim float64 tensor of this number (an input made at the first use)."""
        from kiln.capture.values.tensors import TensorValue

        if self._tensor is not None:
            return self._tensor
        if self._build is not None:
            self._tensor = self._build()
            return self._tensor
        out = self.output  # an input float: its placeholder
        real = as_double_tensor(self._value)
        node = out._placeholder(FloatTensorSource(self.places[0]), real)
        node.meta["example_value"] = out.fake_mode.from_real(real)
        out._input_values.append(self)
        self._tensor = TensorValue(node, node.meta["example_value"])
        return self._tensor

    def truth(self, tx) -> bool:
        return predicate(self.output, f"bool({self.text})", self.places, bool(self._value))

    def reconstruct(self, cg) -> None:
        """Handed on: computed again from its places at run time (no guard on its value)."""
        if self.text == "a0":
            self.places[0].emit(cg)
            return
        fn = eval(f"lambda {', '.join(f'a{i}' for i in range(len(self.places)))}: {self.text}",  # noqa: S307
                  dict(GUARD_NAMES))
        cg.prepare_call(fn)
        for place in self.places:
            place.emit(cg)
        cg.call(len(self.places))

    def __repr__(self) -> str:
        return f"SymbolicFloat({self.guard_text()} = {self._value!r})"


def _place_value(output, place: Source) -> float:
    for s, v in output.dynamic_float_values:
        if s.name() == place.name():
            return v
    raise KeyError(place.name())


def add_float_input(output, source: Source, value: float) -> Value | None:
    """The float argument at ``source`` as a SymbolicFloat, where the dynamic policy says it changed
    between compiles (None: a constant, as before)."""
    policy = output.dynamic
    if policy is None or not hasattr(policy, "float_is_dynamic") or not policy.float_is_dynamic(source.name(), value):
        return None
    output.guards.type(source, value)
    if not hasattr(output, "dynamic_float_values"):
        output.dynamic_float_values = []
    output.dynamic_float_values.append((source, value))
    return SymbolicFloat(output, value, "a0", [source])


def predicate(output, text: str, places: list[Source], result: bool) -> bool:
    """``result`` of a Python expression over float places, guarded to stay so."""
    output.guards.constant(FloatPredicateSource(_substitute(text, [p.name() for p in places])), result)
    return result


def _substitute(text: str, names: list[str]) -> str:
    """``text`` with each place variable ``a<i>`` replaced by ``names[i]`` (in one pass)."""
    return _PLACE.sub(lambda m: names[int(m.group(1))], text)


def _operand(v: Value):
    """(text, places, value) of a float-arithmetic operand, or None."""
    if isinstance(v, SymbolicFloat):
        return v.text, v.places, v._value
    if _is_symbolic_int(v):
        return _size_operand(v)
    if type(v) is ConstantValue or (isinstance(v, _KnownScalar) and v.python_type() in (int, float, bool)):
        value = v.value  # (a number read from the frame: guarded to keep its value, as any constant)
        if _literal(value) is not None:
            return _literal(value), [], value
    return None


def _merge(a, b):
    """The two operands' texts over one list of places."""
    (ta, pa, _), (tb, pb, _) = a, b
    places = list(pa)
    names = [p.name() for p in places]
    renames = {}
    for i, p in enumerate(pb):
        if p.name() not in names:
            names.append(p.name())
            places.append(p)
        renames[i] = names.index(p.name())
    return ta, _substitute(tb, [f"a{renames[i]}" for i in range(len(pb))]), places


def _is_symbolic_int(v) -> bool:
    from kiln.capture.values.symbolic import SymbolicInt

    return isinstance(v, SymbolicInt) and v.python_type() is int


def _makes_float(op, a: Value, b: Value) -> bool:
    """Whether ``a op b`` is float arithmetic this module keeps symbolic: a SymbolicFloat on one side, or
    a symbolic int divided (``/``), or combined with a float constant."""
    if isinstance(a, SymbolicFloat) or isinstance(b, SymbolicFloat):
        return True
    if not (_is_symbolic_int(a) or _is_symbolic_int(b)):
        return False
    if op in (operator.truediv, operator.itruediv):
        return True
    return any(type(v) is ConstantValue and type(v.value) is float for v in (a, b))


def float_binary(tx, op, a: Value, b: Value) -> Value | None:
    """``a op b`` where one side is a SymbolicFloat and the other a number, a symbolic int or a
    SymbolicFloat, or a symbolic int divided or combined with a float (None: the usual rules, which make
    it a constant)."""
    if not _makes_float(op, a, b):
        return None
    op = _INPLACE.get(op, op)
    oa, ob = _operand(a), _operand(b)
    if oa is None or ob is None or (op not in _ARITHMETIC and op not in _COMPARISONS):
        return None
    output = tx.output
    ta, tb, places = _merge(oa, ob)
    if op in _COMPARISONS:
        result = op(oa[2], ob[2])
        return ConstantValue(predicate(output, f"({ta} {_COMPARISONS[op]} {tb})", places, result))
    try:
        value = op(oa[2], ob[2])
    except ArithmeticError:
        return None  # (raised by the usual path)
    if type(value) is not float:
        return None
    if op is operator.truediv and not isinstance(b, SymbolicFloat) and ob[2] == 0:
        return None
    if op is operator.truediv and (isinstance(b, SymbolicFloat) or _is_symbolic_int(b)):
        predicate(output, f"({tb} != 0)", places, True)  # Python raises ZeroDivisionError; a tensor gives inf
    def build():  # the 0-dim float64 tensor of a op b
        return output.call("call_function", op, [_as_double(output, v) for v in (a, b)], {})

    result = SymbolicFloat(output, value, f"({ta} {_ARITHMETIC[op]} {tb})", places, build)
    result.ratio = _exact_ratio(op, a, b)
    return result


def _exact_ratio(op, a: Value, b: Value):
    """(p, k) where ``a op b`` is the float of the rational p / k (p a symbolic int, k > 0 an int): ``p / k``
    and ``p / k.0``; ``p * c`` and ``c * p`` for c a power of two at most 1 (0.5, 0.25: exact scalings,
    ``int(n * 0.5)``). None otherwise."""
    p, c = (a, b) if _is_symbolic_int(a) else (b, a)
    if not _is_symbolic_int(p) or type(c) is not ConstantValue or type(c.value) not in (int, float):
        return None
    v = c.value
    if op is operator.truediv and p is a and v > 0 and float(v).is_integer() and v <= EXACT_INT:
        return (p, int(v))
    if op is operator.mul and type(v) is float and v > 0:
        mantissa, exponent = math.frexp(v)
        if mantissa == 0.5 and -52 <= exponent <= 1:
            return (p, 2 ** (1 - exponent))
    return None


def _as_double(output, v: Value):
    """An operand of a computed number's graph form: a SymbolicFloat's 0-dim float64 tensor, a symbolic
    int converted to one (exactly: ``_size_operand`` guarded it below 2**53), a constant as it is."""
    if isinstance(v, SymbolicFloat):
        return v.tensor()
    if _is_symbolic_int(v):
        return output.call("call_function", torch.scalar_tensor, [v], {"dtype": ConstantValue(torch.float64)})
    return v


def float_unary(tx, op, a: Value) -> Value | None:
    if not isinstance(a, SymbolicFloat) or op not in (operator.neg, operator.pos):
        return None
    if op is operator.pos:
        return a
    return SymbolicFloat(a.output, -a._value, f"(-{a.text})", a.places,
                         lambda: a.output.call("call_function", operator.neg, [a.tensor()], {}))


# functions the expressions call, by the names guards read them under (capture/guards.py's namespace)
GUARD_NAMES = {"___float": float, "___math_sqrt": math.sqrt}
_FUNCTIONS = {float: ("___float", None), math.sqrt: ("___math_sqrt", torch.sqrt)}


def _rounded_ratio(tx, fn, number: "SymbolicFloat") -> Value | None:
    """math.floor / math.ceil / int() and math.trunc / round() of ``p / k`` (a symbolic int over a positive int constant) as
    integer arithmetic on p: exact, since the float p / k is within half an ulp of the rational, and a
    rational that is not an integer is at least 1/k from one, which an ulp reaches only for |p| >= 2**53
    (``_size_operand`` guarded p below that). int() truncates toward zero: a floor where p >= 0, a ceiling
    where p <= 0, the sign guarded where no bound decides it."""
    from kiln.capture.values.ops import binary_op, unary_op

    p, k = number.ratio
    k = ConstantValue(k)
    floor = lambda v: binary_op(tx, operator.floordiv, v, k)  # noqa: E731
    ceil = lambda v: unary_op(tx, operator.neg, floor(unary_op(tx, operator.neg, v)))  # noqa: E731
    if fn is math.floor:
        return floor(p)
    if fn is math.ceil:
        return ceil(p)
    if fn is round:
        return _round_half_even(tx, p, k.value)
    env = p.example.node.env
    from kiln.lazy import sympy

    if env.static_value(sympy.Ge(p.example.node.expr, 0)) is True:
        return floor(p)
    if env.static_value(sympy.Le(p.example.node.expr, 0)) is True:
        return ceil(p)
    hint = p.example.node.hint
    if hint is None or env.is_unbacked(p.example.node.expr):
        return None
    # the sign decided by a guard (two entries at most), as a floor division's dividend is
    return floor(p) if env.evaluate(sympy.Ge(p.example.node.expr, 0), hint >= 0) else ceil(p)


def _round_half_even(tx, p, k: int) -> Value | None:
    """round(p / k) (Python's: half to even) as integer arithmetic on p, with q, r = divmod(p, k)
    (0 <= r < k): q, plus 1 where r > k / 2, plus q's parity where r == k / 2 (k even). A non-tie p / k is
    at least 1/(2k) from the nearest half, which the float's error (half an ulp) stays below while
    |p| < 2**52: guarded (else None: the usual path makes it a constant)."""
    from kiln.capture.values.ops import binary_op

    if guarded_size_place(tx.output, p, -2 ** 52 + 1, 2 ** 52) is None:
        return None
    c = ConstantValue
    op = lambda f, a, b: binary_op(tx, f, a, b)  # noqa: E731
    q, r = op(operator.floordiv, p, c(k)), op(operator.mod, p, c(k))
    h = k // 2
    if k % 2:  # no ties: up exactly when r >= h + 1
        return op(operator.add, q, op(operator.floordiv, op(operator.add, r, c(h)), c(k)))
    above = op(operator.floordiv, op(operator.add, r, c(h - 1)), c(k))  # r > h
    tie = op(operator.sub, op(operator.floordiv, op(operator.add, r, c(h)), c(k)), above)  # r == h
    return op(operator.add, op(operator.add, q, above), op(operator.mul, tie, op(operator.mod, q, c(2))))


def float_function(tx, fn, args: list[Value], kwargs: dict) -> Value | None:
    """``float(n)`` and ``math.sqrt(n)`` of a symbolic int or a SymbolicFloat (None: the usual call, which
    makes the number a constant). math.sqrt is IEEE's correctly rounded square root both in Python and
    as a float64 tensor op, so the graph's number is Python's."""
    if fn in (math.floor, math.ceil, math.trunc, int, round, operator.index) and len(args) == 1 and not kwargs \
            and _is_symbolic_int(args[0]):
        return args[0]  # (each gives the int itself: int(k.item()), int(n) of an int argument)
    if fn is bool and len(args) == 1 and not kwargs and _is_symbolic_int(args[0]):
        return ConstantValue(tx.truth(args[0]))  # (as ``if n:``: a guard on n != 0, not on the value)
    if fn in (math.floor, math.ceil, math.trunc, int, round) and len(args) == 1 and not kwargs \
            and isinstance(args[0], SymbolicFloat) and args[0].ratio is not None:
        return _rounded_ratio(tx, fn, args[0])
    entry = _FUNCTIONS.get(fn) if len(args) == 1 and not kwargs else None
    if entry is None:
        return None
    (arg,) = args
    if not (isinstance(arg, SymbolicFloat) or _is_symbolic_int(arg)):
        return None
    operand = _operand(arg)
    if operand is None:
        return None
    text, places, value = operand
    name, tensor_fn = entry
    try:
        result = fn(value)
    except (ArithmeticError, ValueError):
        return None  # (math.sqrt(-1.0): raised by the usual path)
    if fn is math.sqrt:
        predicate(tx.output, f"({text} >= 0)", places, True)  # (math.sqrt raises below 0; a tensor gives nan)
    output = tx.output

    def build():
        double = _as_double(output, arg)
        return double if tensor_fn is None else output.call("call_function", tensor_fn, [double], {})

    return SymbolicFloat(output, result, f"{name}({text})", places, build)


_TENSOR_OPS = {operator.add, operator.sub, operator.mul, operator.truediv,
               operator.iadd, operator.isub, operator.imul, operator.itruediv}


def tensor_float_binary(tx, op, a: Value, b: Value) -> Value | None:
    """``tensor op float`` (either order) with the float a graph input: the float enters as a 0-dim
    tensor, cast so that the result dtype is Python-scalar promotion's (None: the usual rules)."""
    from kiln.capture.values.tensors import TensorValue

    if not (isinstance(a, SymbolicFloat) or isinstance(b, SymbolicFloat)) or op not in _TENSOR_OPS:
        return None
    tensor, number = (a, b) if isinstance(a, TensorValue) else (b, a)
    if not isinstance(tensor, TensorValue) or not isinstance(number, SymbolicFloat):
        return None
    example = tensor.example
    if not isinstance(example, torch.Tensor) or example.dim() == 0 or example.is_complex():
        return None  # (a 0-dim tensor with a 0-dim operand promotes differently from a Python scalar)
    scalar = number.tensor()
    if not example.is_floating_point():  # int/bool tensor * float: the default dtype, as for a Python float
        scalar = tx.output.call("call_method", "to", [scalar, ConstantValue(torch.get_default_dtype())], {})
    if tensor is a:
        return tx.output.call("call_function", op, [tensor, scalar], {})
    # float op tensor: what Tensor.__radd__/__rmul__/__rsub__/__rtruediv__ run in eager (the tensor first)
    op = _INPLACE.get(op, op)  # (number += tensor rebinds the name to a new tensor)
    if op in (operator.add, operator.mul):
        return tx.output.call("call_function", op, [tensor, scalar], {})
    if op is operator.sub:
        return tx.output.call("call_function", torch.rsub, [tensor, scalar], {})
    inverse = tx.output.call("call_method", "reciprocal", [tensor], {})
    return tx.output.call("call_function", operator.mul, [inverse, scalar], {})


_METHODS = {"add": operator.add, "sub": operator.sub, "mul": operator.mul, "div": operator.truediv,
            "true_divide": operator.truediv, "add_": operator.iadd, "sub_": operator.isub, "mul_": operator.imul,
            "div_": operator.itruediv, "true_divide_": operator.itruediv}


def float_method(tx, tensor: Value, name: str, arg: Value) -> Value | None:
    """``x.mul(lr)``, ``x.add_(s)``, ...: what ``x * lr``, ``x += s`` give (None: the usual call)."""
    if not isinstance(arg, SymbolicFloat) or name not in _METHODS:
        return None
    return tensor_float_binary(tx, _METHODS[name], tensor, arg)
