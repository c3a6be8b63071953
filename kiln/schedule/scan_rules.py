"""Fusion rules for groups with scans (``loopir/scan.py``) and row sorts (``loopir/sort.py``).

A row sort's group holds only the results (values, indices) of one ``SortSpec``: one kernel sorts each
row once and writes both.

A scan kernel walks its rows element by element along the scanned dim (C++) or in blocks of a row
(Triton), so a group holding a scan may only hold nodes over the same loops: other scans along the same
dim (cummax's values and indices, cumsum and cumprod of one input) and pointwise nodes (producers the
scan reads, consumers of its result), each reading what the group computes only at the element it
computes itself. Such a member runs per element, in program order, after the members it reads.
"""
from __future__ import annotations

import sympy

from kiln.loopir.handlers import iteration_vars
from kiln.loopir.index import linear_index
from kiln.loopir.scan import is_scan, scan_loop
from kiln.loopir.sort import is_row_sort


def _store_index(member):
    xs, _ = iteration_vars(member.node)
    return linear_index(xs, member.node.stride)


def scan_group_ok(members, cand) -> bool | None:
    """None when neither the group nor ``cand`` has a scan (the usual rules decide); else whether
    ``cand`` may join the group of ``members``."""
    group = list(members) + [cand]
    sorts = [m for m in group if is_row_sort(m)]
    if sorts:
        return len(sorts) == len(group) and len({id(m.node.data.spec) for m in sorts}) == 1
    scans = [m for m in group if is_scan(m)]
    if not scans:
        return None
    if any(m.is_extern or m.is_reduction for m in group):
        return False
    if any(m.ranges != group[0].ranges for m in group):
        return False
    if len({scan_loop(m.node.data) for m in scans}) != 1:
        return False
    by_name = {w: m for m in group for w in m.writes}
    for consumer in group:
        for name, index in consumer.reads:
            producer = by_name.get(name)
            if producer is None or producer is consumer:
                continue
            if sympy.expand(sympy.sympify(index) - _store_index(producer)) != 0:
                return False
    return True
