"""C++/OpenMP code for one fused group: an ``extern "C"`` function over raw buffer pointers.

Shape of a kernel whose members share ``k`` outer loops::

    #pragma omp parallel                 (only above a work threshold)
    {
      <per-thread arrays for kernel-local buffers>
      #pragma omp for collapse(k)
      for x0 ... for x{k-1} {
        <kernel-local scalars>
        { member 1: its inner loops (reduction loop with accumulators, loops.reduction_loops) }
        { member 2 ... }
      }
    }

Variants:

* flat: pointwise members only, all over the outer loops. Adjacent loop dims that every access reads as
  one contiguous dim are merged (a contiguous [4096, 4096] op becomes one loop of 16M), the innermost
  loop is vectorized, the others run in parallel.
* tiled: the members are reductions (and pointwise ops) over the outer loops only, and a reduction reads
  contiguously along the innermost outer dim but not along its reduction axis (a sum over dim 0 of a
  row-major matrix). The innermost outer loop is cut into tiles of ``loops.TILE``; each member runs a
  vector loop over the tile for each reduction index, with per-tile accumulators.
* no outer loops (a reduction to one element): the reduction's outer loop (or chunks of its only loop)
  runs in parallel with an OpenMP reduction, the inner loop vectorized.
"""
from __future__ import annotations

import dataclasses

import torch

from kiln.codegen.common import kernel_name, kernel_params, mark_updated_in_place, provenance
from kiln.codegen.cpp.hoist import hoist_invariants
from kiln.codegen.cpp.loops import (
    TILE, block, csize, loop, merge_loops, omp_if, reduction_loops, tiled_pointwise, tiled_reduction,
    wants_tiling,
)
from kiln.codegen.cpp.ops import CTYPE, CppOps, accumulator_decls
from kiln.codegen.cpp.rows import plan_rows
from kiln.loopir.handlers import ReadsWrites, run_body
from kiln.loopir.nodes import Reduction
from kiln.loopir.scatter import is_update
from kiln.loopir.scan import is_scan
from kiln.loopir.sort import is_row_sort
from kiln.loopir.sizes import hint, is_symbolic, prod, used_size_symbols
from kiln.schedule.fusion import block_of, split_outer
from kiln.schedule.scheduler import FusedGroup

PARALLEL_THRESHOLD = 32768  # loop iterations below which a kernel runs on one thread
STACK_LOCAL_BYTES = 65536


@dataclasses.dataclass
class CppKernel:
    name: str
    source: str
    params: list[tuple[str, str]]  # (buffer name, "in" | "out") in parameter order
    origins: tuple
    work: int
    checks_bounds: bool = False  # reads loaded indices: the wrapper checks the library's error flag after it
    size_args: list = dataclasses.field(default_factory=list)  # size symbols passed after the buffers (int64_t)


class KernelContext:
    """What the ops handler needs to know about the kernel being generated."""

    def __init__(self, group: FusedGroup, buffers: dict):
        self.group = group
        self.buffers = buffers
        self.k = group.depth
        self.checks_bounds = False  # set by CppOps.indirect_indexing
        # loaded index variable -> C test that its dimension is not empty (only where it may be: a size of 0
        # or a symbolic one). No index is valid there, so an access through it must not happen at all.
        self.indirect_nonempty: dict = {}  # (loaded-index symbol -> C test)
        self.subs: dict = {}  # loop variable -> expression (merged loops)
        self.tiled = False  # kernel-local scalars are per-tile arrays indexed by ``xi``
        self.rows = None  # the member being generated's row caches (rows.MemberRows), if any
        self.value_ids: dict[str, int] = {}  # structural keys of values (row caches)
        writes = [w for m in group.members for w in m.writes if w not in group.locals]
        reads = [r for m in group.members for r, _ in m.reads if r not in group.locals and r not in writes]
        self.params, self.pointers = kernel_params(reads, writes)
        self.params = mark_updated_in_place(self.params, group.members)
        self.local_blocks: dict[str, int] = {}
        producers = {w: m for m in group.members for w in m.writes}
        for name in sorted(group.locals):  # sorted: the source (and its cache key) must not depend on set order
            self.local_blocks[name] = block_of(producers[name], self.k)[1]

    def dtype_of(self, name):
        return self.buffers[name].dtype

    def pointer(self, name):
        if name in self.local_blocks:
            return None if self.local_blocks[name] == 1 else f"local_{name}"
        return self.pointers[name]

    def local_scalar(self, name) -> str:
        return f"local_{name}[xi]" if self.tiled else f"local_{name}"

    def local_index(self, name, index):
        if name not in self.local_blocks:
            return index
        return split_outer(index, self.k)[1]

    def rename(self, expr):
        return expr.xreplace(self.subs) if self.subs else expr


