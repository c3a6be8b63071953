"""C++ for a group with scans (``loopir/scan.py``; which nodes share the group: ``schedule/scan_rules.py``).

Every member runs over the same loops ``outer x n x inner`` (``n``: the scanned dim). Shape::

    #pragma omp parallel for collapse(..)        (outer loops and inner tiles, above a work threshold)
    for x0 .. x{s-1}:                            outer loops
      for xt in tiles of inner (TILE wide):      only when there are inner dims
        accumulators[TILE], one per scan member
        for x{s} in 0..n:                        sequential along the scan
          #pragma omp simd                       across the tile: independent rows, vectorized
          for xi in tile:
            member 1 (pointwise: its body; scan: load, combine into the accumulator, store) ...

A scan along the last dim has no inner tile: one accumulator per row, rows in parallel.
"""
from __future__ import annotations

import torch

from kiln.codegen.common import kernel_name
from kiln.codegen.cpp.kernel import PARALLEL_THRESHOLD, CppKernel, KernelContext, kernel_header, pointer_params
from kiln.codegen.cpp.loops import TILE, block, csize, loop, omp_if
from kiln.codegen.cpp.ops import CTYPE, CppOps, CppVal, c_literal
from kiln.codegen.cpp.scan_rows import row_passes
from kiln.loopir.handlers import SimplifiedIndices, iteration_vars, run_body, var_ranges
from kiln.loopir.index import linear_index
from kiln.loopir.ops import reduction_identity
from kiln.loopir.scan import is_scan, scan_group_shape
from kiln.loopir.sizes import hint, is_symbolic, prod, used_size_symbols
from kiln.schedule.scheduler import FusedGroup

SCAN_IDENTITY = {"sum": 0, "prod": 1, "logsumexp": float("-inf")}


def cast(expr: str, src: torch.dtype, dst: torch.dtype) -> str:
    """C conversion of ``expr`` from ``src`` to ``dst`` (as CppOps.to_dtype)."""
    if src == dst:
        return expr
    if src == torch.bfloat16:
        expr = f"static_cast<float>({expr})"
    if dst == torch.bfloat16:
        return f"kiln_bf16(static_cast<float>({expr}))"
    return f"static_cast<{CTYPE[dst]}>({expr})"


def _identity(data) -> str:
    if data.kind in SCAN_IDENTITY:
        return c_literal(SCAN_IDENTITY[data.kind], data.acc_dtype)
    base = data.kind.replace("arg", "")
    return c_literal(reduction_identity(base, data.acc_dtype), data.acc_dtype)


def _take_condition(data, v: str, acc: str) -> str:
    """When a cummax/cummin step takes the new element ``v`` (ATen: NaN sticks, ties take the later)."""
    cmp = ">=" if data.kind in ("max", "argmax") else "<="
    if not data.acc_dtype.is_floating_point:
        return f"({v} {cmp} {acc})"
    return f"(std::isnan({v}) | (!std::isnan({acc}) & ({v} {cmp} {acc})))"  # (no short-circuit branches)


def scan_step(data, v: str, acc: str, idx: str, position: str, take: str = "take",
              branch: bool = False) -> tuple[list[str], str]:
    """C statements folding element ``v`` (at scan position ``position``) into the accumulator ``acc``
    (and the index accumulator ``idx`` of argmax/argmin), and the C expression of the stored result."""
    A = data.acc_dtype
    av = cast(v, data.value_dtype, A)
    if data.kind == "sum":
        return [f"{acc} = {acc} + {av};"], acc
    if data.kind == "prod":
        return [f"{acc} = {acc} * {av};"], acc
    if data.kind == "logsumexp":
        return [f"{acc} = kiln_log_add_exp({av}, {acc});"], acc
    if not branch:
        lines = [f"const bool {take} = {_take_condition(data, av, acc)};"]
        lines.append(f"{acc} = {take} ? {av} : {acc};")
        if data.kind in ("argmax", "argmin"):
            return lines + [f"{idx} = {take} ? {position} : {idx};"], idx
        return lines, acc
    # sequential: a new extreme is rare in most data, and a predicted branch does not put the select
    # on the accumulator's dependency chain (as ATen's kernel, which branches)
    # (the usual element is no new extreme: one comparison; NaN either side goes to the full test)
    update = [f"{acc} = {av};"] + ([f"{idx} = {position};"] if data.kind in ("argmax", "argmin") else [])
    beaten = "<" if data.kind in ("max", "argmax") else ">"
    lines = [f"if (__builtin_expect(!({av} {beaten} {acc}), 0) && {_take_condition(data, av, acc)})"] + block(update)
    return lines, (idx if data.kind in ("argmax", "argmin") else acc)


