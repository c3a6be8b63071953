"""Scheduler nodes: a loop-IR buffer (or extern kernel) with its memory accesses."""
from __future__ import annotations

import dataclasses

import sympy

from kiln.loopir.handlers import ReadsWrites, effective_ranges, run_body
from kiln.loopir.nodes import ComputedBuffer, ExternKernel, Reduction, Stored


@dataclasses.dataclass(eq=False)
class SchedulerNode:
    node: ComputedBuffer | ExternKernel
    reads: list[tuple[str, sympy.Expr]]  # (buffer, index) loads; index None for extern inputs
    writes: list[str]
    deps: set["SchedulerNode"] = dataclasses.field(default_factory=set)
    order: int = 0

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


def _extern_reads(kernel: ExternKernel) -> list[tuple[str, None]]:
    from torch.utils._pytree import tree_flatten

    leaves = tree_flatten((kernel.args, kernel.kwargs))[0]
    return [(v.buffer.name, None) for v in leaves if isinstance(v, Stored)]


def make_node(buf: ComputedBuffer, dtypes, order: int, deps) -> SchedulerNode:
    """The scheduler node of a computed buffer: its loads from running its body."""
    rw = ReadsWrites(dtypes)
    run_body(buf, rw)
    return SchedulerNode(buf, rw.reads, [buf.name], set(deps), order=order)


def make_scheduler_nodes(nodes, dtypes) -> list[SchedulerNode]:
    """One SchedulerNode per lowered node, with dependencies from what each reads."""
    out: list[SchedulerNode] = []
    producer: dict[str, SchedulerNode] = {}
    for i, n in enumerate(nodes):
        if isinstance(n, ExternKernel):
            sn = SchedulerNode(n, _extern_reads(n), [o.name for o in n.outputs], order=i)
        else:
            sn = make_node(n, dtypes, i, set())
        sn.deps = {producer[name] for name in sn.read_names if name in producer}
        for w in sn.writes:
            producer[w] = sn
        out.append(sn)
    return out
