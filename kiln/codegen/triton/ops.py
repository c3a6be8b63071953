"""TritonOps: the ``ops`` handler that turns a loop body into Triton statements.

Each op becomes one ``tmpN = <expr>`` line; a line already emitted with the same text is reused
(common subexpressions). Values know their dtype and which block axes they span (``"x"``: the
rows/elements a program handles, ``"r"``: the inner or reduction chunk), so masks and reductions
only involve the axes a value really has. Math on float16/bfloat16 never reaches here: lowerings
compute in float32 and convert at loads and stores, as ATen does.
"""
from __future__ import annotations

import dataclasses
import math

import sympy
import torch

from kiln.codegen.common import nonempty_test, print_index_py
from kiln.loopir.sizes import exact_sizes, is_symbolic
from kiln.loopir.ops import OpsHandler, reduction_identity, result_dtype

TL_DTYPE = {
    torch.float32: "tl.float32", torch.float64: "tl.float64", torch.float16: "tl.float16",
    torch.bfloat16: "tl.bfloat16", torch.int64: "tl.int64", torch.int32: "tl.int32", torch.int16: "tl.int16",
    torch.int8: "tl.int8", torch.uint8: "tl.uint8", torch.bool: "tl.int1",
}

# float unary ops: template over the operand ``{0}``
_UNARY_FLOAT = {
    "exp": "tl.exp({0})", "exp2": "tl.exp2({0})", "expm1": "libdevice.expm1({0})", "log": "tl.log({0})",
    "log2": "tl.log2({0})", "log10": "libdevice.log10({0})", "log1p": "libdevice.log1p({0})",
    "sqrt": "tl.sqrt_rn({0})", "rsqrt": "libdevice.rsqrt({0})", "reciprocal": "1.0 / {0}",
    "sin": "libdevice.sin({0})", "cos": "libdevice.cos({0})", "tan": "libdevice.tan({0})",
    "asin": "libdevice.asin({0})", "acos": "libdevice.acos({0})", "atan": "libdevice.atan({0})",
    "sinh": "libdevice.sinh({0})", "cosh": "libdevice.cosh({0})", "tanh": "libdevice.tanh({0})",
    "asinh": "libdevice.asinh({0})", "acosh": "libdevice.acosh({0})", "atanh": "libdevice.atanh({0})",
    "sigmoid": "kh.sigmoid({0})", "erf": "tl.erf({0})", "erfc": "libdevice.erfc({0})",
    "erfinv": "libdevice.erfinv({0})", "lgamma": "libdevice.lgamma({0})", "floor": "tl.floor({0})",
    "ceil": "tl.ceil({0})", "trunc": "libdevice.trunc({0})", "round": "libdevice.nearbyint({0})",
    "frac": "{0} - libdevice.trunc({0})", "isnan": "{0} != {0}", "isinf": "tl.abs({0}) == float('inf')",
    "isfinite": "tl.abs({0}) < float('inf')", "signbit": "libdevice.signbit({0}) != 0", "sign": "kh.sign({0})",
}
_UNARY_INT = {
    "floor": "{0}", "ceil": "{0}", "trunc": "{0}", "round": "{0}", "frac": "{0} * 0", "isnan": "{0} != {0}",
    "isinf": "{0} != {0}", "isfinite": "{0} == {0}", "signbit": "{0} < 0", "sign": "kh.sign({0})",
}
_UNARY_ANY = {
    "neg": "-{0}", "abs": "tl.abs({0})", "relu": "tl.where({0} < 0, 0, {0})", "square": "{0} * {0}",
}
_BINARY = {
    "add": "{0} + {1}", "sub": "{0} - {1}", "mul": "{0} * {1}",
    "bitwise_and": "{0} & {1}", "bitwise_or": "{0} | {1}", "bitwise_xor": "{0} ^ {1}",
    "eq": "{0} == {1}", "ne": "{0} != {1}", "lt": "{0} < {1}", "le": "{0} <= {1}", "gt": "{0} > {1}",
    "ge": "{0} >= {1}", "logical_and": "{0} & {1}", "logical_or": "{0} | {1}", "logical_xor": "{0} ^ {1}",
}
_BINARY_FLOAT = {
    "truediv": "{0} / {1}", "floordiv": "kh.floordiv_float({0}, {1})", "truncdiv": "libdevice.trunc(tl.div_rn({0}, {1}))",
    "mod": "kh.mod_float({0}, {1})", "fmod": "libdevice.fmod({0}, {1})", "pow": "libdevice.pow({0}, {1})",
    "maximum": "kh.maximum({0}, {1})", "minimum": "kh.minimum({0}, {1})", "fmax": "kh.fmax({0}, {1})",
    "fmin": "kh.fmin({0}, {1})", "atan2": "libdevice.atan2({0}, {1})", "hypot": "libdevice.hypot({0}, {1})",
    "copysign": "libdevice.copysign({0}, {1})", "nextafter": "libdevice.nextafter({0}, {1})",
}
_BINARY_INT = {
    "floordiv": "kh.floordiv_int({0}, {1})", "truncdiv": "kh.truncdiv_int({0}, {1})", "mod": "kh.mod_int({0}, {1})",
    "fmod": "kh.fmod_int({0}, {1})", "pow": "kh.pow_int({0}, {1})", "maximum": "tl.maximum({0}, {1})",
    "minimum": "tl.minimum({0}, {1})", "fmax": "tl.maximum({0}, {1})", "fmin": "tl.minimum({0}, {1})",
    "lshift": "kh.lshift({0}, {1}, {bits})", "rshift": "kh.rshift({0}, {1}, {bits})",
}
_BINARY_BOOL = {"maximum": "{0} | {1}", "minimum": "{0} & {1}", "fmax": "{0} | {1}", "fmin": "{0} & {1}"}

