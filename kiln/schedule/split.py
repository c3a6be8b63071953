"""Splitting a node's loop dims so that it can share outer loops with a fusion group.

A view between two ops gives them different loop nests: layer_norm's statistics loop over [2, 16]
while the normalized output, reshaped for a matmul, loops over [32, 32]. Splitting a loop dim is always
legal (``x0`` in [32] becomes ``16*y0 + y1`` with ``y0`` in [2], ``y1`` in [16]), so the scheduler may
re-split a node's dims to start with a group's outer loop sizes, and then check fusion legality as
usual. The split node computes the same elements into the same memory: only its loop nest, and the
buffer's logical size and strides (a view of the same layout), change.
"""
from __future__ import annotations

import dataclasses

import sympy

from kiln.loopir.nodes import ComputedBuffer
from kiln.loopir.sizes import divides, is_symbolic, prod


def refine(ranges: list[int], outer: list[int]) -> list[list[int]] | None:
    """Factors splitting each of ``ranges`` so that the split sizes begin with more of ``outer`` than
    ``ranges`` does; None when splitting gains nothing (or a size is 0: an empty loop has nothing to split)."""
    if any(not is_symbolic(n) and n == 0 for n in [*ranges, *outer]):
        return None
    factors, i, matching = [], 0, True
    for n in ranges:
        fs = []
        while matching and i < len(outer):
            o = outer[i]
            if n == o:
                fs.append(n)
                n = 1
                i += 1
                break
            if is_symbolic(n) or is_symbolic(o):  # split only where it holds for every size: 16*s0 by 16, 4*s0 by s0
                if divides(o, n) and _is_size_product(sympy.expand(n / o)):
                    fs.append(o)
                    n = sympy.expand(n / o)
                    i += 1
                    continue
                matching = False
                continue
            if n > o and n % o == 0:
                fs.append(o)
                n //= o
                i += 1
                continue
            matching = False
        if n != 1:
            fs.append(n)
        factors.append(fs)
    new = [f for fs in factors for f in fs]
    if _prefix(new, outer) <= _prefix(ranges, outer):
        return None
    return factors


def _is_size_product(q) -> bool:
    """A positive integer for every size: an integer times size symbols (a loop extent)."""
    coeff, rest = sympy.sympify(q).as_coeff_Mul()
    return coeff.is_Integer and coeff > 0 and all(f.is_positive and f.is_integer for f in sympy.Mul.make_args(rest))


def _prefix(a, b) -> int:
    k = 0
    while k < len(a) and k < len(b) and a[k] == b[k]:
        k += 1
    return k


def split_buffer(buf: ComputedBuffer, factors: list[list[int]]) -> ComputedBuffer:
    """A copy of ``buf`` whose loop dims (the non-1 ones, in order) are split by ``factors``."""
    data = buf.data
    assert tuple(data.ranges) == tuple(buf.size), "loop ranges of a computed buffer are its size"
    per_dim, it = [], iter(factors)
    for n in buf.size:
        per_dim.append([1] if n == 1 else next(it))
    size, stride = [], []
    for fs, s in zip(per_dim, buf.stride):
        for j, f in enumerate(fs):
            size.append(f)
            stride.append(prod([s, *fs[j + 1:]]))
    inner = data.body

    def body(ops, index, *rest):
        old, i = [], 0
        for fs in per_dim:
            e = sympy.Integer(0)
            for f in fs:
                e = e * f + index[i]
                i += 1
            old.append(sympy.expand(e))
        return inner(ops, old, *rest)

    new_data = dataclasses.replace(data, ranges=tuple(size), body=body)
    return dataclasses.replace(buf, size=tuple(size), stride=tuple(stride), data=new_data)


def adopt(buf: ComputedBuffer, split: ComputedBuffer) -> None:
    """Make ``buf`` (the object every reader holds) the split version."""
    buf.size, buf.stride, buf.data = split.size, split.stride, split.data
