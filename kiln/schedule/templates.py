"""Matmul templates: a 2-D ``mm``/``addmm`` library call merged with the pointwise kernel that consumes
its result, so a generated Triton matmul can compute both in one kernel (``Options.matmul_templates``,
the "max-autotune" modes).

A pass over a finished ``Schedule`` (Triton targets only). For each ``ExternStep`` of ``aten.mm`` /
``aten.addmm`` on 2-D float16/bfloat16/float32 operands it makes a ``MatmulTemplate`` step:

* The *epilogue* is the first step reading the matmul's result that is a ``FusedGroup`` whose members
  are all pointwise over exactly the (M, N) result space (their loop sizes split into a row part of
  product M and a column part of product N) and read the result only at the element they compute.
  The template runs at the position of the result's first reader (nothing reads the result before
  it), so an epilogue that is not the first reader must have all its other inputs computed before
  that position; the epilogue group leaves the schedule.
* Otherwise the template has no epilogue and runs at the library call's position.
* The result is stored (``store_out``) when it is a graph output or another step reads it; else it
  lives only in registers and is never allocated.

The code generator (``codegen/triton/matmul.py``) writes the tiled kernel, and keeps the library
path (ATen ``mm``/``addmm``, then the epilogue group's own kernel) to time against it.
"""
from __future__ import annotations

import dataclasses
import math

import sympy
import torch

from kiln.loopir.index import linear_index, var
from kiln.loopir.sizes import any_symbolic
from kiln.loopir.nodes import Stored, contiguous_strides
from kiln.loopir.scan import is_scan
from kiln.loopir.scatter import is_update
from kiln.loopir.sort import is_row_sort
from kiln.schedule.scheduler import ExternStep, FusedGroup, Schedule

aten = torch.ops.aten

MATMUL_OPS = {aten.mm.default: "mm", aten.addmm.default: "addmm"}
TEMPLATE_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


@dataclasses.dataclass(eq=False)
class MatmulTemplate:
    """One generated matmul kernel: ``out = a @ b`` (``alpha * (a @ b) + beta * bias`` for addmm),
    rounded to its dtype, then the ``epilogue`` group's members on each output tile."""

    extern: object  # the SchedulerNode of the library call it replaces
    epilogue: FusedGroup | None
    index: int
    kind: str  # "mm" | "addmm"
    a: Stored
    b: Stored
    bias: Stored | None
    alpha: float
    beta: float
    out: str  # the matmul result's buffer
    store_out: bool  # the result is needed in memory too (graph output, or read by another step)
    row_dims: int  # how many of the epilogue's loops index rows (the rest index columns)
    name: str = ""

    @property
    def shape(self) -> tuple[int, int, int]:
        (m, k), n = self.a.size, self.b.size[1]
        return int(m), int(n), int(k)

    @property
    def operand_reads(self) -> list[str]:
        views = [self.a, self.b] + ([self.bias] if self.bias is not None else [])
        return [v.buffer.name for v in views]

    @property
    def epilogue_reads(self) -> list[str]:
        if self.epilogue is None:
            return []
        produced = self.epilogue.writes
        return [r for m in self.epilogue.members for r, _ in m.reads if r not in produced and r != self.out]

    @property
    def epilogue_writes(self) -> list[str]:
        if self.epilogue is None:
            return []
        return [w for m in self.epilogue.members for w in m.writes if w not in self.epilogue.locals]

    @property
    def reads(self) -> set[str]:
        return set(self.operand_reads) | set(self.epilogue_reads)

    @property
    def writes(self) -> set[str]:
        return set(self.epilogue_writes) | ({self.out} if self.store_out else set())

    def describe(self) -> str:
        m, n, k = self.shape
        epi = f" + epilogue [{', '.join(x.name for x in self.epilogue.members)}]" if self.epilogue else ""
        stored = "" if self.store_out else f" ({self.out} kept in registers)"
        return f"template {self.name}: {self.kind} {m}x{n}x{k}{epi}{stored}"


def template_steps(sched: Schedule) -> list[MatmulTemplate]:
    return [s for s in sched.steps if isinstance(s, MatmulTemplate)]


def _step_reads(step) -> set[str]:
    if isinstance(step, ExternStep):
        return step.node.read_names
    return step.reads


def _step_writes(step) -> set[str]:
    if isinstance(step, ExternStep):
        return set(step.node.writes)
    return step.writes


