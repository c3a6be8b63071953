"""Row caches: a costly value that one member of a kernel computes in its row loop, and a later member
computes again for the same row elements, is stored in a per-thread array and loaded back.

Softmax is the example: ``sum(exp(x - max))`` computes ``exp(x - max)`` for each element of the row,
and the output ``exp(x - max) / sum`` would compute it again. With a row cache the reduction member
stores each ``exp`` into ``row0[r0]`` and the pointwise member reads ``row0[x2]``: one exp per
element instead of two.

Members iterate "the same row" when a reduction member's reduction loops (its only inner loops) and a
pointwise member's inner loops have equal sizes; a row element is then named by canonical variables
``q0, q1, ...`` (``r_d`` of the reduction, ``x_{k+d}`` of the pointwise member) and values are
compared by a structural key (``CppOps`` interns each value's expression with its operands' keys
and canonical indices). Planning runs every member's body once (``plan_rows``); generation then runs
them again with each member's ``MemberRows``: which values it stores and which it loads.
"""
from __future__ import annotations

import dataclasses
import math

import sympy

from kiln.codegen.cpp.loops import csize, rindex_linear
from kiln.codegen.cpp.ops import CTYPE, CppOps
from kiln.loopir.handlers import run_body
from kiln.loopir.index import var
from kiln.loopir.sizes import any_symbolic, prod, static_prod

ROW_CACHE_BYTES = 65536  # largest row (per cached value) kept in a per-thread array


@dataclasses.dataclass
class MemberRows:
    """Row-cache state of one member while its code is generated (and, in planning, what it computed)."""

    key_subs: dict  # the member's row loop variables -> canonical q variables (structural keys)
    index: str  # C expression of the linear row index in this member's loops
    loads: dict = dataclasses.field(default_factory=dict)  # value id -> row array it reads from
    stores: dict = dataclasses.field(default_factory=dict)  # value id -> row array it writes to
    # recorded by CppOps: value ids computed per row element, the costly ones, their users, sinks
    computed: dict = dataclasses.field(default_factory=dict)  # id -> dtype of values that vary along the row
    costly: set = dataclasses.field(default_factory=set)
    users: dict = dataclasses.field(default_factory=dict)  # value id -> ids of values computed from it
    sinks: set = dataclasses.field(default_factory=set)  # ids stored or reduced


def _row_shape(member, k: int):
    """(row sizes, canonical substitution, C linear index) of a member, or None when it has no row."""
    inner = member.ranges[k:]
    if member.is_reduction:
        rr = [n for n in member.node.data.reduction_ranges if n != 1]
        if inner or not rr:
            return None
        subs = {var("r", d): sympy.Symbol(f"q{d}", integer=True, nonnegative=True) for d in range(len(rr))}
        return tuple(rr), subs, rindex_linear(rr)
    if not inner:
        return None
    subs = {var("x", k + d): sympy.Symbol(f"q{d}", integer=True, nonnegative=True) for d in range(len(inner))}
    terms = [f"x{k + d}*{csize(prod(inner[d + 1:]))}" if d < len(inner) - 1 else f"x{k + d}" for d in range(len(inner))]
    return tuple(inner), subs, " + ".join(terms)


def _row_decl(ctype: str, name: str, row) -> list[str]:
    """A per-thread row array: on the stack for a static row, on the heap (sized per call) for a symbolic one."""
    if not any_symbolic(row):
        return [f"{ctype} {name}[{math.prod(row)}];"]
    return [f"std::unique_ptr<{ctype}[]> {name}_owner(new {ctype}[{csize(prod(row))}]);",
            f"{ctype}* {name} = {name}_owner.get();"]


def plan_rows(ctx, members, buffers) -> tuple[list[MemberRows | None], list[str]]:
    """Each member's row-cache state for generation, and the declarations of the row arrays."""
    shapes = [_row_shape(m, ctx.k) for m in members]
    states = [MemberRows(s[1], s[2]) if s else None for s in shapes]
    for m, st in zip(members, states):  # planning run: record what each member computes
        ctx.rows = st
        run_body(m.node, CppOps(ctx))
    ctx.rows = None
    first: dict[int, int] = {}  # value id -> first member computing it per row element
    arrays: dict[int, str] = {}  # value id -> its row array
    decls: list[str] = []
    for i, st in enumerate(states):
        if st is None:
            continue
        matched = {v for v in st.costly if v in first and shapes[first[v]][0] == shapes[i][0]}
        for v in sorted(matched):
            if v not in st.sinks and all(u in matched for u in st.users.get(v, ())):
                continue  # only used to compute other cached values
            dtype = st.computed[v]
            if static_prod(shapes[i][0]) * dtype.itemsize > ROW_CACHE_BYTES:
                continue  # (a symbolic row: judged at the hints, a speed choice; the array fits any size)
            if v not in arrays:
                arrays[v] = f"row{len(arrays)}"
                decls += _row_decl(CTYPE[dtype], arrays[v], shapes[i][0])
                states[first[v]].stores[v] = arrays[v]
            st.loads[v] = arrays[v]
        for v in st.computed:
            first.setdefault(v, i)
    for st in states:
        if st is not None:
            st.computed.clear(), st.costly.clear(), st.users.clear(), st.sinks.clear()
    return states, decls
