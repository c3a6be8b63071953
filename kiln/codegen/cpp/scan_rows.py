"""C++ for a scan group whose scan runs along the last loop (``scan.py`` has the other shapes): three
passes over each row, so that only the carried accumulator is sequential::

    #pragma omp parallel                           (above a work threshold)
    {
      per-thread row arrays: each scan's element values, each kernel-local buffer
      #pragma omp for
      for rows:
        #pragma omp simd  for x{s}: producers and each scan's element value   (vectorized, no branches)
        for x{s}: accumulators += value; results stored                       (the sequential part)
        #pragma omp simd  for x{s}: consumers of the scan results             (vectorized)
    }

In one sequential loop with everything inside (the first form), a select in a producer (relu) or in a
cummax step compiled to a branch that random data mispredicts half the time: 7x slower than eager.
A cummax's values and indices of one input share one comparison. Groups where a scan reads what
another scan computed keep the one-loop form (``row_passes`` returns None).
"""
from __future__ import annotations

import torch

from kiln.codegen.cpp.kernel import KernelContext
from kiln.codegen.cpp.loops import block, csize, loop
from kiln.codegen.cpp.ops import CTYPE, CppOps, CppVal
from kiln.loopir.handlers import SimplifiedIndices, iteration_vars, run_body, var_ranges
from kiln.loopir.index import linear_index
from kiln.loopir.scan import is_scan


def _plain_load(lines, value: str) -> str | None:
    """The expression of a body that is one load (``float tmp0 = in_ptr0[...];``), else None."""
    if len(lines) != 1 or not lines[0].endswith(";"):
        return None
    head, _, expr = lines[0][:-1].partition(" = ")
    if head.split()[-1] != value or "ptr" not in expr or "(" in expr.split("[")[0]:
        return None
    return expr


class RowContext(KernelContext):
    """Kernel-local buffers are per-thread row arrays indexed by the scan loop's variable."""

    def __init__(self, group, buffers, scan_var: str):
        super().__init__(group, buffers)
        self.scan_var = scan_var

    def local_scalar(self, name) -> str:
        return f"local_{name}[{self.scan_var}]"


def _stages(members) -> dict | None:
    """Pass of each member (0: before the scans, 1: after), or None when a scan reads a scan's result."""
    stage, producer = {}, {w: m for m in members for w in m.writes}
    for m in members:
        deps = [producer[r] for r in m.read_names if r in producer and producer[r] is not m]
        after = max((stage[d] + (1 if is_scan(d) else 0) for d in deps), default=0)
        if is_scan(m) and after > 0:
            return None
        if after > 1:
            return None
        stage[m] = after
    return stage


def row_passes(group, buffers, s: int, scan_step, cast):
    """(per-thread declarations, per-row statements) of the three-pass form, or None."""
    stages = _stages(group.members)
    if stages is None:
        return None
    xs_var = f"x{s}"
    ctx = RowContext(group, buffers, xs_var)
    n = csize(group.members[0].ranges[s])
    decls = [f"std::unique_ptr<{CTYPE[buffers[b].dtype]}[]> local_{b}(new {CTYPE[buffers[b].dtype]}[{n}]);"
             for b in sorted(ctx.local_blocks)]
    before, after, twins, scans = [], [], {}, []
    for m in group.members:
        ops = CppOps(ctx)
        if not is_scan(m):
            run_body(m.node, ops)
            (before if stages[m] == 0 else after).extend([f"// {m.name}"] + block(ops.lines))
            continue
        data = m.node.data
        xs, _ = iteration_vars(m.node)
        value = data.body(SimplifiedIndices(ops, var_ranges(m.node)), xs)
        key = ("\n".join(ops.lines), value.name, data.kind.replace("arg", ""))
        twins.setdefault(key, []).append(m)
        direct = _plain_load(ops.lines, value.name)
        if direct is not None:  # the element is one load: the sequential pass reads it itself
            scans.append((m, xs, direct))
            continue
        V = CTYPE[data.value_dtype]
        decls.append(f"std::unique_ptr<{V}[]> vals_{m.name}(new {V}[{n}]);")
        before += [f"// {m.name}: element values"] + block(ops.lines + [f"vals_{m.name}[{xs_var}] = {value};"])
        scans.append((m, xs, f"vals_{m.name}[{xs_var}]"))
    steps, stores, accs = [], [], []
    for m, xs, element in scans:
        data = m.node.data
        base = data.kind.replace("arg", "")
        twin = next((t for key, ts in twins.items() for t in ts if m in ts and t is not m
                     and key[2] == base and t.node.data.kind != data.kind), None)
        shares = twin is not None and data.kind in ("max", "min")  # the argmax twin's accumulator is ours
        if not shares:
            lines, result = scan_step(data, element, f"acc_{m.name}", f"idx_{m.name}",
                                      xs_var, f"take_{m.name}", branch=True)
            steps += lines
            accs.append(m)
        else:
            result = f"acc_{twin.name}"
        src = torch.int64 if data.kind in ("argmax", "argmin") else data.acc_dtype
        ops = CppOps(ctx)
        SimplifiedIndices(ops, var_ranges(m.node)).store(
            m.name, linear_index(xs, m.node.stride), CppVal(cast(result, src, data.dtype), data.dtype))
        stores += ops.lines
    extent = group.members[0].ranges[s]
    row = ["#pragma omp simd", loop(xs_var, extent)] + block(before) if before else []
    row += [loop(xs_var, extent)] + block(steps + stores)
    if after:
        row += ["#pragma omp simd", loop(xs_var, extent)] + block(after)
    return ctx, decls, accs, row
