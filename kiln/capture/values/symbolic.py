"""Sizes that are symbols: `x.shape[0]`, `x.size(1) * 4`, `x.numel()` of a tensor with dynamic dims.

A ``SymbolicInt`` is an FX node of the graph that computes the number at run time (``x.size(0)``,
``operator.mul(size, 4)``) and the ``torch.SymInt`` (or SymBool/SymFloat) it has while tracing
(``kiln.fake.symbolic``). What it can be used for without knowing its value stays symbolic:

- arithmetic and comparisons with ints and other symbols: more graph nodes (`values/ops.py`);
- arguments of tensor operations (`view(b, -1)`, `torch.arange(n)`, slices): the node is the argument;
- the truth of a comparison (`if n > 16:`): a *guard* on the expression (`s0 > 16`), not on the value.

Everything else that reads the number (a ``range``, a list index, a dict key, a returned int, a
string) goes through ``value``, which makes it a constant with a guard that it stays so
(``Eq(s0, 8)``): sound by construction, as ``scalars.py``'s deferred values are.
"""
from __future__ import annotations

import operator

import torch

from kiln.capture.values.base import ConstantValue, Value
from kiln.capture.values.containers import ListValue, TupleValue
from kiln.capture.values.scalars import _KnownScalar
from kiln.fake.symbolic import SYMBOLIC_SCALARS, is_symbolic

# operators that keep a size symbolic (others, such as true division, specialize their operands)
ARITHMETIC = {operator.add, operator.sub, operator.mul, operator.floordiv, operator.mod,
              operator.iadd, operator.isub, operator.imul, operator.ifloordiv, operator.imod}
COMPARISONS = {operator.eq, operator.ne, operator.lt, operator.le, operator.gt, operator.ge}
_TYPES = {torch.SymInt: int, torch.SymBool: bool, torch.SymFloat: float}


class SymbolicInt(ConstantValue):
    """A number computed from symbolic sizes: an FX node plus the SymInt/SymBool it is while tracing."""

    def __init__(self, node, example, output=None):
        self.node = node
        self.example = example
        self.source = None
        self.output = output  # the OutputGraph: its dynamic inputs are where the sizes are read again

    @property
    def value(self):
        """The number as a Python constant: guarded to stay this value (``Eq(expr, hint)``)."""
        return _TYPES[type(self.example)](self.example)

    def python_type(self) -> type:
        return _TYPES[type(self.example)]

    def truth(self, tx) -> bool:
        return bool(self.example)  # a guard on the expression's truth, not on its value

    def reconstruct(self, cg) -> None:
        """Handed on (returned, stored, passed to a resume function): computed again from the inputs'
        sizes at run time, so the value follows the sizes without a guard on it."""
        env = self.example.node.env
        if env.is_unbacked(self.example.node.expr):  # (not computable from the inputs: traced again, broken)
            raise env.unbacked_error(f"handing on the data-dependent number {self.example.node.expr}")
        if self.output is None or self.python_type() is not int or len(env.inputs) != len(self.output.guards.dynamic_inputs):
            return super().reconstruct(cg)  # (a constant, guarded)
        fn, used = env.expr_function(self.example.node.expr)
        cg.prepare_call(fn)
        for i in used:
            self.output.guards.dynamic_inputs[i].emit(cg)
        cg.call(len(used))

    def __repr__(self) -> str:
        return f"SymbolicInt({self.node.name}: {self.example})"


def is_symbolic_value(v: Value) -> bool:
    return isinstance(v, SymbolicInt)


def _plain_number(v: Value) -> bool:
    """An int or bool constant: a literal, or one read from the frame (``self.max_len``; its value is
    then guarded, as any constant that takes part in a size is)."""
    if isinstance(v, _KnownScalar):
        return v.python_type() in (int, bool)
    return type(v) is ConstantValue and type(v.value) in (int, bool)


def _as_int(v: Value) -> Value:
    if not isinstance(v, SymbolicInt) and _plain_number(v) and type(v.as_constant()) is bool:
        return ConstantValue(int(v.as_constant()))
    return v


def int_like(v: Value) -> bool:
    """A symbolic int or an int/bool constant: an operand size arithmetic keeps symbolic."""
    return (isinstance(v, SymbolicInt) and v.python_type() is int) or _plain_number(v)