def _reduction_ranges(node) -> list[int]:
    return [n for n in node.data.reduction_ranges if n != 1]


def _member_code(ctx: KernelContext, member) -> tuple[list[str], int]:
    """C++ for one member inside the outer loops, and its work per outer iteration."""
    node = member.node
    inner = member.ranges[ctx.k:]
    ops = CppOps(ctx)
    run_body(node, ops)
    if isinstance(node.data, Reduction):
        rr = _reduction_ranges(node)
        (red,) = ops.reductions
        body = accumulator_decls(ops.reductions) + reduction_loops(rr, ops.lines, red) + ops.post
        work = prod(inner) * (prod(rr) if rr else 1)
    else:
        body = list(ops.lines)
        work = prod(inner)
    for d in reversed(range(len(inner))):
        head = [loop(f"x{ctx.k + d}", inner[d])]
        if d == len(inner) - 1 and not isinstance(node.data, Reduction):
            head = ["#pragma omp simd"] + head
        body = head + block(body)
    return [f"// {node.name}"] + block(body), work


def _tiled_member_code(ctx: KernelContext, member) -> tuple[list[str], int]:
    node = member.node
    xvar = f"x{ctx.k - 1}"
    if isinstance(node.data, Reduction):
        rr = _reduction_ranges(node)
        ops = CppOps(ctx, acc_ref=lambda acc: f"{acc}[xi]")
        run_body(node, ops)
        (red,) = ops.reductions
        return [f"// {node.name}"] + block(tiled_reduction(rr, ops.lines, ops.post, red, xvar)), prod(rr) if rr else 1
    ops = CppOps(ctx)
    run_body(node, ops)
    return [f"// {node.name}"] + block(tiled_pointwise(ops.lines, xvar)), 1


def _all_indices(group: FusedGroup, dtypes) -> list:
    """Every index expression the group's bodies use (loads, stores, index_expr)."""

    class Indices(ReadsWrites):
        def index_expr(self, expr, dtype):
            self.writes.append(("", expr))
            return super().index_expr(expr, dtype)

    out = []
    for m in group.members:
        rw = Indices(dtypes)
        run_body(m.node, rw)
        out += [e for _, e in rw.reads] + [e for _, e in rw.writes]
    return out


def _local_decls(ctx: KernelContext, buffers) -> tuple[list[str], list[str]]:
    """Declarations of kernel-local buffers: (per outer iteration scalars, per thread arrays)."""
    scalars, arrays = [], []
    for n, b in ctx.local_blocks.items():
        T = CTYPE[buffers[n].dtype]
        if b == 1:
            scalars.append(f"{T} local_{n}[{TILE}];" if ctx.tiled else f"{T} local_{n};")
        elif is_symbolic(b):
            arrays += [f"std::unique_ptr<{T}[]> local_{n}_owner(new {T}[{csize(b)}]);",
                       f"{T}* local_{n} = local_{n}_owner.get();"]
        elif b * buffers[n].dtype.itemsize <= STACK_LOCAL_BYTES:
            arrays.append(f"{T} local_{n}[{b}];")
        else:
            arrays += [f"std::unique_ptr<{T}[]> local_{n}_owner(new {T}[{b}]);", f"{T}* local_{n} = local_{n}_owner.get();"]
    return scalars, arrays


