"""C++ for a scatter (``loopir/scatter.py``): one loop nest over the source's iteration space whose body
combines each value into the updated buffer (``CppOps.scatter_store``).

Iterations run in order, so duplicate positions combine exactly as ATen's serial CPU loops do (the last
``store`` wins, sums add in index order): the results are deterministic and equal to eager's. Above
``PARALLEL_THRESHOLD`` iterations one of the node's ``parallel_dims`` (the longest) is cut into one
contiguous chunk per thread; every thread runs the whole nest over its chunk in the same order. Different
values of a parallel dim never write the same position, so no atomics are needed and each position
still sees its values in order.
"""
from __future__ import annotations

import re

from kiln.codegen.common import kernel_name, provenance
from kiln.codegen.cpp.kernel import PARALLEL_THRESHOLD, CppKernel, KernelContext
from kiln.codegen.cpp.loops import block, csize, loop
from kiln.codegen.cpp.ops import _WIDE_INTS, _WRAPPING, CTYPE, CppOps
from kiln.loopir.handlers import run_body
from kiln.loopir.sizes import hint, is_symbolic, prod, used_size_symbols

_WIDE_INT_TYPES = {CTYPE[d] for d in _WIDE_INTS}

# C++ of one combine step: ``{t}`` the target element, ``{v}`` the value (float math for 16-bit floats)
_COMBINE = {
    "store": "{t} = {v};",
    "add": "{t} = {t} + {v};",
    "mul": "{t} = {t} * {v};",
    "max": "{t} = kiln_max({t}, {v});",
    "min": "{t} = kiln_min({t}, {v});",
}


def combine_statement(mode: str, target: str, value: str, T: str, half: bool, is_bool: bool) -> str:
    """``target (op)= value`` in the buffer's C type ``T``: 16-bit floats combine in float and round
    once (ATen's ``a + b`` on Half/BFloat16); bool ``add`` is a logical or, ``mul`` a logical and."""
    if is_bool and mode in ("add", "mul", "max", "min"):
        op = "||" if mode in ("add", "max") else "&&"
        return f"{target} = {target} {op} {value};"
    if half and mode != "store":
        expr = _COMBINE[mode].format(t=f"static_cast<float>({target})", v=f"static_cast<float>({value})")
        rhs = expr.split(" = ", 1)[1].rstrip(";")
        return f"{target} = {T}({rhs});"
    if mode in ("add", "mul") and T in _WIDE_INT_TYPES:  # wraps as eager's
        return f"{target} = {_WRAPPING[mode].format(target, value, T=T)};"
    return _COMBINE[mode].format(t=target, v=value)


def _parallel_dim(node, ranges) -> int | None:
    """The effective loop (index into ``ranges``, size-1 dims dropped) to split over threads: the
    longest of the node's parallel dims, or None."""
    eff, k = {}, 0
    for d, n in enumerate(node.data.ranges):
        if n != 1:
            eff[d] = k
            k += 1
    cands = [eff[d] for d in node.data.parallel_dims if d in eff]
    if not cands:
        return None
    return max(cands, key=lambda e: (hint(ranges[e]), -e))


def generate_scatter_kernel(group, buffers: dict, index: int) -> CppKernel:
    (member,) = group.members
    node = member.node
    ctx = KernelContext(group, buffers)
    ctx.k = 0  # no shared outer loops: the whole nest is this member's
    ops = CppOps(ctx)
    run_body(node, ops)
    ranges = list(member.ranges)
    work = prod(ranges) if ranges else 1
    p = _parallel_dim(node, ranges) if ranges else None
    parallel = p is not None and (is_symbolic(work) or work >= PARALLEL_THRESHOLD) and \
        (is_symbolic(ranges[p]) or ranges[p] > 1)
    loops = [loop(f"x{d}", n) for d, n in enumerate(ranges)]
    pre = []
    if parallel:
        n = csize(ranges[p])
        pre = ["const int64_t kiln_nt = omp_get_num_threads(), kiln_t = omp_get_thread_num();",
               f"const int64_t kiln_lo = {n} * kiln_t / kiln_nt, kiln_hi = {n} * (kiln_t + 1) / kiln_nt;"]
        loops[p] = f"for (int64_t x{p} = kiln_lo; x{p} < kiln_hi; ++x{p})"
    body = list(ops.lines)
    hoisted = []
    if ranges:  # the index loads of a row (index_put / index_add over slices) run once per row
        hoisted, body = hoist_invariants(body, f"x{len(ranges) - 1}")
    for d in reversed(range(len(loops))):
        # the innermost loop vectorizes when its iterations write distinct positions
        simd = d == len(loops) - 1 and _is_parallel_loop(node, d)
        body = (["#pragma omp simd"] if simd else []) + [loops[d]] + block(body)
        if d == len(loops) - 1 and hoisted:
            body = hoisted + body
    if parallel:
        cond = f" if({csize(work)} >= {PARALLEL_THRESHOLD})" if is_symbolic(work) else ""
        body = [f"#pragma omp parallel{cond}"] + block(pre + body)
    origins = tuple(o for o in node.origins if o is not None)
    name = kernel_name("cpp", origins, index)
    params = []
    for buf_name, kind in ctx.params:
        T = CTYPE[buffers[buf_name].dtype]
        ptr = ctx.pointers[buf_name]
        params.append(f"const {T}* __restrict__ {ptr}" if kind == "in" else f"{T}* __restrict__ {ptr}")
    header = [f"// {name}: {node.name} {node.data.describe()}"] + [f"//   {line}" for line in provenance(origins)]
    size_args = used_size_symbols("\n".join(body))
    params += [f"int64_t {s}" for s in size_args]
    src = header + [f'extern "C" void {name}({", ".join(params)})'] + block(body)
    return CppKernel(name, "\n".join(src), ctx.params, origins, hint(work), ctx.checks_bounds, size_args)


_DEF = re.compile(r"^[A-Za-z_][\w:<>]* (tmp\d+) = .*;$")
_TMP = re.compile(r"\btmp\d+(?:_fn)?\b")  # temporaries and ``masked`` lambdas (``tmp6_fn``)


def hoist_invariants(lines: list[str], var: str) -> tuple[list[str], list[str]]:
    """Split a loop body into the definitions that do not depend on loop variable ``var`` (moved
    before the loop) and the rest, in order. Only one-line temporaries at the body's top level move;
    anything else (stores, ``masked`` lambdas and every line inside one: their loads are only valid
    under the mask) and whatever uses a temporary or lambda that stays, stays."""
    uses_var = re.compile(rf"\b{var}\b")
    before, inside, staying = [], [], set()
    depth = 0  # inside a lambda's body
    for line in lines:
        text = line.strip()
        m = _DEF.match(text) if depth == 0 else None
        if m and not uses_var.search(text) and not (set(_TMP.findall(text)) - {m.group(1)}) & staying:
            before.append(line)
            continue
        inside.append(line)
        staying |= set(_TMP.findall(text))
        depth += text.count("{") - text.count("}")
    return before, inside


def _is_parallel_loop(node, eff_dim: int) -> bool:
    k = 0
    for d, n in enumerate(node.data.ranges):
        if n == 1:
            continue
        if k == eff_dim:
            return d in node.data.parallel_dims
        k += 1
    return False
