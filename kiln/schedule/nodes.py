"""Scheduler nodes: a loop-IR buffer (or extern kernel) with its memory accesses."""
from __future__ import annotations

import dataclasses

import sympy

from kiln.loopir.handlers import ReadsWrites, effective_ranges, run_body
from kiln.loopir.nodes import ComputedBuffer, ExternKernel, Reduction, Stored, unbacked_sizes


@dataclasses.dataclass(eq=False)
class SchedulerNode:
    node: ComputedBuffer | ExternKernel
    reads: list[tuple[str, sympy.Expr]]  # (buffer, index) loads; index None for extern inputs
    writes: list[str]
    deps: set["SchedulerNode"] = dataclasses.field(default_factory=set)
    order: int = 0
    symbols: frozenset = frozenset()  # the size symbols its loops, indices and values use

    @property
    def name(self) -> str:
        return self.node.name

    @property
    def is_extern(self) -> bool:
        return isinstance(self.node, ExternKernel)

    @property
    def is_reduction(self) -> bool:
        return isinstance(self.node, ComputedBuffer) and isinstance(self.node.data, Reduction)

    @property
    def ranges(self) -> list[int]:
        """Sizes of the node's (non-reduction) loops, size-1 dims dropped."""
        return effective_ranges(self.node.data.ranges) if not self.is_extern else []

    @property
    def read_names(self) -> set[str]:
        return {name for name, _ in self.reads}

    def __repr__(self) -> str:
        return f"SchedulerNode({self.name})"


def _extern_leaves(kernel: ExternKernel) -> list:
    from torch.utils._pytree import tree_flatten

    return tree_flatten((kernel.args, kernel.kwargs))[0]


def _extern_reads(kernel: ExternKernel) -> list[tuple[str, None]]:
    return [(v.buffer.name, None) for v in _extern_leaves(kernel) if isinstance(v, Stored)]


def _free_symbols(exprs) -> frozenset:
    out: set = set()
    for e in exprs:
        if isinstance(e, sympy.Basic):
            out |= e.free_symbols
    return frozenset(out)


def make_node(buf: ComputedBuffer, dtypes, order: int, deps) -> SchedulerNode:
    """The scheduler node of a computed buffer: its loads from running its body."""
    rw = ReadsWrites(dtypes)
    run_body(buf, rw)
    symbols = _free_symbols([*buf.data.ranges, *getattr(buf.data, "reduction_ranges", ()),
                             *(i for _, i in rw.reads), *(i for _, i in rw.writes), *rw.values])
    return SchedulerNode(buf, rw.reads, [buf.name], set(deps), order=order, symbols=symbols)


def make_scheduler_nodes(nodes, dtypes) -> list[SchedulerNode]:
    """One SchedulerNode per lowered node, with dependencies from what each reads, and on the extern
    kernel whose result's size defines a data-dependent size it uses (``u0 = buf3.size(0)`` in the
    wrapper: a kernel computing ``x * u0`` fused before that extern read it unbound)."""
    out: list[SchedulerNode] = []
    producer: dict[str, SchedulerNode] = {}
    definer: dict = {}  # unbacked symbol -> the extern node whose result's size defines it
    for i, n in enumerate(nodes):
        if isinstance(n, ExternKernel):
            sn = SchedulerNode(n, _extern_reads(n), [o.name for o in n.outputs], order=i,
                               symbols=_free_symbols(_extern_leaves(n)))
        else:
            sn = make_node(n, dtypes, i, set())
        sn.deps = {producer[name] for name in sn.read_names if name in producer}
        sn.deps |= {definer[s] for s in sn.symbols if s in definer}
        for w in sn.writes:
            producer[w] = sn
        if sn.is_extern:
            for o in n.outputs:
                for _, s in unbacked_sizes(o.size):
                    definer.setdefault(s, sn)
        out.append(sn)
    return out