# reduction kind -> (combine for one step, final reduce over axis 1)
_COMBINE = {
    "sum": "{acc} + {v}", "prod": "{acc} * {v}", "max": "kh.maximum({acc}, {v})", "min": "kh.minimum({acc}, {v})",
    "any": "{acc} | {v}", "all": "{acc} & {v}",
}
_REDUCE_FN = {"sum": "kh.add", "prod": "kh.mul", "max": "kh.maximum", "min": "kh.minimum",
              "any": "kh.logical_or", "all": "kh.logical_and"}
# Triton's own combine functions where NaN does not matter: the interpreter runs these with numpy
_REDUCE_INT = {"sum": "tl.reduce({0}, 1, tl.standard._sum_combine)",
               "max": "tl.reduce({0}, 1, tl.standard._elementwise_max)",
               "min": "tl.reduce({0}, 1, tl.standard._elementwise_min)"}


@dataclasses.dataclass(frozen=True)
class TVal:
    name: str
    dtype: torch.dtype
    axes: frozenset = frozenset()  # block axes the value spans: subsets of {"x", "r"} ({"y", "x"} when tiled)

    def __str__(self) -> str:
        return self.name


def literal(value, dtype: torch.dtype) -> str:
    """A Python scalar as Triton source (for ``tl.full``)."""
    if dtype == torch.bool:
        return "1" if value else "0"
    if dtype.is_floating_point:
        v = float(value)
        if math.isnan(v):
            return "float('nan')"
        if math.isinf(v):
            return "float('inf')" if v > 0 else "float('-inf')"
        return repr(v)
    v = int(value)
    return "(-9223372036854775807 - 1)" if v == -(2 ** 63) else str(v)  # no literal is below int64's range


