"""Handlers that run loop bodies for analysis: memory accesses, printing, reference evaluation."""
from __future__ import annotations

import dataclasses
import functools
import math
from typing import Mapping

import sympy

from kiln.loopir.sizes import size
import torch

from kiln.loopir.index import FloorDiv, InRange, ModularIndexing, simplify_with_ranges, var
from kiln.loopir.nodes import ComputedBuffer, Pointwise, Reduction
from kiln.loopir.ops import OpsHandler, reduction_identity, result_dtype


@dataclasses.dataclass(frozen=True)
class Val:
    """A symbolic value with its dtype (what analysis handlers pass around)."""

    text: str
    dtype: torch.dtype

    def __str__(self) -> str:
        return self.text


def iteration_vars(buf: ComputedBuffer):
    """The index (and reduction index) a body is run with.

    Dims of size 1 get the constant 0; the others get ``x0, x1, ...`` (``r0, ...`` for reduction
    dims) numbered in order, so two nodes whose non-trivial dims agree share loop variables.
    """
    data = buf.data
    xs = _numbered("x", data.ranges)
    if isinstance(data, Reduction):
        return xs, _numbered("r", data.reduction_ranges)
    return xs, None


def _numbered(prefix, ranges):
    out, k = [], 0
    for n in ranges:
        if n == 1:
            out.append(sympy.Integer(0))
        else:
            out.append(var(prefix, k))
            k += 1
    return out


def effective_ranges(ranges) -> list[int]:
    """The sizes of a node's loops: its ranges without the size-1 dims."""
    return [size(n) for n in ranges if n != 1]


def var_ranges(buf: ComputedBuffer) -> dict:
    """Extent of each loop variable ``iteration_vars`` gives ``buf``'s body."""
    data = buf.data
    out = {var("x", d): n for d, n in enumerate(effective_ranges(data.ranges))}
    if isinstance(data, Reduction):
        out.update({var("r", d): n for d, n in enumerate(effective_ranges(data.reduction_ranges))})
    return out


class SimplifiedIndices:
    """Wraps a handler: every index the body passes to it is first simplified with the loop extents
    (``FloorDiv``/``ModularIndexing`` that views introduce fold away where the extents allow)."""

    def __init__(self, ops, ranges: dict):
        self._ops = ops
        self._ranges = ranges
        self._key = tuple(sorted((v.name, n) for v, n in ranges.items()))

    def _simplify(self, index):
        index = sympy.sympify(index)
        if not index.has(FloorDiv, ModularIndexing, InRange):
            return index
        return _simplify_cached(index, self._key)

    def load(self, name, index):
        return self._ops.load(name, self._simplify(index))

    def store(self, name, index, value):
        return self._ops.store(name, self._simplify(index), value)

    def store_reduction(self, name, index, value):
        return self._ops.store_reduction(name, self._simplify(index), value)

    def scatter_store(self, name, index, value, mode):
        return self._ops.scatter_store(name, self._simplify(index), value, mode)

    def index_expr(self, expr, dtype):
        return self._ops.index_expr(self._simplify(expr), dtype)

    def __getattr__(self, name):
        return getattr(self._ops, name)


@functools.lru_cache(maxsize=65536)
def _simplify_cached(index, key):
    ranges = {sympy.Symbol(name, integer=True, nonnegative=True): n for name, n in key}
    return simplify_with_ranges(index, ranges)


def run_body(buf: ComputedBuffer, ops) -> None:
    """Run ``buf``'s loop body (store included) under ``ops``, with simplified indices."""
    xs, rs = iteration_vars(buf)
    body = buf.store_body()
    ops = SimplifiedIndices(ops, var_ranges(buf))
    if rs is None:
        body(ops, xs)
    else:
        body(ops, xs, rs)