def symbolic_binary(tx, op, a: Value, b: Value) -> Value | None:
    """`a op b` kept symbolic where one side is a SymbolicInt and the other an int or SymbolicInt; None
    where that does not apply (the caller's rules, which specialize, take over)."""
    if not (isinstance(a, SymbolicInt) or isinstance(b, SymbolicInt)):
        return None
    if not all(isinstance(v, SymbolicInt) or _plain_number(v) for v in (a, b)):
        return None
    if any(isinstance(v, SymbolicInt) and v.python_type() is not int for v in (a, b)):
        return None
    # a bool operand is the int it equals (n == True is n == 1, n + True is n + 1); as a sympy value a
    # bool would compare unequal to every int
    a, b = (_as_int(v) for v in (a, b))
    shifted = _bits_as_arithmetic(op, a, b)
    if shifted is not None:
        op, b = shifted
    elif op in _BITWISE:
        return _bitwise_by_bits(tx, op, *((a, b) if isinstance(a, SymbolicInt) else (b, a)))
    if op in (operator.pow, operator.ipow):
        # n ** k, k a non-negative int constant: an int for every int n (a negative or symbolic
        # exponent gives floats: specialized by the caller)
        k = b.value if isinstance(a, SymbolicInt) and _plain_number(b) and not isinstance(b, SymbolicInt) else None
        if type(k) is not int or not 0 <= k <= _MAX_POWER:
            return None
        if k == 0:
            return ConstantValue(1)
        if not -_INT64 < int(a.example.node.hint) ** k < _INT64:
            return None
        power = tx.output.call("call_function", operator.pow, [a, b], {})
        # kernels compute the expression in int64 (a product of k factors, each partial product no larger
        # than the power in magnitude): guarded to fit, a later size beyond recompiles
        from kiln.capture.values.symbolic_float import guarded_size_place

        return power if guarded_size_place(tx.output, power, -_INT64 + 1, _INT64) is not None else None
    if op not in ARITHMETIC and op not in COMPARISONS:
        return None
    plain = {operator.iadd: operator.add, operator.isub: operator.sub, operator.imul: operator.mul,
             operator.ifloordiv: operator.floordiv, operator.imod: operator.mod}.get(op, op)
    try:
        return tx.output.call("call_function", plain, [a, b], {})
    except ZeroDivisionError as exc:  # (n // (n - m) with n and m one size: Python's own error, as the program's)
        from kiln.capture.values.exceptions import raise_as_traced

        raise_as_traced(exc, f"{a} {plain.__name__} {b}")


_MAX_POWER = 8  # (a product of that many factors wherever the expression is printed into code)
_INT64 = 2 ** 63

_SHIFTS = {operator.rshift: operator.floordiv, operator.irshift: operator.floordiv,
           operator.lshift: operator.mul, operator.ilshift: operator.mul}


def _bits_as_arithmetic(op, a: Value, b: Value):
    """(op, b) of the arithmetic a bit operation on an int equals for every int a: ``a >> k`` is
    ``a // 2**k`` and ``a << k`` is ``a * 2**k`` (k >= 0), ``a & (2**j - 1)`` is ``a % 2**j`` (Python's
    ints are two's complement of unbounded width, so these hold for negative a too). None otherwise."""
    if not isinstance(a, SymbolicInt) or isinstance(b, SymbolicInt) or not _plain_number(b):
        return None
    k = b.value
    if op in _SHIFTS and type(k) is int and 0 <= k < 63:
        return _SHIFTS[op], ConstantValue(1 << k)
    if op in (operator.and_, operator.iand) and type(k) is int and k >= 0 and (k + 1) & k == 0:
        return operator.mod, ConstantValue(k + 1)
    return None


_BITWISE = {operator.and_: "and", operator.iand: "and", operator.or_: "or", operator.ior: "or",
            operator.xor: "xor", operator.ixor: "xor"}
_MAX_BITS = 8  # set bits of the constant: each is a term of the expression


