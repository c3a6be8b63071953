"""Fusion legality and score, as pure functions of scheduler nodes.

Nodes of one fused kernel share an outer loop nest over their first ``k`` loop dims (the common
prefix of their loop sizes); each node then runs its own inner loops for one outer iteration. That
is legal when every value a member reads from another member was written by that member in the same
outer iteration: the load's index and the producer's store index must have the same coefficients
on the outer variables, and the rest of the load's index must stay inside the block of elements the
producer writes per outer iteration.
"""
from __future__ import annotations

import sympy

from kiln.loopir.index import expr_bounds, expr_range, var
from kiln.loopir.sizes import any_symbolic, hint, is_symbolic, known, prod
from kiln.loopir.nodes import is_dense
from kiln.schedule.nodes import SchedulerNode


def common_prefix(a: list[int], b: list[int]) -> int:
    k = 0
    while k < len(a) and k < len(b) and (a[k] == b[k] or (is_symbolic(a[k]) and sympy.expand(a[k] - b[k]) == 0)):
        k += 1
    return k


def split_outer(expr: sympy.Expr, k: int):
    """expr = sum(c_d * x_d for d < k) + rest; returns ([c_0..c_{k-1}], rest) or None if the outer
    variables do not appear linearly."""
    expr = sympy.expand(expr)
    outer = [var("x", d) for d in range(k)]
    coeffs = [0] * k
    rest = sympy.Integer(0)
    for term in sympy.Add.make_args(expr):
        coeff, sym = term.as_coeff_Mul()
        if sym in outer and coeff.is_Integer:
            coeffs[outer.index(sym)] += int(coeff)
            continue
        # a size-symbol coefficient (kiln.loopir.sizes): 16*s0*x0
        coeff, sym = term.as_independent(*outer, as_Add=False)
        if sym in outer and not _has_loop_var(coeff):
            coeffs[outer.index(sym)] = sympy.expand(coeffs[outer.index(sym)] + coeff)
        else:
            if any(term.has(o) for o in outer):
                return None
            rest += term
    return coeffs, rest


def _has_loop_var(e) -> bool:
    return any(s.name[0] in "xr" for s in getattr(e, "free_symbols", ()))


def block_of(producer: SchedulerNode, k: int):
    """For a producer fused at outer depth ``k``: (outer coefficients, block size) of what it writes
    per outer iteration, when that is a dense block [base, base + block); else None."""
    buf = producer.node
    stride = [s for s, n in zip(buf.stride, buf.size) if n != 1]
    sizes = [n for n in buf.size if n != 1]
    if len(sizes) != len(producer.ranges) or sizes != producer.ranges:
        return None  # the node's loops are not its buffer's dims one to one
    inner_sizes, inner_strides = sizes[k:], stride[k:]
    if not is_dense(inner_sizes, inner_strides):
        return None
    return stride[:k], prod(inner_sizes)


def read_is_local(index: sympy.Expr, block, k: int, ranges: dict) -> bool:
    """Does a load at ``index`` (consumer variables) stay within the producer's block at depth k?"""
    parts = split_outer(index, k)
    if parts is None:
        return False
    coeffs, rest = parts
    outer_coeffs, size = block
    if any(sympy.expand(a - b) != 0 for a, b in zip(coeffs, outer_coeffs)):
        return False
    if any_symbolic(list(ranges.values())) or is_symbolic(size) or (rest.free_symbols - set(ranges)):
        r = expr_bounds(rest, ranges)  # decided for every size, or not fused
        return r is not None and known(sympy.Ge(r[0], 0)) is True and known(sympy.Lt(r[1], size)) is True
    r = expr_range(rest, ranges)
    return r is not None and r[0] >= 0 and r[1] < size


def loop_var_ranges(node: SchedulerNode) -> dict:
    """Extents of the variables a node's body uses."""
    out = {var("x", d): n for d, n in enumerate(node.ranges)}
    if node.is_reduction:
        rr = [n for n in node.node.data.reduction_ranges if n != 1]
        out.update({var("r", d): n for d, n in enumerate(rr)})
    return out


def group_legal(members: list[SchedulerNode], k: int) -> bool:
    """Can ``members`` (in program order) share an outer loop nest of depth ``k``?"""
    if k < 1:
        return False
    by_name = {w: m for m in members for w in m.writes}
    for consumer in members:
        ranges = loop_var_ranges(consumer)
        for name, index in consumer.reads:
            producer = by_name.get(name)
            if producer is None or producer is consumer:
                continue
            block = block_of(producer, k)
            if block is None or not read_is_local(index, block, k, ranges):
                return False
    return True


def score(group_reads: set[str], group_writes: set[str], node: SchedulerNode, nbytes: dict) -> int:
    """Bytes of memory traffic a fusion saves: buffers the node reads that the group writes
    (vertical) or also reads (horizontal)."""
    shared = node.read_names & (group_reads | group_writes)
    return sum(hint(nbytes.get(name, 0)) for name in shared)