def fuse_matmul_templates(sched: Schedule, buffers: dict, output_names: set[str]) -> Schedule:
    """``sched`` with every eligible matmul call turned into a ``MatmulTemplate`` (see the module doc)."""
    steps = list(sched.steps)
    for ext in [s for s in steps if isinstance(s, ExternStep)]:
        operands = matmul_operands(ext.node.node)
        if operands is None:
            continue
        out = ext.node.writes[0]
        readers = sorted((s for s in steps if s is not ext and out in _step_reads(s)), key=steps.index)
        epilogue, row_dims = _pick_epilogue(steps, readers, out, buffers)
        store_out = out in output_names or any(r is not epilogue for r in readers)
        t = MatmulTemplate(ext.node, epilogue, 0, *operands, out=out, store_out=store_out, row_dims=row_dims)
        if epilogue is not None:
            steps[steps.index(readers[0])] = t  # the first reader comes right after the template
            if readers[0] is not epilogue:
                steps.insert(steps.index(t) + 1, readers[0])
                steps.remove(epilogue)
            steps.remove(ext)
        else:
            steps[steps.index(ext)] = t
    for i, s in enumerate(steps):
        s.index = i
    return Schedule(steps)


def _pick_epilogue(steps, readers, out: str, buffers) -> tuple[FusedGroup | None, int]:
    """The first reader of ``out`` that can be its epilogue, run where the first reader runs: it
    must be that reader, or have all its other inputs computed before it."""
    for group in readers:
        if not isinstance(group, FusedGroup):
            continue
        row_dims = epilogue_split(group, out, buffers[out])
        if row_dims is None:
            continue
        if group is readers[0]:
            return group, row_dims
        first = steps.index(readers[0])
        before = set().union(*(_step_writes(s) for s in steps[:first]))
        later = set().union(*(_step_writes(s) for s in steps[first:]))
        if not ((group.reads - {out}) & later - before):
            return group, row_dims
    return None, 0


def matmul_operands(kernel):
    """(kind, a, b, bias, alpha, beta) for a library call a template can replace, else None."""
    kind = MATMUL_OPS.get(kernel.op)
    if kind is None or len(kernel.outputs) != 1:
        return None
    out = kernel.outputs[0]
    if kind == "mm":
        if len(kernel.args) != 2 or kernel.kwargs:
            return None
        (a, b), bias, alpha, beta = kernel.args, None, 1, 1
    else:
        if len(kernel.args) != 3 or set(kernel.kwargs) - {"alpha", "beta"}:
            return None
        bias, a, b = kernel.args
        alpha, beta = kernel.kwargs.get("alpha", 1), kernel.kwargs.get("beta", 1)
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (alpha, beta)):
            return None
        if not isinstance(bias, Stored) or bias.dtype != out.dtype or not broadcasts_to(bias.size, out.size):
            return None
    if not (isinstance(a, Stored) and isinstance(b, Stored)) or len(a.size) != 2 or len(b.size) != 2:
        return None
    if out.dtype not in TEMPLATE_DTYPES or a.dtype != out.dtype or b.dtype != out.dtype:
        return None
    if any(any_symbolic(tuple(v.size) + tuple(v.stride) + (v.offset,)) for v in (a, b, bias) if v is not None):
        return None  # symbolic sizes: the library call (the wrapper computes its sizes per call)
    if min(int(a.size[0]), int(a.size[1]), int(b.size[1])) == 0:
        return None  # nothing to compute (or zeros): the library call is exact and free
    return kind, a, b, bias, alpha, beta


def broadcasts_to(size, target) -> bool:
    if len(size) > len(target):
        return False
    return all(s in (1, t) for s, t in zip(reversed(size), reversed(target)))


def broadcast_strides(v: Stored, target) -> tuple[int, ...]:
    """Strides of ``v`` expanded to ``target`` (right-aligned; broadcast dims get stride 0)."""
    pad = len(target) - len(v.size)
    size, stride = (1,) * pad + tuple(v.size), (0,) * pad + tuple(v.stride)
    return tuple(0 if s == 1 and t != 1 else st for s, st, t in zip(size, stride, target))


def epilogue_split(group: FusedGroup, out: str, out_buf) -> int | None:
    """How many loops of ``group`` index the rows of the (M, N) result ``out``, when the group can be
    the result's epilogue; else None."""
    members = group.members
    ranges = members[0].ranges
    if any(m.is_reduction or is_scan(m) or is_row_sort(m) or m.ranges != ranges or is_update(m.node) for m in members) \
            or group.depth != len(ranges):
        return None
    if len(out_buf.size) != 2:
        return None
    m_size, n_size = (int(s) for s in out_buf.size)
    split = next((p for p in range(len(ranges) + 1)
                  if math.prod(ranges[:p]) == m_size and math.prod(ranges[p:]) == n_size), None)
    if split is None:
        return None
    xs = [var("x", d) for d in range(len(ranges))]
    row = linear_index(xs[:split], contiguous_strides(ranges[:split]))
    col = linear_index(xs[split:], contiguous_strides(ranges[split:]))
    want = linear_index([row, col], out_buf.stride)
    for m in members:
        for name, index in m.reads:
            if name == out and sympy.expand(sympy.sympify(index) - want) != 0:
                return None  # reads the result somewhere else than the element it computes
    return split