def _bitwise_by_bits(tx, op, a: Value, b: Value) -> Value | None:
    """``a & k``, ``a | k``, ``a ^ k`` of a symbolic int and a non-negative int constant with few set
    bits, through bit j of a, ``(a // 2**j) % 2`` (two's complement of unbounded width, as Python's ints:
    negative a too): ``&`` keeps ``sum(2**j * bit_j)``, ``|`` adds ``2**j * (1 - bit_j)`` to a, ``^`` adds
    ``2**j * (1 - 2 * bit_j)``. None otherwise (the caller specializes)."""
    k = b.value if _plain_number(b) and not isinstance(b, SymbolicInt) else None
    if type(k) is not int or k < 0 or bin(k).count("1") > _MAX_BITS:
        return None
    kind = _BITWISE[op]

    def arith(f, x, y):
        return tx.output.call("call_function", f, [x, y], {})

    result = a if kind != "and" else None
    for j in range(k.bit_length()):
        if not (k >> j) & 1:
            continue
        bit = arith(operator.mod, arith(operator.floordiv, a, ConstantValue(1 << j)), ConstantValue(2))
        if kind == "and":
            term = arith(operator.mul, bit, ConstantValue(1 << j))
        elif kind == "or":
            term = arith(operator.mul, arith(operator.sub, ConstantValue(1), bit), ConstantValue(1 << j))
        else:
            term = arith(operator.sub, ConstantValue(1 << j), arith(operator.mul, bit, ConstantValue(2 << j)))
        result = term if result is None else arith(operator.add, result, term)
    return ConstantValue(0) if result is None else result


def symbolic_divmod(tx, a: Value, b: Value) -> Value | None:
    """divmod(a, b) of a symbolic int and an int: (a // b, a % b), both symbolic."""
    if not (isinstance(a, SymbolicInt) or isinstance(b, SymbolicInt)) or not (int_like(a) and int_like(b)):
        return None
    q = symbolic_binary(tx, operator.floordiv, a, b)
    r = symbolic_binary(tx, operator.mod, a, b)
    return None if q is None or r is None else TupleValue([q, r])


def symbolic_unary(tx, op, a: Value) -> Value | None:
    if not (isinstance(a, SymbolicInt) and a.python_type() is int):
        return None
    if op is operator.pos:
        return a
    if op is operator.neg:
        return tx.output.call("call_function", operator.neg, [a], {})
    if op is operator.abs:  # abs(n - 10): a guard on the sign (two entries at most), not on the value
        negative = symbolic_binary(tx, operator.lt, a, ConstantValue(0))
        return tx.output.call("call_function", operator.neg, [a], {}) if negative.truth(tx) else a
    return None


def symbolic_min_max(tx, fn, args: list[Value]):
    """``min``/``max`` of ints where one is a symbolic size, given as arguments (``min(n, 4)``) or as one
    sequence (``min(x.shape)``): the item the comparisons pick, each comparison a guard (one entry per
    outcome), the picked item still symbolic. Python's order: the first of equal ones. None for anything
    else (keys and defaults are the caller's)."""
    items = args
    if len(args) == 1 and isinstance(args[0], (TupleValue, ListValue)):
        items = list(args[0].elements)
    if len(items) < 2 or not any(isinstance(a, SymbolicInt) for a in items) or not all(int_like(a) for a in items):
        return None
    beats = operator.lt if fn is min else operator.gt
    best = items[0]
    for a in items[1:]:
        test = symbolic_binary(tx, beats, a, best)
        if test.truth(tx) if test is not None else beats(a.as_constant(), best.as_constant()):
            best = a
    return best


def symbolic_in(tx, item: Value, container: Value) -> bool | None:
    """``n in (1, 2, 3)`` for a symbolic int and a constant tuple, list, set or frozenset of ints: an
    equality test per element in order, each a guard (``Ne(s0, 1)``), as the container's own search
    compares (for ints, hashing agrees with ==). None otherwise."""
    if not (isinstance(item, SymbolicInt) and item.python_type() is int) or type(container) is not ConstantValue:
        return None
    elements = container.value
    if type(elements) not in (tuple, list, set, frozenset) or not all(type(e) in (int, bool) for e in elements):
        return None
    for e in (sorted(elements) if type(elements) in (set, frozenset) else elements):
        if symbolic_binary(tx, operator.eq, item, ConstantValue(e)).truth(tx):
            return True
    return False


def size_of_items(items: list[Value]) -> Value | None:
    """``torch.Size([n, 2])`` of ints where one is symbolic: a SizeValue (torch.Size takes ints only)."""
    if not any(isinstance(v, SymbolicInt) for v in items) or not all(int_like(v) for v in items):
        return None
    if any(type(v) is ConstantValue and type(v.value) is bool for v in items):
        return None  # (torch.Size([True]): its own conversion)
    return SizeValue(list(items))


