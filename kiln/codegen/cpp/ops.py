"""CppOps: the ``ops`` handler that turns a loop body into C++ statements (one typed temporary per op,
common subexpressions shared)."""
from __future__ import annotations

import dataclasses
import math
import re

import sympy
import torch

from kiln.codegen.common import nonempty_test, print_index_c
from kiln.loopir.sizes import is_symbolic
from kiln.loopir.ops import OpsHandler, reduction_identity, result_dtype

CTYPE = {
    torch.float32: "float", torch.float64: "double", torch.float16: "_Float16", torch.bfloat16: "kiln_bf16",
    torch.int64: "int64_t", torch.int32: "int32_t", torch.int16: "int16_t", torch.int8: "int8_t",
    torch.uint8: "uint8_t", torch.bool: "bool",
}

_UNARY_FLOAT = {
    "exp": "std::exp({})", "exp2": "std::exp2({})", "expm1": "std::expm1({})", "log": "std::log({})",
    "log2": "std::log2({})", "log10": "std::log10({})", "log1p": "std::log1p({})", "sqrt": "std::sqrt({})",
    "rsqrt": "{T}(1) / std::sqrt({})", "reciprocal": "{T}(1) / {}", "sin": "std::sin({})", "cos": "std::cos({})",
    "tan": "std::tan({})", "asin": "std::asin({})", "acos": "std::acos({})", "atan": "std::atan({})",
    "sinh": "std::sinh({})", "cosh": "std::cosh({})", "tanh": "kiln_tanh({})", "asinh": "std::asinh({})",
    "acosh": "std::acosh({})", "atanh": "std::atanh({})", "sigmoid": "kiln_sigmoid({})", "erf": "kiln_erf({})",
    "erfc": "std::erfc({})", "erfinv": "kiln_erfinv({})", "lgamma": "std::lgamma({})", "floor": "std::floor({})", "ceil": "std::ceil({})",
    "trunc": "std::trunc({})", "round": "std::nearbyint({})", "frac": "({0} - std::trunc({0}))",
    "isnan": "std::isnan({})", "isinf": "std::isinf({})", "isfinite": "std::isfinite({})",
    "signbit": "std::signbit({})",
}
_UNARY_INT = {
    "floor": "{}", "ceil": "{}", "trunc": "{}", "round": "{}", "frac": "{T}(0)", "isnan": "false",
    "isinf": "false", "isfinite": "true", "signbit": "({} < 0)",
}
_UNARY_ANY = {
    "neg": "-{}", "abs": "kiln_abs({})", "sign": "kiln_sign({})", "relu": "kiln_relu({})", "square": "({0} * {0})",
    "logical_not": "!{}",
}
_BINARY = {
    "add": "{} + {}", "sub": "{} - {}", "mul": "{} * {}", "truediv": "{} / {}",
    "floordiv": "kiln_floordiv({}, {})", "truncdiv": "kiln_truncdiv({}, {})", "mod": "kiln_mod({}, {})",
    "fmod": "kiln_fmod({}, {})", "pow": "kiln_pow({}, {})", "maximum": "kiln_max({}, {})",
    "minimum": "kiln_min({}, {})", "atan2": "std::atan2({}, {})", "hypot": "std::hypot({}, {})",
    "copysign": "std::copysign({}, {})", "nextafter": "std::nextafter({}, {})",
    "bitwise_and": "{} & {}", "bitwise_or": "{} | {}", "bitwise_xor": "{} ^ {}",
    "lshift": "kiln_lshift({}, {})", "rshift": "kiln_rshift({}, {})",
    "eq": "{} == {}", "ne": "{} != {}", "lt": "{} < {}", "le": "{} <= {}", "gt": "{} > {}", "ge": "{} >= {}",
    "logical_and": "{} && {}", "logical_or": "{} || {}", "logical_xor": "{} != {}",
}