def generate_kernel(group: FusedGroup, buffers: dict, index: int) -> CppKernel:
    if is_update(group.members[0].node):
        from kiln.codegen.cpp.scatter import generate_scatter_kernel

        return generate_scatter_kernel(group, buffers, index)
    if any(is_scan(m) for m in group.members):
        from kiln.codegen.cpp.scan import generate_scan_kernel

        return generate_scan_kernel(group, buffers, index)
    if any(is_row_sort(m) for m in group.members):
        from kiln.codegen.cpp.sort import generate_sort_kernel

        return generate_sort_kernel(group, buffers, index)
    ctx = KernelContext(group, buffers)
    origins = tuple(o for m in group.members for o in m.node.origins if o is not None)
    name = kernel_name("cpp", origins, index)
    outer = list(group.outer)
    flat = ctx.k > 0 and all(not m.is_reduction and len(m.ranges) == ctx.k for m in group.members)
    ctx.tiled = not flat and wants_tiling(group.members, ctx.k)
    if flat:
        dtypes = {n: b.dtype for n, b in buffers.items()}
        outer, ctx.subs = merge_loops(outer, _all_indices(group, dtypes))
    row_states, row_decls = [None] * len(group.members), []
    if not flat and not ctx.tiled and ctx.k > 0 and len(group.members) > 1:
        row_states, row_decls = plan_rows(ctx, group.members, buffers)
    member_code, work_inner = [], 0
    for m, rows in zip(group.members, row_states):
        ctx.rows = rows
        code, w = (_tiled_member_code if ctx.tiled else _member_code)(ctx, m)
        member_code += code
        work_inner += w
    ctx.rows = None
    work = prod(outer) * (work_inner or 1)
    # symbolic work: the parallel region decides at run time (an OpenMP if clause)
    parallel = f"{csize(work)} >= {PARALLEL_THRESHOLD}" if is_symbolic(work) else work >= PARALLEL_THRESHOLD
    scalars, arrays = _local_decls(ctx, buffers)
    arrays += row_decls

    if ctx.k == 0:
        body = _scalar_group(group, ctx, member_code, parallel)
    elif flat:
        aliased = {ctx.pointers[name] for name in ctx.group.aliased if name in ctx.pointers}
        body = _flat_nest(outer, scalars + member_code, parallel, aliased)
    else:
        loops = [loop(f"x{d}", outer[d]) for d in range(ctx.k)]
        nest = scalars + member_code
        if ctx.tiled:
            n = outer[-1]
            loops[-1] = f"for (int64_t xt = 0; xt < {csize(n)}; xt += {TILE})"
            nest = [f"const int64_t xn = std::min<int64_t>({TILE}, {csize(n)} - xt);"] + nest
        pre = [f"#pragma omp for{f' collapse({ctx.k})' if ctx.k > 1 else ''}"] if parallel else []
        region = arrays + pre + loops + block(nest)
        body = ([f"#pragma omp parallel{omp_if(parallel)}"] if parallel else []) + block(region)

    params = pointer_params(ctx, buffers)
    header = kernel_header(name, group, origins)
    size_args = used_size_symbols("\n".join(body))
    params += [f"int64_t {s}" for s in size_args]
    src = header + [f'extern "C" void {name}({", ".join(params)})'] + block(body)
    return CppKernel(name, "\n".join(src), ctx.params, origins, hint(work), ctx.checks_bounds, size_args)


def pointer_params(ctx: KernelContext, buffers) -> list[str]:
    """The C parameters of the kernel's buffers (``const T* __restrict__ in_ptrN``, ``T* ... out_ptrN``)."""
    params = []
    for buf_name, kind in ctx.params:
        T = CTYPE[buffers[buf_name].dtype]
        ptr = ctx.pointers[buf_name]
        # a value stored in place into an input it reads: the two pointers alias (no __restrict__)
        restrict = "" if buf_name in ctx.group.aliased else " __restrict__"
        params.append(f"const {T}*{restrict} {ptr}" if kind == "in" else f"{T}*{restrict} {ptr}")
    return params


def kernel_header(name: str, group: FusedGroup, origins, how: str = "") -> list[str]:
    """The comment above a kernel: its members (and ``how``), the source ops, the kernel-local buffers."""
    header = [f"// {name}: {', '.join(m.name for m in group.members)}{f'  ({how})' if how else ''}"]
    header += [f"//   {line}" for line in provenance(origins)]
    if group.locals:
        header.append(f"//   kernel-local (never allocated): {', '.join(sorted(group.locals))}")
    return header


def _flat_nest(ranges, body, parallel, aliased=frozenset()) -> list[str]:
    """Pointwise members over the same loops: the innermost loop vectorized, the outer ones parallel;
    values that do not change along the innermost loop are computed before it (``hoist.py``)."""
    k = len(ranges)
    loops = [loop(f"x{d}", ranges[d]) for d in range(k)]
    if k == 1:
        return [f"#pragma omp {'parallel for simd' if parallel else 'simd'}{omp_if(parallel)}"] + loops + block(body)
    pre = [f"#pragma omp parallel for{f' collapse({k - 1})' if k > 2 else ''}{omp_if(parallel)}"] if parallel else []
    hoisted, body = hoist_invariants(body, f"x{k - 1}", set(aliased))
    inner = ["#pragma omp simd", loops[-1]] + block(body)
    return pre + loops[:-1] + (block(hoisted + inner) if hoisted else inner)


def _scalar_group(group, ctx, member_code, parallel) -> list[str]:
    """A group with no outer loops: one member whose result is a single element."""
    (member,) = group.members
    if member.is_reduction and parallel:
        ops = CppOps(ctx)
        run_body(member.node, ops)
        (red,) = ops.reductions
        if red.kind not in ("argmax", "argmin"):
            rr = _reduction_ranges(member.node)
            return accumulator_decls(ops.reductions) + reduction_loops(rr, ops.lines, red, parallel=parallel) + ops.post
    return member_code
