"""Which tensor inputs of a graph share memory: traced as it was, checked by a guard on every call.

A graph that writes a tensor in place is traced on fakes that share a storage exactly when the real
inputs shared one (``kiln.fake.mode``), and the backend's functionalized graph is right only for that
aliasing: traced with `a` and `b` in separate memory, a call with `b = a.view(...)` must see the
writes to `a` through `b`, which the compiled graph does not do. So a graph that mutates any tensor
gets a guard on the aliasing of its inputs as it was while tracing (``aliasing_signature``); another
aliasing fails the guard and the frame is traced again for it.

What the signature covers:
- the frame's tensor inputs (arguments, globals, attributes read through them): for each, the first
  input whose memory it overlaps (its own index when none);
- the tensors the graph holds (parameters and buffers, whose storages were laid out before tracing):
  for each input, which held tensor's storage it is (-1 for none). Their memory ranges are taken when
  the guard is made; a held tensor whose storage is replaced later (``p.data = other``) keeps its old
  range here (see docs/capture.md).

Two memories that overlap without being the same storage start and size (two ``torch.from_numpy``
of overlapping parts of one array) cannot be traced, because fakes model sharing by storage only: the
signature is None then, a guard never matches it, and tracing refuses it (``unsupported``).
"""
from __future__ import annotations

import bisect

import torch

from kiln.fake.shapes import is_dense


def memory_range(t: torch.Tensor) -> tuple[int, int]:
    """The byte range [start, end) of t's whole storage."""
    storage = t.untyped_storage()
    start = storage.data_ptr()
    return start, start + storage.nbytes()


class HeldRanges:
    """The memory ranges of the tensors a graph holds, sorted, for lookups by address."""

    def __init__(self, tensors: list[torch.Tensor], live: bool = False):
        # live: the ranges are read again at each check (a graph that assigns a held tensor's .data: its
        # memory changes between calls); else they are the ones at tracing
        self.tensors = list(tensors) if live else None
        self._take(tensors)

    def _take(self, tensors) -> None:
        self.ranges = sorted({r for r in map(memory_range, tensors) if r[1] > r[0]})
        self.index = {r: j for j, r in enumerate(self.ranges)}
        self.starts = [s for s, _ in self.ranges]
        self.disjoint = all(a[1] <= b[0] for a, b in zip(self.ranges, self.ranges[1:]))

    def refresh(self) -> None:
        if self.tensors is not None:
            self._take(self.tensors)

    def find(self, rng: tuple[int, int]):
        """The index of the held range equal to ``rng``; -1 if it overlaps none; None if it overlaps one
        without being it."""
        j = self.index.get(rng)
        if j is not None:
            return j
        start, end = rng
        if end == start or not self.ranges:
            return -1
        if self.disjoint:  # only the last range starting before `end` can overlap, if any does
            i = bisect.bisect_left(self.starts, end) - 1
            return None if i >= 0 and self.ranges[i][1] > start else -1
        return None if any(hs < end and start < he for hs, he in self.ranges) else -1


def aliasing_signature(tensors: tuple, held: HeldRanges | None):
    """For each input tensor, the index of the first input whose storage it shares (its own when none),
    and (with ``held``) the held storage it is. None where two memories overlap without being one
    storage (see the module docstring)."""
    ranges = []
    for t in tensors:
        storage = t.untyped_storage()
        start = storage.data_ptr()
        ranges.append((start, start + storage.nbytes()))
    firsts = _sharing(ranges)
    if firsts is None or held is None:
        return firsts
    held.refresh()
    in_held = tuple(map(held.find, ranges))
    return None if None in in_held else (firsts, in_held)


def _sharing(ranges: list[tuple[int, int]]):
    """Per range, the index of the first equal range; None if two overlap without being equal."""
    order = sorted(range(len(ranges)), key=ranges.__getitem__)
    firsts = list(range(len(ranges)))
    end_so_far, last = -1, None  # the furthest end among ranges before, and the index of the range giving it
    for i in order:
        start, end = ranges[i]
        if start == end:
            continue  # an empty storage overlaps nothing
        if start < end_so_far:
            if ranges[last] != ranges[i]:
                return None
            firsts[i] = last  # (a stable sort: equal ranges in index order, `last` the first of them)
        if end > end_so_far:
            end_so_far, last = end, i
    return tuple(firsts)


def partial_overlap(a: torch.Tensor, b: torch.Tensor) -> bool:
    """ATen's ``get_overlap_status(a, b) == Partial``, on which ``assert_no_partial_overlap`` raises (an
    in-place op whose source partly overlaps what it writes: ``x[1:].copy_(x[:-1])``): one storage, dense
    layouts, memory ranges that meet without being the same elements in the same order. With symbolic
    sizes in one storage it answers True (the caller breaks the graph and eager decides)."""
    if a.untyped_storage()._cdata != b.untyped_storage()._cdata:
        return False
    numbers = (*a.shape, *a.stride(), *b.shape, *b.stride(), a.storage_offset(), b.storage_offset())
    if any(isinstance(n, torch.SymInt) for n in numbers):  # the same elements in the same order, or True
        layout = lambda x: [str(n) for n in (*x.shape, *x.stride(), x.storage_offset())]  # noqa: E731
        return a.dim() != b.dim() or layout(a) != layout(b)
    if a.numel() == 0 or b.numel() == 0 or not (is_dense(a.shape, a.stride()) and is_dense(b.shape, b.stride())):
        return False  # (ATen: no overlap, or too hard to tell, which it lets pass)
    a_begin, b_begin = a.storage_offset() * a.element_size(), b.storage_offset() * b.element_size()
    a_end, b_end = a_begin + a.numel() * a.element_size(), b_begin + b.numel() * b.element_size()
    if (a_begin, a_end) == (b_begin, b_end):
        return a.stride() != b.stride()
    return a_begin < b_end and b_begin < a_end