# int32/int64 arithmetic that can overflow: wrapped as eager's (prelude.h; a signed overflow in C++ is
# undefined, and the optimizer drew wrong conclusions from it). Narrower ints are promoted to int first.
_WIDE_INTS = (torch.int32, torch.int64)
_WRAPPING = {"add": "kiln_wrap_add<{T}>({}, {})", "sub": "kiln_wrap_sub<{T}>({}, {})",
             "mul": "kiln_wrap_mul<{T}>({}, {})", "neg": "kiln_wrap_neg<{T}>({})", "square": "kiln_wrap_mul<{T}>({0}, {0})"}


_INT_DIVISIONS = frozenset({"floordiv", "truncdiv", "mod", "fmod"})


# ops worth keeping in a row cache (rows.py) rather than computing twice: calls and divisions
COSTLY_OPS = frozenset(_UNARY_FLOAT) - {"floor", "ceil", "trunc", "round", "frac", "isnan", "isinf", "isfinite",
                                        "signbit"} | {"truediv", "floordiv", "truncdiv", "mod", "fmod", "pow", "atan2", "hypot"}
_TMP = re.compile(r"\btmp\d+\b")
_ROW_VAR = re.compile(r"\bq\d+\b")  # canonical row variables in structural keys (rows.py)


# pow(x, c) for the exponents ATen's CPU kernel special-cases (results bit-equal to eager)
_POW_SPECIAL = {
    2.0: "({0} * {0})", 3.0: "({0} * {0} * {0})", 0.5: "std::sqrt({0})", -0.5: "{T}(1) / std::sqrt({0})",
    -1.0: "{T}(1) / {0}", -2.0: "{T}(1) / ({0} * {0})",
}


@dataclasses.dataclass(frozen=True)
class CppVal:
    name: str
    dtype: torch.dtype

    def __str__(self) -> str:
        return self.name


def c_literal(value, dtype: torch.dtype) -> str:
    T = CTYPE[dtype]
    if dtype == torch.bool:
        return "true" if value else "false"
    if dtype.is_floating_point:
        v = float(value)
        if math.isnan(v):
            return f"std::numeric_limits<{_math_type(dtype)}>::quiet_NaN()"
        if math.isinf(v):
            return f"{'-' if v < 0 else ''}std::numeric_limits<{_math_type(dtype)}>::infinity()"
        return f"static_cast<{T}>({v.hex()})"
    v = int(value)
    if v == -(2 ** 63):
        return "std::numeric_limits<int64_t>::min()"
    return f"static_cast<{T}>({v}LL)"


def _bool_load(ptr: str, index: str) -> str:
    """A bool element read as a byte: GCC 12 does not vectorize a loop that loads through a ``bool*``
    and selects floats with it (a masked softmax's ``where(mask, -inf, x)`` ran scalar, exp included)."""
    return f"(reinterpret_cast<const uint8_t*>({ptr})[{index}] != 0)"


def _math_type(dtype):
    return "float" if dtype in (torch.float16, torch.bfloat16) else CTYPE[dtype]