class _Symbolic(OpsHandler):
    """Shared rules of the analysis handlers: values are ``Val``s named by a counter."""

    def __init__(self, dtypes: Mapping[str, torch.dtype]):
        self.dtypes = dtypes
        self.count = 0
        self.lines: list[str] = []

    def _emit(self, text: str, dtype: torch.dtype) -> Val:
        name = f"tmp{self.count}"
        self.count += 1
        self.lines.append(f"{name} = {text}")
        return Val(name, dtype)

    def unary(self, op, x):
        return self._emit(f"{op}({x})", result_dtype(op, x.dtype))

    def binary(self, op, a, b):
        return self._emit(f"{op}({a}, {b})", result_dtype(op, a.dtype, b.dtype))

    def load(self, name, index):
        return self._emit(f"load({name}, {index})", self.dtypes[name])

    def store(self, name, index, value):
        self.lines.append(f"store({name}, {index}, {value})")

    store_reduction = store

    def scatter_store(self, name, index, value, mode):
        self.lines.append(f"scatter_store({name}, {index}, {value}, {mode})")

    def constant(self, value, dtype):
        return self._emit(f"constant({value!r}, {_short(dtype)})", dtype)

    def index_expr(self, expr, dtype):
        return self._emit(f"index_expr({expr}, {_short(dtype)})", dtype)

    def to_dtype(self, x, dtype):
        return self._emit(f"to_dtype({x}, {_short(dtype)})", dtype)

    def where(self, c, a, b):
        return self._emit(f"where({c}, {a}, {b})", a.dtype)

    def reduction(self, kind, value, dtype):
        out = torch.int64 if kind in ("argmax", "argmin") else dtype
        return self._emit(f"reduction({kind}, {value})", out)

    def scan(self, kind, value, dim):
        from kiln.loopir.scan import scan_result_dtype

        return self._emit(f"scan({kind}, {value}, dim={dim})", scan_result_dtype(kind, value.dtype))

    def masked(self, mask, body, other):
        start = len(self.lines)
        value = body()
        self.lines[start:] = [f"masked {mask}:"] + ["    " + line for line in self.lines[start:]]
        return self._emit(f"masked({mask}, {value}, {other!r})", value.dtype)

    def indirect_indexing(self, value, size, wrap_negative=True):
        sym = indirect_symbol(self.count)
        self.count += 1
        self.lines.append(f"{sym} = indirect_indexing({value}, {size}{'' if wrap_negative else ', no wrap'})")
        return sym


def indirect_symbol(n: int) -> sympy.Symbol:
    """The index symbol an ``indirect_indexing`` call returns (a loaded value, never a loop variable)."""
    return sympy.Symbol(f"ind{n}", integer=True, nonnegative=True)


