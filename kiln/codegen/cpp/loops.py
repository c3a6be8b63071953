"""Loop nests of C++ kernels: reduction loops (vectorized, with partial sums), tiled column reductions,
and merging of contiguous pointwise loop dims.

Reductions are vectorized with ``#pragma omp simd reduction(...)`` (OpenMP may reorder the combine;
max/min use the NaN-propagating ``kiln_max``/``kiln_min`` through declared reductions, so results stay
exact). Floating-point sums accumulate in partials of at most ``SUM_CHUNK`` elements (``TILE_SUM_CHUNK``
rows in tiled reductions) that are added to the total, a two-level summation whose rounding error stays
close to ATen's cascade sums.
"""
from __future__ import annotations


import sympy

from kiln.codegen.cpp.ops import (
    CTYPE, Red, combine_line, identity_literal, nan_flag, reduction_clause, vector_combine_line,
)
from kiln.codegen.common import print_index_c
from kiln.loopir.index import var
from kiln.loopir.sizes import hint, is_symbolic, prod

SUM_CHUNK = 4096  # elements a float sum's partial accumulates in a (vectorized) inner loop
TILE = 128  # columns per tile of a tiled reduction
TILE_SUM_CHUNK = 64  # rows a tiled float sum's partials accumulate


def csize(n) -> str:
    """A loop extent or size: an int, or a C expression over the kernel's size arguments (s0, ...),
    parenthesized unless one symbol (it is an operand of *, / and %)."""
    if not is_symbolic(n):
        return str(n)
    text = print_index_c(n)
    return text if getattr(n, "is_Symbol", False) else f"({text})"


def omp_if(parallel) -> str:
    """The clause of a parallel region: ``parallel`` is True/False, or a C condition (symbolic work)."""
    return f" if({parallel})" if isinstance(parallel, str) else ""


def loop(v: str, n: int) -> str:
    return f"for (int64_t {v} = 0; {v} < {csize(n)}; ++{v})"


def indent(lines, n=1):
    pad = "    " * n
    return [pad + line if line else line for line in lines]


def block(lines) -> list[str]:
    return ["{"] + indent(lines) + ["}"]


def rindex_linear(rr) -> str:
    """C expression of the linear reduction index from loop variables ``r0, r1, ...``."""
    terms = []
    for d in range(len(rr)):
        stride = prod(rr[d + 1:])
        terms.append(f"r{d}*{csize(stride)}" if stride != 1 else f"r{d}")
    return " + ".join(terms) or "0"


def _uses_partial(red: Red) -> bool:
    return red.kind == "sum" and red.dtype.is_floating_point


def reduction_loops(rr, body: list[str], red: Red, parallel: bool = False) -> list[str]:
    """Loops over reduction ranges ``rr`` running ``body`` and folding ``red.value`` into ``red.acc``
    (declared by the caller). The innermost loop is vectorized where the reduction allows; with
    ``parallel`` the outer loops are split over threads (an OpenMP reduction into ``red.acc``)."""
    n = len(rr)
    if n == 0:  # every reduced dim has size 1: one step, no loop
        return block(body + [combine_line(red, red.acc, "0", f"{red.acc}_idx")])
    last = f"r{n - 1}"
    outer = [loop(f"r{d}", rr[d]) for d in range(n - 1)]
    # a symbolic extent is chunked (right for every size, and sums round as they do for large sizes)
    if is_symbolic(rr[-1]) or rr[-1] > SUM_CHUNK or (parallel and not outer):
        outer.append(f"for (int64_t {last}_c = 0; {last}_c < {csize(rr[-1])}; {last}_c += {SUM_CHUNK})")
        inner_head = (f"for (int64_t {last} = {last}_c; {last} < std::min<int64_t>({last}_c + {SUM_CHUNK}, "
                      f"{csize(rr[-1])}); ++{last})")
    else:
        inner_head = loop(last, rr[-1])
    partial = _uses_partial(red) and bool(outer)
    target = f"{red.acc}_p" if partial else red.acc
    clause = reduction_clause(red, target)
    rindex = rindex_linear(rr)
    combine = vector_combine_line(red, target) if clause else combine_line(red, target, rindex, f"{red.acc}_idx")
    nest = ([f"#pragma omp simd {clause}"] if clause else []) + [inner_head] + block(body + [combine])
    if partial:
        T = CTYPE[red.dtype]
        nest = block([f"{T} {target} = {identity_literal(red)};"] + nest + [f"{red.acc} = {red.acc} + {target};"])
    if parallel:
        clause = reduction_clause(red, red.acc)
        collapse = f" collapse({len(outer)})" if len(outer) > 1 else ""
        outer = [f"#pragma omp parallel for {clause}{collapse}{omp_if(parallel)}"] + outer
    flag_decl, flag_fixup = nan_flag(red)
    return flag_decl + outer + nest + flag_fixup


# ------------------------------------------------------------------------------------ tiled groups