class CppOps(OpsHandler):
    """Emits C++ for one loop body.

    ``ctx`` is the kernel being generated: ``ctx.pointer(name)`` gives the C expression of a buffer's
    base pointer (None for a kernel-local scalar, named by ``ctx.local_scalar(name)``),
    ``ctx.local_index(name, index)`` rewrites indices of kernel-local arrays, ``ctx.dtype_of(name)``
    gives a buffer's dtype, ``ctx.rename(index)`` rewrites loop variables (merged loops). Statements
    before the body's reduction go to ``lines`` (they run inside the reduction loop); statements after
    it go to ``post``. ``reductions`` lists the reductions (the loop generator folds each value in).
    """

    def __init__(self, ctx, acc_ref=None):
        self.ctx = ctx
        self.acc_ref = acc_ref or (lambda acc: acc)  # C expression of an accumulator (e.g. a tile's element)
        self.lines: list[str] = []
        self.post: list[str] = []
        self.reductions: list[Red] = []
        self.constants: dict[str, float] = {}  # C name -> value of floating constants
        self.cse: dict[str, CppVal] = {}
        self.count = 0
        self.after_reduction = False
        self.redirect: list[list[str]] = []  # bodies of ``masked`` being generated, innermost last
        self.ids: dict[str, int] = {}  # temporary -> structural value id (row caches: rows.py)
        self.index_tests: dict = {}  # indirect index symbol -> the C expression of its in-bounds test

    @property
    def out(self) -> list[str]:
        if self.redirect:
            return self.redirect[-1]
        return self.post if self.after_reduction else self.lines

    def _emit(self, expr: str, dtype: torch.dtype, key: str | None = None, costly: bool = False) -> CppVal:
        """A temporary ``name = expr``. ``key`` is ``expr`` with canonical row indices (loads, index_expr);
        with row caches (``ctx.rows``) the value may be loaded from a row array or stored to one."""
        cse_key = f"{dtype}:{expr}"
        if cse_key in self.cse:
            return self.cse[cse_key]
        name = f"tmp{self.count}"
        self.count += 1
        rows = getattr(self.ctx, "rows", None)
        key = expr if key is None else key
        vid = self._value_id(key, dtype) if rows is not None else None
        per_element = rows is not None and not self.redirect and not self.after_reduction
        if per_element and vid in rows.loads:
            expr = f"{rows.loads[vid]}[{rows.index}]"
        self.out.append(f"{CTYPE[dtype]} {name} = {expr};")
        if per_element and vid in rows.stores:
            self.out.append(f"{rows.stores[vid]}[{rows.index}] = {name};")
        if per_element:
            args = [self.ids[a] for a in _TMP.findall(key)]
            for arg in args:
                rows.users.setdefault(arg, set()).add(vid)
            if _ROW_VAR.search(key) or any(a in rows.computed for a in args):  # differs along the row
                rows.computed.setdefault(vid, dtype)
                if costly:
                    rows.costly.add(vid)
        val = CppVal(name, dtype)
        self.cse[cse_key] = val
        self.ids[name] = vid
        return val

    def _value_id(self, key: str, dtype) -> int:
        """The structural id of a value: its expression with operands replaced by their ids."""
        text = f"{dtype}:" + _TMP.sub(lambda m: f"#{self.ids[m.group()]}", key)
        return self.ctx.value_ids.setdefault(text, len(self.ctx.value_ids))

    def _sink(self, value) -> None:
        """``value`` leaves the body (stored or reduced): row planning keeps it if cached."""
        rows = getattr(self.ctx, "rows", None)
        if rows is not None and not self.redirect and not self.after_reduction and str(value) in self.ids:
            rows.sinks.add(self.ids[str(value)])

    def _row_key(self, text_fn, index) -> str | None:
        """``text_fn(index)`` with the member's row variables made canonical (None: no row caches)."""
        rows = getattr(self.ctx, "rows", None)
        if rows is None:
            return None
        return text_fn(index.xreplace(rows.key_subs))

    # ---------------------------------------------------------------------------------- math

    def unary(self, op, x):
        dtype = result_dtype(op, x.dtype)
        if op == "bitwise_not":
            tmpl = "!{}" if x.dtype == torch.bool else "~{}"
        elif op in _UNARY_ANY:
            tmpl = _UNARY_ANY[op]
        elif x.dtype.is_floating_point:
            tmpl = _UNARY_FLOAT.get(op)
        else:
            tmpl = _UNARY_INT.get(op)
        if tmpl is None:
            raise NotImplementedError(f"C++ has no rule for ops.{op} on {x.dtype}")
        if op in _WRAPPING and dtype in _WIDE_INTS:
            tmpl = _WRAPPING[op]
        return self._emit(tmpl.format(x.name, T=CTYPE[x.dtype]), dtype, costly=op in COSTLY_OPS)

    def binary(self, op, a, b):
        if op == "pow" and a.dtype.is_floating_point and self.constants.get(b.name) in _POW_SPECIAL:
            # ATen computes these scalar exponents with multiplications / sqrt: the same formula here
            return self._emit(_POW_SPECIAL[self.constants[b.name]].format(a.name, T=CTYPE[a.dtype]), a.dtype,
                              costly=True)
        tmpl = _BINARY.get(op)
        if op == "truediv" and not a.dtype.is_floating_point:
            raise NotImplementedError("truediv of integers reaches C++ without a cast")
        if op in ("maximum", "minimum") and a.dtype == torch.bool:
            tmpl = "{} || {}" if op == "maximum" else "{} && {}"
        if op in ("fmax", "fmin"):
            fn = op if a.dtype.is_floating_point else op[1:]
            tmpl = f"std::{fn}({{}}, {{}})"
        if tmpl is None:
            raise NotImplementedError(f"C++ has no rule for ops.{op}")
        dtype = result_dtype(op, a.dtype, b.dtype)
        if op in _WRAPPING and dtype in _WIDE_INTS:
            tmpl = _WRAPPING[op]
        if op in _INT_DIVISIONS and not dtype.is_floating_point and self.constants.get(b.name) in (None, 0):
            # an integer divisor of zero sets the library's error flag (eager raises ZeroDivisionError): the
            # wrapper checks it after the kernel, unless the divisor is a nonzero constant
            self.ctx.checks_bounds = True
        return self._emit(tmpl.format(a.name, b.name, T=CTYPE[dtype]), dtype, costly=op in COSTLY_OPS)

    # ------------------------------------------------------------------------------ memory

    def load(self, name, index):
        ptr = self.ctx.pointer(name)
        dtype = self.ctx.dtype_of(name)
        if ptr is None:
            return CppVal(self.ctx.local_scalar(name), dtype)
        idx = self.ctx.rename(self.ctx.local_index(name, index))
        plain = _bool_load if dtype == torch.bool else "{}[{}]".format
        nonempty = self._nonempty(idx)
        text = plain
        if nonempty is not None:  # an empty dimension read through a loaded index: read nothing (flag set)
            zero = f"static_cast<{CTYPE[dtype]}>(0)"
            text = lambda p, i: f"({nonempty} ? {plain(p, i)} : {zero})"  # noqa: E731
        key = self._row_key(lambda i: text(ptr, print_index_c(i)), sympy.sympify(idx))
        return self._emit(text(ptr, print_index_c(idx)), dtype, key)

    def _nonempty(self, index) -> str | None:
        """(``kiln_indirect`` flags any index into an empty dimension; the access itself must not happen.)"""
        return nonempty_test(index, self.ctx.indirect_nonempty, " && ")

    def store(self, name, index, value):
        self._sink(value)
        ptr = self.ctx.pointer(name)
        if ptr is None:
            self.out.append(f"{self.ctx.local_scalar(name)} = {value};")
            return
        idx = self.ctx.rename(self.ctx.local_index(name, index))
        nonempty = self._nonempty(idx)
        guard = f"if ({nonempty}) " if nonempty is not None else ""
        self.out.append(f"{guard}{ptr}[{print_index_c(idx)}] = {value};")

    store_reduction = store

    def scatter_store(self, name, index, value, mode):
        """``buf[index] (op)= value`` (codegen/cpp/scatter.py runs the loop in order: no atomics)."""
        from kiln.codegen.cpp.scatter import combine_statement

        dtype = self.ctx.dtype_of(name)
        idx = self.ctx.rename(sympy.sympify(index))
        target = f"{self.ctx.pointer(name)}[{print_index_c(idx)}]"
        half = dtype in (torch.float16, torch.bfloat16)
        statement = combine_statement(mode, target, value.name, CTYPE[dtype], half, dtype == torch.bool)
        # a store through an out-of-range index (the graph raises) is skipped, not made at the clamped
        # element: a buffer updated in place (the user's tensor) gets only the valid writes. Each index's
        # test is a temporary, hoisted with the index (the loop stays vectorizable); it is false for an
        # empty dim too, so it replaces ``_nonempty`` here.
        tests = {s: self._emit(self.index_tests[s], torch.bool).name
                 for s in sorted(idx.free_symbols, key=str) if s in self.index_tests}
        guard = nonempty_test(idx, tests, " && ")
        self.out.append(f"if ({guard}) {{ {statement} }}" if guard else statement)

    # ------------------------------------------------------------------------------- values

    def constant(self, value, dtype):
        val = self._emit(c_literal(value, dtype), dtype)
        if dtype.is_floating_point and isinstance(value, (int, float)):
            self.constants[val.name] = float(value)
        return val

    def index_expr(self, expr, dtype):
        expr = self.ctx.rename(sympy.sympify(expr))
        key = self._row_key(lambda i: f"static_cast<{CTYPE[dtype]}>({print_index_c(i)})", expr)
        return self._emit(f"static_cast<{CTYPE[dtype]}>({print_index_c(expr)})", dtype, key)

    def to_dtype(self, x, dtype):
        if x.dtype == dtype:
            return x
        src = x.name
        if x.dtype == torch.bfloat16:
            src = f"static_cast<float>({src})"
        if dtype == torch.bfloat16:
            return self._emit(f"kiln_bf16(static_cast<float>({src}))", dtype)
        return self._emit(f"static_cast<{CTYPE[dtype]}>({src})", dtype)

    def where(self, c, a, b):
        return self._emit(f"{c} ? {a} : {b}", a.dtype)

    def masked(self, mask, body, other):
        """``mask ? body() : other`` with the body in a lambda, so its loads run only where ``mask`` holds."""
        outer_cse, n_reductions = self.cse, len(self.reductions)
        self.cse = dict(self.cse)  # values made inside the lambda are not visible after it
        self.redirect.append([])
        try:
            value = body()
        finally:
            inner = self.redirect.pop()
            self.cse = outer_cse
        if len(self.reductions) != n_reductions:
            raise NotImplementedError("a reduction inside ops.masked")
        fn = f"tmp{self.count}_fn"
        self.count += 1
        T = CTYPE[value.dtype]
        self.out.extend([f"auto {fn} = [&]() -> {T} {{"] + ["    " + line for line in inner]
                        + [f"    return {value};", "};"])
        other_c = c_literal(other, value.dtype)
        if value.dtype in (torch.bfloat16, torch.float16):  # a float literal: give ?: one type
            other_c = f"static_cast<{T}>({other_c})"
        return self._emit(f"{mask} ? {fn}() : {other_c}", value.dtype)

    def indirect_indexing(self, value, size, wrap_negative=True):
        """A loaded index as a C variable (checked: out of bounds sets the library's error flag)."""
        self.ctx.checks_bounds = True
        n = f"static_cast<int64_t>({print_index_c(size)})" if is_symbolic(size) else f"{int(size)}LL"
        wrap = 'true' if wrap_negative else 'false'
        v = self._emit(f"kiln_indirect(static_cast<int64_t>({value}), {n}, {wrap})", torch.int64)
        sym = sympy.Symbol(v.name, integer=True, nonnegative=True)
        self.index_tests[sym] = f"kiln_index_ok(static_cast<int64_t>({value}), {n}, {wrap})"  # (scatter stores)
        if sympy.sympify(size).is_positive is not True:  # (a backed size symbol is positive)
            self.ctx.indirect_nonempty[sym] = f"({n} > 0)"
        return sym

    def reduction(self, kind, value, dtype):
        """Records the reduction (the loop generator emits its combine step and accumulators)."""
        self._sink(value)
        acc = f"acc{len(self.reductions)}"
        self.reductions.append(Red(acc, kind, dtype, value.name))
        self.after_reduction = True
        if kind in ("argmax", "argmin"):
            return CppVal(self.acc_ref(f"{acc}_idx"), torch.int64)
        return CppVal(self.acc_ref(acc), dtype)