def _short(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


class ReadsWrites(_Symbolic):
    """Records every load and store (buffer name, index expression) and counts math ops.

    Values carry no text (printing sympy index expressions is slow, and nothing reads it here)."""

    def __init__(self, dtypes):
        super().__init__(dtypes)
        self.reads: list[tuple[str, sympy.Expr]] = []
        self.writes: list[tuple[str, sympy.Expr]] = []
        self.values: list[sympy.Expr] = []  # expressions computed as values (``index_expr``: x * n of a size)

    def _emit(self, text: str, dtype: torch.dtype) -> Val:
        self.count += 1
        return Val("", dtype)

    def load(self, name, index):
        self.reads.append((name, sympy.sympify(index)))
        return self._emit("", self.dtypes[name])

    def index_expr(self, expr, dtype):
        self.values.append(sympy.sympify(expr))
        return self._emit("", dtype)

    def store(self, name, index, value):
        self.writes.append((name, sympy.sympify(index)))

    store_reduction = store

    def scatter_store(self, name, index, value, mode):
        # an update reads the buffer it writes: it runs after the buffer's earlier writers
        self.reads.append((name, sympy.sympify(index)))
        self.writes.append((name, sympy.sympify(index)))


class Printer(_Symbolic):
    """A readable listing of a body, one op per line."""


def format_buffer(buf: ComputedBuffer, dtypes: Mapping[str, torch.dtype]) -> str:
    p = Printer(dtypes)
    run_body(buf, p)
    data = buf.data
    head = f"{buf.describe()} = "
    if isinstance(data, Pointwise):
        head += f"pointwise over {list(data.ranges)}"
    elif hasattr(data, "describe"):  # kiln/loopir/scatter.py
        head += data.describe()
    else:
        head += f"reduction {data.kind} over {list(data.ranges)} x {list(data.reduction_ranges)}"
    return "\n".join([head] + ["    " + line for line in p.lines])


# ------------------------------------------------------------------------------ reference evaluation

_TORCH_UNARY = {
    "relu": torch.relu, "square": torch.square, "round": torch.round, "logical_not": torch.logical_not,
    "bitwise_not": torch.bitwise_not, "sign": torch.sign, "signbit": torch.signbit,
}
_TORCH_BINARY = {
    "truediv": torch.true_divide, "floordiv": lambda a, b: torch.div(a, b, rounding_mode="floor"),
    "truncdiv": lambda a, b: torch.div(a, b, rounding_mode="trunc"), "mod": torch.remainder,
    "lshift": torch.bitwise_left_shift, "rshift": torch.bitwise_right_shift,
}


def eval_index(expr, env: Mapping[sympy.Symbol, torch.Tensor]):
    """Evaluate an index expression with tensors (or ints) bound to its symbols."""
    if expr.is_Integer:
        return int(expr)
    if expr.is_Symbol:
        return env[expr]
    args = [eval_index(a, env) for a in expr.args]
    if isinstance(expr, sympy.Add):
        return sum(args[1:], args[0])
    if isinstance(expr, sympy.Mul):
        return math.prod(args[1:], start=args[0])
    if isinstance(expr, FloorDiv):
        return args[0] // args[1]
    if isinstance(expr, ModularIndexing):
        return (args[0] // args[1]) % args[2]
    if isinstance(expr, InRange):
        return args[0]
    if isinstance(expr, sympy.Pow) and expr.args[1].is_Integer and int(expr.args[1]) > 0:
        return args[0] ** int(expr.args[1])
    raise NotImplementedError(f"cannot evaluate index expression {expr}")


class Evaluator(OpsHandler):
    """Runs a body over its whole iteration space at once, with torch tensors as values.

    Loads gather from flat views of the given buffers; stores scatter into them. Used as the
    reference path of the loop IR in tests.
    """

    def __init__(self, buffers: Mapping[str, torch.Tensor], env: Mapping[sympy.Symbol, torch.Tensor], rdims: int = 0):
        self.buffers = buffers  # name -> flat tensor over the buffer's storage
        self.env = dict(env)
        self.rdims = rdims  # trailing grid dims that are reduction dims
        self.mask = None  # inside ``masked``: where the body's values are used
        self.indirect = 0

    def _grid(self, t):
        return t

    def unary(self, op, x):
        fn = _TORCH_UNARY.get(op) or getattr(torch, op)
        return fn(x)

    def binary(self, op, a, b):
        fn = _TORCH_BINARY.get(op) or getattr(torch, op)
        return fn(a, b)

    def load(self, name, index):
        idx = eval_index(sympy.sympify(index), self.env)
        flat = self.buffers[name]
        if self.mask is not None:  # masked-off positions may be out of bounds: read element 0 there
            idx = torch.where(self.mask, torch.as_tensor(idx), 0)
            if flat.numel() == 0:
                return torch.zeros(idx.shape, dtype=flat.dtype)
        return flat[idx]

    def masked(self, mask, body, other):
        outer = self.mask
        self.mask = mask if outer is None else torch.logical_and(outer, mask)
        try:
            value = torch.as_tensor(body())
        finally:
            self.mask = outer
        return torch.where(mask, value, torch.tensor(other, dtype=value.dtype))

    def indirect_indexing(self, value, size, wrap_negative=True):
        v = torch.as_tensor(value).to(torch.int64)
        if wrap_negative:
            v = torch.where(v < 0, v + size, v)
        bad = (v < 0) | (v >= size)
        if self.mask is not None:
            bad = bad & self.mask
            v = torch.where(self.mask, v, 0)
        if bool(bad.any()):
            raise IndexError(f"index out of bounds for a dimension of size {size}")
        sym = indirect_symbol(self.indirect)
        self.indirect += 1
        self.env[sym] = v
        return sym

    def store(self, name, index, value):
        idx = eval_index(sympy.sympify(index), self.env)
        flat = self.buffers[name]
        if isinstance(idx, int):
            flat[idx] = value.reshape(-1)[0] if isinstance(value, torch.Tensor) else value
            return
        idx, value = torch.broadcast_tensors(torch.as_tensor(idx), torch.as_tensor(value, dtype=flat.dtype))
        flat[idx.reshape(-1)] = value.reshape(-1).to(flat.dtype)

    store_reduction = store

    def scatter_store(self, name, index, value, mode):
        """All elements at once: ``add`` accumulates duplicates, ``mul/max/min`` reduce them (NaN
        propagating), ``store`` keeps one of them (tests use distinct positions there)."""
        flat = self.buffers[name]
        idx = torch.as_tensor(eval_index(sympy.sympify(index), self.env))
        idx, value = torch.broadcast_tensors(idx, torch.as_tensor(value).to(flat.dtype))
        idx, value = idx.reshape(-1), value.reshape(-1)
        if mode == "store":
            flat[idx] = value
        elif mode == "add":
            flat.index_put_((idx,), value, accumulate=True)
        else:
            flat.scatter_reduce_(0, idx, value, {"mul": "prod", "max": "amax", "min": "amin"}[mode])

    def constant(self, value, dtype):
        return torch.tensor(value, dtype=dtype)

    def index_expr(self, expr, dtype):
        return torch.as_tensor(eval_index(sympy.sympify(expr), self.env)).to(dtype)

    def to_dtype(self, x, dtype):
        return torch.as_tensor(x).to(dtype)

    def where(self, c, a, b):
        return torch.where(c, a, b)

    def scan(self, kind, value, dim):
        from kiln.loopir.scan import evaluate_scan

        return evaluate_scan(kind, torch.as_tensor(value).expand(self.env_shape), dim)

    def reduction(self, kind, value, dtype):
        value = torch.as_tensor(value).to(dtype)
        ndim = len(self.env_shape)
        value = value.expand(self.env_shape) if value.dim() < ndim or value.shape != self.env_shape else value
        dims = tuple(range(ndim - self.rdims, ndim))
        if not dims:
            return value
        flat = value.flatten(ndim - self.rdims)
        if kind == "sum":
            return flat.sum(-1, dtype=dtype)
        if kind == "prod":
            return flat.prod(-1, dtype=dtype)
        if kind == "max":
            return flat.amax(-1)
        if kind == "min":
            return flat.amin(-1)
        if kind == "argmax":
            return flat.argmax(-1)
        if kind == "argmin":
            return flat.argmin(-1)
        if kind == "any":
            return flat.any(-1)
        if kind == "all":
            return flat.all(-1)
        raise ValueError(kind)


def evaluate_buffer(buf: ComputedBuffer, buffers: Mapping[str, torch.Tensor]) -> None:
    """Compute ``buf`` with torch into ``buffers[buf.name]`` (a flat tensor) from the other buffers."""
    data = buf.data
    if hasattr(data, "evaluate"):  # a node kind with its own reference (loopir/sort.py)
        data.evaluate(buf, buffers)
        return
    ranges = list(data.ranges)
    rranges = list(data.reduction_ranges) if isinstance(data, Reduction) else []
    shape = ranges + rranges
    ndim = len(shape)
    env = {}
    xs, rs = iteration_vars(buf)
    for d, v in enumerate(xs + (rs or [])):
        if isinstance(v, sympy.Symbol):
            view = [1] * ndim
            view[d] = shape[d]
            env[v] = torch.arange(shape[d]).view(view)
    ev = Evaluator(buffers, env, rdims=len(rranges))
    ev.env_shape = torch.Size(shape)
    if isinstance(data, Reduction) and rranges:
        # the reduced value lives on the grid without reduction dims; bind x vars accordingly
        def store_env():
            out = {}
            for d, v in enumerate(xs):
                if isinstance(v, sympy.Symbol):
                    view = [1] * len(ranges)
                    view[d] = ranges[d]
                    out[v] = torch.arange(ranges[d]).view(view)
            return out

        value = ev.reduction(data.kind, data.body(ev, xs, rs), data.src_dtype)
        if data.kind not in ("argmax", "argmin") and data.src_dtype != data.dtype:
            value = value.to(data.dtype)
        ev.env = store_env()
        from kiln.loopir.index import linear_index

        ev.store(buf.name, linear_index(xs, buf.stride), value)
        return
    run_body(buf, ev) if rs is None else buf.store_body()(ev, xs, rs)
