"""C++/OpenMP code for one fused group: an ``extern "C"`` function over raw buffer pointers.

Shape of a kernel whose members share ``k`` outer loops::

    #pragma omp parallel                 (only above a work threshold)
    {
      <per-thread arrays for kernel-local buffers>
      #pragma omp for collapse(k)
      for x0 ... for x{k-1} {
        <kernel-local scalars>
        { member 1: its inner loops (reduction loop with accumulators) }
        { member 2 ... }
      }
    }

A group of pointwise members with no inner loops vectorizes its innermost outer loop instead
(``omp for simd`` / ``omp simd``). A group without outer loops (a reduction to a scalar) runs its
reduction loop as an OpenMP parallel reduction where the combine allows it.
"""
from __future__ import annotations

import dataclasses
import math

import torch

from kiln.codegen.common import kernel_name, provenance
from kiln.codegen.cpp.ops import CTYPE, OMP_REDUCTION_OP, CppOps, accumulator_decls
from kiln.loopir.handlers import run_body
from kiln.loopir.nodes import Reduction
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


class KernelContext:
    """What the ops handler needs to know about the kernel being generated."""

    def __init__(self, group: FusedGroup, buffers: dict):
        self.group = group
        self.buffers = buffers
        self.k = group.depth
        self.checks_bounds = False  # set by CppOps.indirect_indexing
        writes = [w for m in group.members for w in m.writes if w not in group.locals]
        reads = [r for m in group.members for r, _ in m.reads if r not in group.locals and r not in writes]
        self.params: list[tuple[str, str]] = []
        self.pointers: dict[str, str] = {}
        for name in dict.fromkeys(reads):
            self.pointers[name] = f"in_ptr{len(self.pointers)}"
            self.params.append((name, "in"))
        n_in = len(self.pointers)
        for name in dict.fromkeys(writes):
            self.pointers[name] = f"out_ptr{len(self.pointers) - n_in}"
            self.params.append((name, "out"))
        self.local_blocks: dict[str, int] = {}
        producers = {w: m for m in group.members for w in m.writes}
        for name in group.locals:
            self.local_blocks[name] = block_of(producers[name], self.k)[1]

    def dtype_of(self, name):
        return self.buffers[name].dtype

    def pointer(self, name):
        if name in self.local_blocks:
            return None if self.local_blocks[name] == 1 else f"local_{name}"
        return self.pointers[name]

    def local_scalar(self, name) -> str:
        return f"local_{name}"

    def local_index(self, name, index):
        if name not in self.local_blocks:
            return index
        return split_outer(index, self.k)[1]


def _loop(var: str, n: int) -> str:
    return f"for (int64_t {var} = 0; {var} < {n}; ++{var})"


def _indent(lines, n=1):
    pad = "    " * n
    return [pad + line if line else line for line in lines]


def _member_code(ctx: KernelContext, member, flat: bool) -> tuple[list[str], int]:
    """C++ for one member inside the outer loops, and its work per outer iteration."""
    node = member.node
    ranges = member.ranges
    inner = ranges[ctx.k:]
    if isinstance(node.data, Reduction):
        rr = [n for n in node.data.reduction_ranges if n != 1]
        strides = [math.prod(rr[d + 1:]) for d in range(len(rr))]
        linear = " + ".join(f"r{d}*{s}" if s != 1 else f"r{d}" for d, s in enumerate(strides)) or "0"
        ops = CppOps(ctx, linear)
        run_body(node, ops)
        body = list(ops.lines)
        for d in reversed(range(len(rr))):
            head = [_loop(f"r{d}", rr[d])]
            if d == len(rr) - 1:
                kinds = {kind for _, kind, _ in ops.reductions}
                accs = [acc for acc, kind, dtype in ops.reductions]
                if len(kinds) == 1 and next(iter(kinds)) in ("sum", "prod") and all(
                    dtype != torch.bool for _, _, dtype in ops.reductions
                ):
                    head = [f"#pragma omp simd reduction({OMP_REDUCTION_OP[next(iter(kinds))]}:{', '.join(accs)})"] + head
            body = head + ["{"] + _indent(body) + ["}"]
        body = accumulator_decls(ops.reductions) + body + ops.post
        work = math.prod(inner) * max(1, math.prod(rr))
    else:
        ops = CppOps(ctx)
        run_body(node, ops)
        body = list(ops.lines)
        work = math.prod(inner)
    for d in reversed(range(len(inner))):
        var = f"x{ctx.k + d}"
        head = [_loop(var, inner[d])]
        if d == len(inner) - 1 and not isinstance(node.data, Reduction):
            head = ["#pragma omp simd"] + head
        body = head + ["{"] + _indent(body) + ["}"]
    return [f"// {node.name}", "{"] + _indent(body) + ["}"], work