def tiled_reduction(rr, body: list[str], post: list[str], red: Red, xvar: str) -> list[str]:
    """A reduction computed for a tile of ``TILE`` consecutive values of the innermost outer variable
    ``xvar`` at once: for each reduction index, a vector loop over the tile (contiguous loads when the
    reduced axis is not the innermost one). Accumulators are arrays indexed by ``xi``."""
    T = CTYPE[red.dtype]
    R = prod(rr)
    define_x = f"const int64_t {xvar} = xt + xi;"
    init = [f"{T} {red.acc}[{TILE}];"]
    sets = [f"{red.acc}[xi] = {identity_literal(red)};"]
    if red.kind in ("argmax", "argmin"):
        init.append(f"int64_t {red.acc}_idx[{TILE}];")
        sets.append(f"{red.acc}_idx[xi] = 0;")
    lines = init + ["#pragma omp simd", "for (int64_t xi = 0; xi < xn; ++xi)"] + block(sets)
    rvars = []
    for d in range(len(rr)):
        stride = prod(rr[d + 1:])
        e = "rl" if stride == 1 else f"rl / {csize(stride)}"
        if d > 0:
            e = f"({e}) % {csize(rr[d])}"
        rvars.append(f"const int64_t r{d} = {e};")
    partial = _uses_partial(red) and (is_symbolic(R) or R > TILE_SUM_CHUNK)
    target = f"{red.acc}_p" if partial else red.acc
    step = ["#pragma omp simd", "for (int64_t xi = 0; xi < xn; ++xi)"] + block(
        [define_x] + body + [combine_line(red, f"{target}[xi]", "rl", f"{red.acc}_idx[xi]")])
    if partial:
        rloop = [f"for (int64_t rl = rc; rl < std::min<int64_t>(rc + {TILE_SUM_CHUNK}, {csize(R)}); ++rl)"] + block(rvars + step)
        zero = ["#pragma omp simd", "for (int64_t xi = 0; xi < xn; ++xi)", f"    {target}[xi] = {identity_literal(red)};"]
        add = ["#pragma omp simd", "for (int64_t xi = 0; xi < xn; ++xi)",
               f"    {red.acc}[xi] = {red.acc}[xi] + {target}[xi];"]
        lines += [f"for (int64_t rc = 0; rc < {csize(R)}; rc += {TILE_SUM_CHUNK})"] + block(
            [f"{T} {target}[{TILE}];"] + zero + rloop + add)
    else:
        lines += [f"for (int64_t rl = 0; rl < {csize(R)}; ++rl)"] + block(rvars + step)
    lines += ["#pragma omp simd", "for (int64_t xi = 0; xi < xn; ++xi)"] + block([define_x] + post)
    return lines


def tiled_pointwise(body: list[str], xvar: str) -> list[str]:
    return ["#pragma omp simd", "for (int64_t xi = 0; xi < xn; ++xi)"] + block([f"const int64_t {xvar} = xt + xi;"] + body)


def linear_coeff(expr, v) -> int | None:
    """The integer coefficient of ``v`` in ``expr`` when ``v`` appears only linearly; else None."""
    expr = sympy.expand(expr)
    c = 0
    for term in sympy.Add.make_args(expr):
        if not term.has(v):
            continue
        coeff, rest = term.as_coeff_Mul()
        if rest == v and coeff.is_Integer:
            c += int(coeff)
            continue
        coeff, rest = term.as_independent(v, as_Add=False)  # a size-symbol coefficient: 16*s0*x0
        if rest != v or not coeff.free_symbols or any(s.name[0] in "xrq" for s in coeff.free_symbols):
            return None
        c = sympy.expand(c + coeff)
    return c


def wants_tiling(members, k: int) -> bool:
    """Tile the innermost outer loop when a reduction reads along it contiguously but not along its own
    innermost reduction axis (e.g. a sum over dim 0 of a row-major matrix)."""
    if k < 1 or any(len(m.ranges) != k for m in members) or not any(m.is_reduction for m in members):
        return False
    if hint(members[0].ranges[k - 1]) < 16:  # a heuristic: right for every size
        return False
    x = var("x", k - 1)
    for m in members:
        if not m.is_reduction:
            continue
        rr = [n for n in m.node.data.reduction_ranges if n != 1]
        r = var("r", len(rr) - 1)
        cx = [linear_coeff(index, x) for _, index in m.reads]
        cr = [linear_coeff(index, r) for _, index in m.reads]
        if any(c == 1 for c in cx) and not any(c == 1 for c in cr):
            return True
    return False


# --------------------------------------------------------------------------------- merged pointwise


def merge_loops(ranges: list[int], indices: list) -> tuple[list[int], dict]:
    """Merge adjacent loop dims ``d, d+1`` wherever every index expression reads them as one
    contiguous dim (coefficient of ``x_d`` == coefficient of ``x_{d+1}`` * size of ``d+1``). Returns the
    new loop sizes and the substitution from old loop variables to the new ones."""
    n = len(ranges)
    if n < 2:
        return list(ranges), {}
    coeffs = []
    for e in indices:
        coeffs.append([linear_coeff(e, var("x", d)) for d in range(n)])
    joins = []
    for d in range(n - 1):
        ok = all(c[d] is not None and c[d + 1] is not None and _same(c[d], c[d + 1] * ranges[d + 1]) for c in coeffs)
        joins.append(ok)
    if not any(joins):
        return list(ranges), {}
    runs, start = [], 0
    for d in range(n - 1):
        if not joins[d]:
            runs.append((start, d))
            start = d + 1
    runs.append((start, n - 1))
    subs, new_ranges = {}, []
    for j, (a, b) in enumerate(runs):
        new_ranges.append(prod(ranges[a:b + 1]))
        for d in range(a, b):
            subs[var("x", d)] = sympy.Integer(0)
        subs[var("x", b)] = var("x", j)
    return new_ranges, subs


def _same(a, b) -> bool:
    """Sizes equal for every value of the size symbols."""
    if not (is_symbolic(a) or is_symbolic(b)):
        return a == b
    return sympy.expand(a - b) == 0