@dataclasses.dataclass(frozen=True)
class Red:
    """One reduction of a loop body: accumulator name, kind, accumulation dtype, the C value reduced."""

    acc: str
    kind: str
    dtype: torch.dtype
    value: str


def _wrapping(op: str, dtype, a: str, b: str) -> str:
    return _WRAPPING[op].format(a, b, T=CTYPE[dtype]) if dtype in _WIDE_INTS else _BINARY[op].format(a, b)


def combine_line(red: Red, target: str, rindex: str, idx_target: str | None = None) -> str:
    """C++ that folds ``red.value`` into the accumulator ``target`` (argmax/argmin: and ``idx_target``)."""
    v = red.value
    if red.kind in ("argmax", "argmin"):
        cmp = ">" if red.kind == "argmax" else "<"
        idx = idx_target or f"{target}_idx"
        # first occurrence wins; a NaN wins over numbers (and the first NaN over later ones)
        return f"if ({v} {cmp} {target} || ({v} != {v} && {target} == {target})) {{ {target} = {v}; {idx} = {rindex}; }}"
    return {
        "sum": f"{target} = {_wrapping('add', red.dtype, target, v)};",
        "prod": f"{target} = {_wrapping('mul', red.dtype, target, v)};",
        "max": f"{target} = kiln_max({target}, {v});", "min": f"{target} = kiln_min({target}, {v});",
        "any": f"{target} = {target} || {v};", "all": f"{target} = {target} && {v};",
    }[red.kind]