class TritonOps(OpsHandler):
    """Emits Triton for one member of a fused kernel.

    ``ctx`` (``kernel.MemberContext``) knows the kernel: ``pointer(name)`` gives a buffer's pointer
    argument, or None when the value lives in registers (``register(name)``); ``index(expr)`` prints an
    index expression in the member's variables and gives its axes; ``mask(axes)`` the mask for them;
    ``reduction_mode`` is "persistent" (the whole row in one block) or "looped". Statements go to
    ``pre`` (before the member's loop), ``lines`` (the loop body) and ``post`` (after the reduction).
    """

    def __init__(self, ctx, cse: dict | None = None):
        self.ctx = ctx
        self.pre: list[str] = []
        self.lines: list[str] = []
        self.post: list[str] = []
        self.cse: dict[str, TVal] = {} if cse is None else cse
        self.after_reduction = False
        self.masks: list[TVal] = []  # enclosing ops.masked conditions
        self.in_bounds: dict = {}  # indirect index symbol -> its in-bounds test (stores skip the others)

    @property
    def out(self) -> list[str]:
        return self.post if self.after_reduction else self.lines

    def _emit(self, expr: str, dtype: torch.dtype, axes) -> TVal:
        key = f"{dtype}:{expr}"
        if key in self.cse:
            return self.cse[key]
        val = TVal(self.ctx.new_tmp(), dtype, frozenset(axes))
        self.out.append(f"{val.name} = {expr}")
        self.cse[key] = val
        return val

    # ---------------------------------------------------------------------------------- math

    def unary(self, op, x):
        dtype = result_dtype(op, x.dtype)
        if op == "bitwise_not":
            tmpl = "{0} == 0" if x.dtype == torch.bool else "~{0}"
        elif op == "logical_not":
            tmpl = "{0} == 0"
        elif op in _UNARY_ANY:
            tmpl = _UNARY_ANY[op]
        elif x.dtype.is_floating_point:
            if x.dtype in (torch.float16, torch.bfloat16) and op not in ("isnan", "isinf", "isfinite"):
                raise NotImplementedError(f"Triton: ops.{op} on {x.dtype} (lowerings compute in float32)")
            tmpl = _UNARY_FLOAT.get(op)
            if op == "sqrt" and x.dtype == torch.float64:
                tmpl = "tl.sqrt({0})"  # (tl.sqrt_rn takes float32 only; float64 sqrt is IEEE-rounded already)
        else:
            tmpl = _UNARY_INT.get(op)
        if tmpl is None:
            raise NotImplementedError(f"Triton has no rule for ops.{op} on {x.dtype}")
        return self._emit(tmpl.format(x.name), dtype, x.axes)

    def binary(self, op, a, b):
        dtype = result_dtype(op, a.dtype, b.dtype)
        tmpl = _BINARY.get(op)
        if tmpl is None:
            if a.dtype == torch.bool:
                tmpl = _BINARY_BOOL.get(op)
            elif a.dtype.is_floating_point:
                tmpl = _BINARY_FLOAT.get(op)
            else:
                if op == "truediv":
                    raise NotImplementedError("truediv of integers reaches Triton without a cast")
                tmpl = _BINARY_INT.get(op)
        if tmpl is None:
            raise NotImplementedError(f"Triton has no rule for ops.{op} on {a.dtype}")
        bits = a.dtype.itemsize * 8
        return self._emit(tmpl.format(a.name, b.name, bits=bits), dtype, a.axes | b.axes)

    # ------------------------------------------------------------------------------ memory

    def load(self, name, index):
        dtype = self.ctx.dtype_of(name)
        reg = self.ctx.register(name, index)
        if reg is not None:
            return reg
        ptr = self.ctx.pointer(name)
        idx, axes = self.ctx.index(index)
        masks = self._guarding(axes)
        if masks:
            # (a block mask needs a block pointer: a constant address is widened along x, as stores are)
            want = axes.union(*(m.axes for m in masks)) or frozenset({"x"})
            if want != axes:
                idx = f"({idx}) + tl.full({self.ctx.shape(want)}, 0, tl.int32)"
                axes = frozenset(want)
        mask = " & ".join(filter(None, [self.ctx.mask(axes)] + [m.name for m in masks]
                                 + [self._nonempty(index)])) or None
        args = f"{ptr} + ({idx})" + (f", {mask}, other=0" if mask else "")
        policy = self.ctx.eviction(name)
        if policy is not None:
            args += f", eviction_policy={policy!r}"
        val = self._emit(f"tl.load({args})", dtype, axes)
        if dtype in (torch.float16, torch.bfloat16):
            # kept in its dtype; the lowering converts explicitly where it computes
            return val
        return val

    def _nonempty(self, index) -> str | None:
        """(The clamp keeps other out-of-range indices in the buffer; an empty one has nothing to clamp to.)"""
        return nonempty_test(index, getattr(self.ctx, "indirect_nonempty", {}), " & ")

    def _in_bounds(self, index) -> str | None:
        """A store through an out-of-range index is skipped, not clamped: the graph raises, and a buffer
        it updates in place (the user's tensor) keeps that element (the interpreter runs on after a
        failed check). (An index into an empty dim is never in bounds: no ``_nonempty`` needed here.)"""
        return nonempty_test(index, self.in_bounds, " & ")

    def _guarding(self, axes) -> list:
        """The enclosing ``masked`` conditions a load at an address varying along ``axes`` is made under:
        those that vary along one of them. A condition only on other axes (a pad's column bound, for a
        per-row value of a tiled or row kernel) does not guard this address: the address is the same in
        the lanes where that condition holds (the load is valid there) as in those where it does not, so
        the value is loaded once per row (``[YBLOCK, 1]``), not once per element of the tile; lanes
        outside the condition compute with it and are then replaced by ``masked``'s fill value."""
        if not axes:
            return [m for m in self.masks if not m.axes]
        return [m for m in self.masks if not m.axes or m.axes & axes]

    def store(self, name, index, value):
        self.ctx.record(name, value)
        ptr = self.ctx.pointer(name)
        if ptr is None:
            return
        idx, axes = self.ctx.index(index)
        want = axes | value.axes | {"x"}  # a block pointer, never a scalar one: values may be blocks
        if want != axes:
            idx = f"({idx}) + tl.full({self.ctx.shape(want)}, 0, tl.int32)"
            axes = frozenset(want)
        mask = " & ".join(filter(None, [self.ctx.mask(axes), self._in_bounds(index)])) or None
        v = value.name
        target = self.ctx.dtype_of(name)
        if value.dtype != target:
            raise NotImplementedError(f"store of {value.dtype} into {name} of {target}")
        self.out.append(f"tl.store({ptr} + ({idx}), {v}" + (f", {mask})" if mask else ")"))

    store_reduction = store

    def scatter_store(self, name, index, value, mode):
        """A scatter's store (kiln/loopir/scatter.py): ``tl.store`` (duplicates: any one wins, as ATen's
        CUDA kernels) or an atomic ``add``/``max``/``min`` (integer max/min only: float atomics would not
        propagate NaN as ATen does; ``mul`` has no atomic). Indices were clamped into the buffer."""
        fn = {"store": "tl.store", "add": "tl.atomic_add"}.get(mode)
        target = self.ctx.dtype_of(name)
        if mode in ("max", "min") and not target.is_floating_point and target != torch.bool:
            fn = f"tl.atomic_{mode}"
        if fn is None:
            raise NotImplementedError(f"Triton: scatter {mode} into {target} (no exact atomic)")
        if value.dtype != target:
            raise NotImplementedError(f"scatter of {value.dtype} into {name} of {target}")
        kctx = getattr(self.ctx, "kctx", None)
        if mode != "store" and target.itemsize == 2 and kctx is not None and \
                kctx.buffers[name].device.type != "cuda":
            raise NotImplementedError(f"Triton's interpreter has no {target} atomics")
        ptr = self.ctx.pointer(name)
        idx, axes = self.ctx.index(index)
        want = axes | value.axes | {"x"}
        if want != axes:
            idx = f"({idx}) + tl.full({self.ctx.shape(want)}, 0, tl.int32)"
            axes = frozenset(want)
        mask = " & ".join(filter(None, [self.ctx.mask(axes), self._in_bounds(index)])) or None
        v = value.name
        if value.axes != axes:  # a value of fewer axes (a constant): one per pointer, as atomics want
            # (an arithmetic broadcast: Triton's interpreter mis-adds broadcast_to views atomically)
            op = "|" if target == torch.bool else "+"
            v = f"({v} {op} tl.full({self.ctx.shape(axes)}, 0, {TL_DTYPE[target]}))"
        sem = ", sem='relaxed'" if fn != "tl.store" else ""
        self.out.append(f"{fn}({ptr} + ({idx}), {v}" + (f", {mask}" if mask else "") + f"{sem})")

    # ------------------------------------------------------------------------------- values

    def constant(self, value, dtype):
        return self._emit(f"tl.full([1], {literal(value, dtype)}, {TL_DTYPE[dtype]})", dtype, ())

    def index_expr(self, expr, dtype):
        idx, axes = self.ctx.index(sympy.sympify(expr))
        if not axes:
            return self._emit(f"tl.full([1], {idx}, {TL_DTYPE[dtype]})", dtype, ())
        return self._emit(f"({idx}).to({TL_DTYPE[dtype]})", dtype, axes)

    def to_dtype(self, x, dtype):
        if x.dtype == dtype:
            return x
        if dtype == torch.bool:
            return self._emit(f"{x} != 0", dtype, x.axes)
        if dtype == torch.bfloat16 and x.dtype == torch.float32:
            return self._emit(f"kh.to_bfloat16({x})", dtype, x.axes)  # rounds to nearest even
        return self._emit(f"{x}.to({TL_DTYPE[dtype]})", dtype, x.axes)

    def where(self, c, a, b):
        return self._emit(f"tl.where({c}, {a}, {b})", a.dtype, c.axes | a.axes | b.axes)

    def masked(self, mask, body, other):
        """``body()`` with every load under ``mask`` too, then ``tl.where(mask, value, other)``."""
        outer_cse = self.cse
        # Values loaded under the mask are not valid outside it, but they are under the same masks later
        # in the same code (a ``cat`` read again by each of several fused outputs: RoPE's rotate_half for
        # every head group loaded and took cos/sin of the same elements each time): one scope per mask
        # stack, kept in the enclosing scope's table and refreshed with what it learned since.
        scope = ("masked", self.after_reduction, *(m.name for m in self.masks), mask.name)
        inner = outer_cse.get(scope)
        if inner is None:
            inner = outer_cse[scope] = {}
        inner.update(outer_cse)
        del inner[scope]
        self.cse = inner
        self.masks.append(mask)
        try:
            value = body()
        finally:
            self.masks.pop()
            self.cse = outer_cse
        fill = self.constant(other, value.dtype)
        return self._emit(f"tl.where({mask}, {value}, {fill})", value.dtype, mask.axes | value.axes)

    def indirect_indexing(self, value, size, wrap_negative=True):
        """A loaded index as a block variable usable in later indices.

        Negative values count from the end. An out-of-range value (the user's error; eager raises) fails
        ``kh.check_index`` where its lane is live (inside the block's bounds and every enclosing
        ``masked`` condition): a device-side assert on the GPU, as ATen's CUDA kernels, and an
        IndexOutOfBoundsError from the wrapper under the interpreter. It is also clamped, so no access
        leaves the buffer whatever happens after the check.
        """
        v = self._emit(f"({value}).to(tl.int64)", torch.int64, value.axes)
        if wrap_negative:
            v = self._emit(f"tl.where({v} < 0, {v} + {_size(size)}, {v})", torch.int64, v.axes)
        ok = self._check_index(v, size)
        v = self._emit(f"tl.minimum(tl.maximum({v}, 0), {_size(size - 1)})", torch.int64, v.axes)
        sym = sympy.Symbol(v.name, integer=True, nonnegative=True)
        self.in_bounds[sym] = ok.name
        self.ctx.indirect[sym] = set(v.axes)
        if sympy.sympify(size).is_positive is not True:  # (a backed size symbol is positive)
            self.ctx.indirect_nonempty[sym] = f"({_size(size)} > 0)"  # (see _nonempty)
        return sym

    def _check_index(self, v, size) -> TVal:
        """``kh.check_index`` of the lanes where ``v`` is live; returns the in-bounds test."""
        ok = self._emit(f"({v} >= 0) & ({v} < {_size(size)})", torch.bool, v.axes)
        live = [m for m in [self.ctx.mask(v.axes)] + [m.name for m in self.masks] if m]
        line = f"kh.check_index({ok} | ~({' & '.join(live)}))" if live else f"kh.check_index({ok})"
        if f"check:{line}" not in self.cse:
            self.cse[f"check:{line}"] = ok
            self.out.append(line)
        return ok

    # ---------------------------------------------------------------------------- reductions

    def reduction(self, kind, value, dtype):
        if self.after_reduction:
            raise NotImplementedError("Triton: a body with two reductions")
        ctx = self.ctx
        if value.dtype != dtype:
            value = self.to_dtype(value, dtype)
        mask = ctx.mask(frozenset({"x", "r"}))
        full = ctx.shape(frozenset({"x", "r"}))
        ident = literal(reduction_identity(kind, dtype), dtype)
        T = TL_DTYPE[dtype]
        acc = ctx.new_tmp("acc")
        if kind in ("argmax", "argmin"):
            return self._arg_reduction(kind, value, dtype, acc, mask, full, ident)
        if ctx.reduction_mode == "persistent":
            self.lines.append(f"{acc} = tl.where({mask}, {value}, tl.full([1], {ident}, {T}))")
        else:
            self.pre.append(f"{acc} = tl.full({full}, {ident}, {T})")
            step = _COMBINE[kind].format(acc=acc, v=value.name)
            self.lines.append(f"{acc} = tl.where({mask}, {step}, {acc})")
        self.after_reduction = True
        if dtype == torch.bool:
            fn = "max" if kind == "any" else "min"
            final = f"tl.reduce({acc}.to(tl.int8), 1, tl.standard._elementwise_{fn}) != 0"
        elif not dtype.is_floating_point and kind in _REDUCE_INT:
            final = _REDUCE_INT[kind].format(acc)
        elif kind == "sum":
            final = f"tl.reduce({acc}, 1, tl.standard._sum_combine)"
        else:
            final = f"tl.reduce({acc}, 1, {_REDUCE_FN[kind]})"
        res = TVal(ctx.new_tmp(), dtype, frozenset({"x"}))
        self.post.append(f"{res.name} = ({final})[:, None]" + ("" if dtype == torch.bool else f".to({T})"))
        return res

    def _arg_reduction(self, kind, value, dtype, acc, mask, full, ident):
        ctx = self.ctx
        T = TL_DTYPE[dtype]
        rlin = ctx.reduction_linear()
        combine = f"kh.{kind}_combine"
        if ctx.reduction_mode == "persistent":
            self.lines.append(f"{acc} = tl.where({mask}, {value}, tl.full([1], {ident}, {T}))")
            self.lines.append(f"{acc}_idx = ({rlin} + tl.full({full}, 0, tl.int32)).to(tl.int64)")
        else:
            self.pre.append(f"{acc} = tl.full({full}, {ident}, {T})")
            self.pre.append(f"{acc}_idx = tl.full({full}, 9223372036854775807, tl.int64)")
            new_idx = f"({rlin} + tl.full({full}, 0, tl.int32)).to(tl.int64)"
            self.lines.append(f"{acc}_next = {combine}({acc}, {acc}_idx, {value}, {new_idx})")
            self.lines.append(f"{acc} = tl.where({mask}, {acc}_next[0], {acc})")
            self.lines.append(f"{acc}_idx = tl.where({mask}, {acc}_next[1], {acc}_idx)")
        self.after_reduction = True
        res = TVal(ctx.new_tmp(), torch.int64, frozenset({"x"}))
        self.post.append(f"{res.name}_pair = tl.reduce(({acc}, {acc}_idx), 1, {combine})")
        self.post.append(f"{res.name} = {res.name}_pair[1][:, None]")
        return res


def jit_decorator(body: list[str], do_not_specialize=()) -> str:
    """A generated kernel's ``@jit`` line. Size arguments are not specialized (on value 1 or
    divisibility by 16): one binary for every size. A kernel that checks loaded indices
    (``kh.check_index``) is compiled with ``debug=True``: Triton drops device asserts otherwise."""
    options = []
    if do_not_specialize:
        options.append(f"do_not_specialize={tuple(str(s) for s in do_not_specialize)!r}")
    if any("kh.check_index(" in line for line in body):
        options.append("debug=True")
    return f"@jit({', '.join(options)})" if options else "@jit"


def _size(n) -> str:
    """A size in Triton code: an int, or an expression over the kernel's size arguments (parenthesized
    unless one symbol: it may be an operand)."""
    if not is_symbolic(n):
        return str(int(n))
    n = exact_sizes(n)
    text = print_index_py(n)
    return text if getattr(n, "is_Symbol", False) else f"({text})"