def _member_lines(ctx, member, acc_ref, position: str) -> list[str]:
    """One member's statements for one element."""
    node = member.node
    ops = CppOps(ctx)
    if not is_scan(member):
        run_body(node, ops)
        return [f"// {node.name}"] + block(ops.lines)
    data = node.data
    xs, _ = iteration_vars(node)
    sops = SimplifiedIndices(ops, var_ranges(node))
    value = data.body(sops, xs)
    acc, idx = acc_ref(f"acc_{node.name}"), acc_ref(f"idx_{node.name}")
    step, result = scan_step(data, value.name, acc, idx, position, f"take_{node.name}")
    ops.lines += step
    src = torch.int64 if data.kind in ("argmax", "argmin") else data.acc_dtype
    sops.store(node.name, linear_index(xs, node.stride), CppVal(cast(result, src, data.dtype), data.dtype))
    return [f"// {node.name}: {data.describe()}"] + block(ops.lines)


def _acc_decls(scans, tiled: bool) -> list[str]:
    lines = []
    for m in scans:
        data, name = m.node.data, m.node.name
        A = CTYPE[data.acc_dtype]
        arrays = [(f"acc_{name}", A, _identity(data))]
        if data.kind in ("argmax", "argmin"):
            arrays.append((f"idx_{name}", "int64_t", "0"))
        for var, T, init in arrays:
            if tiled:
                lines += [f"{T} {var}[{TILE}];", f"for (int64_t xi = 0; xi < {TILE}; ++xi) {var}[xi] = {init};"]
            else:
                lines.append(f"{T} {var} = {init};")
    return lines


def _inner_defs(inner, first: int) -> list[str]:
    """The inner loop variables ``x{first}..`` from the flat inner position ``xt + xi`` (row-major)."""
    if len(inner) == 1:
        return [f"const int64_t x{first} = xt + xi;"]
    lines = ["const int64_t xf = xt + xi;"]
    for d, n in enumerate(inner):
        below = prod(inner[d + 1:])
        expr = "xf" if below == 1 else f"(xf / {csize(below)})"
        lines.append(f"const int64_t x{first + d} = {expr}{f' % {csize(n)}' if d > 0 else ''};")
    return lines


def generate_scan_kernel(group: FusedGroup, buffers: dict, index: int) -> CppKernel:
    ctx = KernelContext(group, buffers)
    origins, ranges, scans, s = scan_group_shape(group)
    name = kernel_name("cpp", origins, index)
    outer, n, inner = ranges[:s], ranges[s], ranges[s + 1:]
    tiled = bool(inner)
    acc_ref = (lambda a: f"{a}[xi]") if tiled else (lambda a: a)
    scalars = [f"{CTYPE[buffers[b].dtype]} local_{b};" for b in sorted(ctx.local_blocks)]
    element = list(scalars)
    for m in group.members:
        element += _member_lines(ctx, m, acc_ref, f"x{s}")
    work = prod(ranges)
    parallel = hint(work) >= PARALLEL_THRESHOLD and bool(outer or hint(prod(inner)) > TILE)
    if parallel and is_symbolic(work):  # symbolic sizes: the region decides at run time
        parallel = f"{csize(work)} >= {PARALLEL_THRESHOLD}"
    loops = [loop(f"x{d}", outer[d]) for d in range(len(outer))]
    rows = None if tiled else row_passes(group, buffers, s, scan_step, cast)
    if tiled:
        count = csize(prod(inner))
        loops.append(f"for (int64_t xt = 0; xt < {count}; xt += {TILE})")
        scan = [loop(f"x{s}", n)] + block(["#pragma omp simd", f"for (int64_t xi = 0; xi < xn; ++xi)"]
                                          + block(_inner_defs(inner, s + 1) + element))
        row = [f"const int64_t xn = std::min<int64_t>({TILE}, {count} - xt);"] + _acc_decls(scans, True) + scan
    elif rows is not None:  # scan along the last loop: vectorized passes around the sequential one
        ctx, decls, accs, row = rows
        row = _acc_decls(accs, False) + row
    else:
        row = _acc_decls(scans, False) + [loop(f"x{s}", n)] + block(element)
    body = row
    for head in reversed(loops):
        body = [head] + block(body)
    if parallel:
        body = [f"#pragma omp for{f' collapse({len(loops)})' if len(loops) > 1 else ''}"] + body
    body = (rows[1] if rows is not None else []) + body
    if parallel:
        body = [f"#pragma omp parallel{omp_if(parallel)}"] + block(body)
    params = pointer_params(ctx, buffers)
    header = kernel_header(name, group, origins, f"scan along loop x{s}")
    size_args = used_size_symbols("\n".join(body))
    params += [f"int64_t {a}" for a in size_args]
    src = header + [f'extern "C" void {name}({", ".join(params)})'] + block(body)
    return CppKernel(name, "\n".join(src), ctx.params, origins, hint(work), ctx.checks_bounds, size_args)