def generate_kernel(group: FusedGroup, buffers: dict, index: int) -> CppKernel:
    ctx = KernelContext(group, buffers)
    origins = tuple(o for m in group.members for o in m.node.origins if o is not None)
    name = kernel_name("cpp", origins, index)
    flat = all(not m.is_reduction and len(m.ranges) == ctx.k for m in group.members)
    member_code, work_inner = [], 0
    for m in group.members:
        code, w = _member_code(ctx, m, flat)
        member_code += code
        work_inner += w
    outer = group.outer
    work = math.prod(outer) * max(1, work_inner)
    parallel = work >= PARALLEL_THRESHOLD

    scalars = [f"{CTYPE[buffers[n].dtype]} local_{n};" for n, b in ctx.local_blocks.items() if b == 1]
    arrays = []
    for n, b in ctx.local_blocks.items():
        if b > 1:
            T = CTYPE[buffers[n].dtype]
            if b * buffers[n].dtype.itemsize <= STACK_LOCAL_BYTES:
                arrays.append(f"{T} local_{n}[{b}];")
            else:
                arrays += [f"std::unique_ptr<{T}[]> local_{n}_owner(new {T}[{b}]);", f"{T}* local_{n} = local_{n}_owner.get();"]

    if ctx.k == 0:
        body = _scalar_group(group, ctx, member_code, parallel)
    else:
        loops = [_loop(f"x{d}", outer[d]) for d in range(ctx.k)]
        if flat:
            pre = ["#pragma omp for simd" if parallel and ctx.k == 1 else "#pragma omp simd" if ctx.k == 1 else
                   f"#pragma omp for{f' collapse({ctx.k - 1})' if ctx.k > 2 else ''}" if parallel else ""]
            if ctx.k > 1:
                loops = loops[:-1] + ["#pragma omp simd", loops[-1]]
        else:
            pre = [f"#pragma omp for{f' collapse({ctx.k})' if ctx.k > 1 else ''}" if parallel else ""]
        nest = scalars + member_code
        nest = ["{"] + _indent(nest) + ["}"]
        for loop in reversed(loops):
            nest = ([loop] + nest) if not loop.startswith("#") else [loop] + nest
        region = arrays + [p for p in pre if p] + nest
        body = (["#pragma omp parallel"] if parallel else []) + ["{"] + _indent(region) + ["}"]

    params = []
    for buf_name, kind in ctx.params:
        T = CTYPE[buffers[buf_name].dtype]
        ptr = ctx.pointers[buf_name]
        params.append(f"const {T}* __restrict__ {ptr}" if kind == "in" else f"{T}* __restrict__ {ptr}")
    header = [f"// {name}: {', '.join(m.name for m in group.members)}"]
    header += [f"//   {line}" for line in provenance(origins)]
    if group.locals:
        header.append(f"//   kernel-local (never allocated): {', '.join(sorted(group.locals))}")
    src = header + [f'extern "C" void {name}({", ".join(params)})', "{"] + _indent(body) + ["}"]
    return CppKernel(name, "\n".join(src), ctx.params, origins, work, ctx.checks_bounds)


def _scalar_group(group, ctx, member_code, parallel) -> list[str]:
    """A group with no outer loops: one member whose result is a single element."""
    (member,) = group.members
    if member.is_reduction and parallel:
        node = member.node
        rr = [n for n in node.data.reduction_ranges if n != 1]
        linear = " + ".join(f"r{d}*{math.prod(rr[d + 1:])}" if d < len(rr) - 1 else f"r{d}" for d in range(len(rr))) or "0"
        ops = CppOps(ctx, linear)
        run_body(node, ops)
        kinds = {kind for _, kind, _ in ops.reductions}
        if len(kinds) == 1 and next(iter(kinds)) in OMP_REDUCTION_OP:
            accs = ", ".join(acc for acc, _, _ in ops.reductions)
            op = OMP_REDUCTION_OP[next(iter(kinds))]
            collapse = f" collapse({len(rr)})" if len(rr) > 1 else ""
            body = list(ops.lines)
            loops = [_loop(f"r{d}", rr[d]) for d in range(len(rr))]
            nest = ["{"] + _indent(body) + ["}"]
            for loop in reversed(loops):
                nest = [loop] + nest
            return accumulator_decls(ops.reductions) + [f"#pragma omp parallel for reduction({op}:{accs}){collapse}"] + nest + ops.post
    return member_code