def concrete(value):
    """``value`` with every symbolic number made a constant (each guarded to stay so)."""
    if isinstance(value, SYMBOLIC_SCALARS):
        return _TYPES[type(value)](value)
    if isinstance(value, torch.Size):
        return torch.Size([int(v) for v in value])
    if type(value) in (tuple, list):
        return type(value)(concrete(v) for v in value)
    return value


def has_symbolic(value) -> bool:
    if isinstance(value, SYMBOLIC_SCALARS):
        return True
    if isinstance(value, (tuple, list)):
        return any(isinstance(v, SYMBOLIC_SCALARS) for v in value)
    return False


def wrap_symbolic(output, node, example) -> Value:
    """The value of a graph node whose result is a SymInt/SymBool: symbolic where it depends on sizes."""
    if not is_symbolic(example):
        return ConstantValue(concrete(example))
    return SymbolicInt(node, example, output)


class SizeValue(TupleValue):
    """A ``torch.Size`` some of whose items are symbolic: slicing and ``+`` keep it a Size (as torch's do)."""

    def python_type(self) -> type:
        return torch.Size

    def as_constant(self):
        return torch.Size([v.as_constant() for v in self.elements])

    def getitem(self, tx, index: Value) -> Value:
        if index.is_constant() and isinstance(index.as_constant(), slice):
            return SizeValue(self.elements[index.as_constant()])
        return super().getitem(tx, index)

    def reconstruct(self, cg) -> None:
        cg.prepare_call(torch.Size)
        cg.reconstruct(TupleValue(self.elements))
        cg.call(1)


def concat_sizes(a: Value, b: Value) -> Value | None:
    """``a + b`` where one side is a SizeValue and the other a tuple (torch.Size's __add__/__radd__)."""
    if not (isinstance(a, SizeValue) or isinstance(b, SizeValue)):
        return None
    if not all(isinstance(v, TupleValue) or (type(v) is ConstantValue and type(v.value) in (tuple, torch.Size))
               for v in (a, b)):
        return None
    items = []
    for v in (a, b):
        items += v.elements if isinstance(v, TupleValue) else [ConstantValue(x) for x in v.value]
    return SizeValue(items)


def tensor_of_sizes(tx, fn, args: list[Value], kwargs: dict) -> Value | None:
    """``torch.tensor(n)``, ``torch.tensor(x.shape)``, ``torch.as_tensor([n, 2 * m])`` where the data holds
    symbolic sizes (None: the usual call, which makes them constants). The data must be a symbolic int
    or a flat list/tuple of ints with one at least; the result is what torch.tensor gives for Python
    ints: int64 (or ``dtype``), on ``device`` or the default device, built from 0-dim tensors of each
    number (``scalar_tensor``, the same int-to-dtype conversion) stacked."""
    if fn not in (torch.tensor, torch.as_tensor) or len(args) != 1 or set(kwargs) - {"dtype", "device", "requires_grad"}:
        return None
    data = args[0]
    items = [data] if isinstance(data, SymbolicInt) else list(getattr(data, "elements", None) or [])
    if not items or not any(isinstance(v, SymbolicInt) for v in items) or not all(int_like(v) for v in items):
        return None
    if any(type(v) is ConstantValue and type(v.value) is bool for v in items):
        return None  # (bools among ints: torch.tensor's own promotion rules)
    if not isinstance(data, (SymbolicInt, TupleValue)) and type(data).__name__ != "ListValue":
        return None
    options = {k: v for k, v in kwargs.items()}
    grad = options.pop("requires_grad", None)
    if grad is not None and not (grad.is_constant() and grad.as_constant() is False):
        return None
    if any(not v.is_constant() for v in options.values()):
        return None
    dtype = options.get("dtype")
    dtype = dtype.as_constant() if dtype is not None else None
    if dtype is None:
        options["dtype"] = ConstantValue(torch.int64)
    elif not isinstance(dtype, torch.dtype) or dtype.is_complex or dtype == torch.bool:
        return None
    from kiln.capture.values.symbolic_float import guarded_size_place

    for v in items:  # (torch.tensor raises ValueError for an int outside int64; scalar_tensor another error)
        if isinstance(v, SymbolicInt) and guarded_size_place(tx.output, v, -2 ** 63, 2 ** 63) is None:
            return None
    scalars = [tx.output.call("call_function", torch.scalar_tensor, [v], dict(options)) for v in items]
    if isinstance(data, SymbolicInt):
        return scalars[0]
    return tx.output.call("call_function", torch.stack, [TupleValue(scalars)], {})