def reduction_clause(red: Red, target: str) -> str | None:
    """The OpenMP ``reduction(...)`` clause for ``target``, or None where none is exact (argmax/argmin)."""
    if split_max_min(red):
        nan = f" reduction(|:{target}_nan)" if red.dtype.is_floating_point else ""
        return f"reduction({red.kind}:{target}){nan}"
    op = OMP_REDUCTION_OP.get(red.kind)
    if op is None:
        return None
    if red.kind in ("max", "min") and red.dtype in (torch.bool, torch.float16, torch.bfloat16):
        return None
    return f"reduction({op}:{target})"


def split_max_min(red: Red) -> bool:
    """max/min of float32/float64 (and integers) in vectorized reduction loops: OpenMP's own max/min
    (vmaxps/vminps) with NaNs seen through a separate flag ``<acc>_nan``, set after the loop
    (``nan_fixup``) — a third of the instructions of the branch-free NaN-propagating ``kiln_max``."""
    return red.kind in ("max", "min") and red.dtype not in (torch.bool, torch.float16, torch.bfloat16)


def vector_combine_line(red: Red, target: str) -> str:
    """``combine_line`` for a loop vectorized with ``reduction_clause``."""
    if not split_max_min(red):
        return combine_line(red, target, "")
    v, cmp = red.value, ">" if red.kind == "max" else "<"
    line = f"{target} = {v} {cmp} {target} ? {v} : {target};"
    return line + (f" {target}_nan |= ({v} != {v});" if red.dtype.is_floating_point else "")


def nan_flag(red: Red) -> tuple[list[str], list[str]]:
    """(declaration, fix-up after the loop) of the NaN flag of a split max/min, else nothing."""
    if not (split_max_min(red) and red.dtype.is_floating_point):
        return [], []
    nan = c_literal(float("nan"), red.dtype)
    return [f"int {red.acc}_nan = 0;"], [f"if ({red.acc}_nan) {red.acc} = {nan};"]


def accumulator_decls(reductions, suffix: str = "") -> list[str]:
    out = []
    for red in reductions:
        T = CTYPE[red.dtype]
        out.append(f"{T} {red.acc}{suffix} = {c_literal(reduction_identity(red.kind, red.dtype), red.dtype)};")
        if red.kind in ("argmax", "argmin"):
            out.append(f"int64_t {red.acc}_idx{suffix} = 0;")
    return out


def identity_literal(red: Red) -> str:
    return c_literal(reduction_identity(red.kind, red.dtype), red.dtype)


OMP_REDUCTION_OP = {"sum": "+", "prod": "*", "any": "||", "all": "&&", "max": "kiln_max", "min": "kiln_min"}
