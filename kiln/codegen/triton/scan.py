"""Triton code for a group with scans (``loopir/scan.py``; its members: ``schedule/scan_rules.py``).

A row kernel: ``xindex`` (``[XBLOCK, 1]``) runs over every loop but the scanned one (flattened),
``rindex`` (``[1, RBLOCK]``) along the scan. A row that fits one block (``persistent``) is scanned
with one ``tl.cumsum``/``tl.cumprod``/``tl.associative_scan`` per member; a longer row (``looped``) is
scanned block by block, each block's scan combined with the running prefix of the blocks before it
(``carry``, the last lane of the previous block's result). Pointwise members run on the same blocks,
reading the scan results from registers.
"""
from __future__ import annotations

import sympy
import torch

from kiln.codegen.common import kernel_name, provenance
from kiln.codegen.triton.kernel import (
    PERSISTENT_MAX, KernelContext, MemberContextBase, TritonKernel, _index_dtype_is_64, _indent, _py,
    index_var_defs,
)
from kiln.codegen.triton.ops import TL_DTYPE, TritonOps, TVal, jit_decorator, literal
from kiln.loopir.handlers import SimplifiedIndices, iteration_vars, run_body, var_ranges
from kiln.loopir.index import linear_index, simplify_with_ranges, var
from kiln.loopir.ops import reduction_identity
from kiln.loopir.scan import is_scan, scan_group_shape
from kiln.loopir.sizes import any_symbolic, prod
from kiln.schedule.scheduler import FusedGroup

RSCAN = sympy.Symbol("rscan", integer=True, nonnegative=True)
_IDENTITY = {"sum": 0, "prod": 1, "logsumexp": float("-inf")}
_SCAN = {"sum": "tl.associative_scan({v}, 1, kh.add)", "prod": "tl.associative_scan({v}, 1, kh.mul)",
         "logsumexp": "tl.associative_scan({v}, 1, kh.log_add_exp)",
         "max": "tl.associative_scan({v}, 1, kh.cummax_value)", "min": "tl.associative_scan({v}, 1, kh.cummin_value)"}
_WITH_CARRY = {"sum": "{c} + {s}", "prod": "{c} * {s}", "logsumexp": "kh.log_add_exp({c}, {s})",
               "max": "kh.cummax_value({c}, {s})", "min": "kh.cummin_value({c}, {s})"}


class ScanContext(MemberContextBase):
    """What TritonOps asks while generating a member of a scan kernel (row mode, scan along ``r``)."""

    reduction_mode = "persistent"
    row = True

    def __init__(self, kctx, member, loops, s: int):
        self.kctx, self.member = kctx, member
        self.ranges = {var("x", d): n for d, n in enumerate(loops)}
        self.rename = {var("x", s): RSCAN}
        self.axis_of = {var("x", d): "x" for d in range(len(loops)) if d != s}
        self.axis_of[RSCAN] = "r"
        self.indirect: dict = {}
        self.indirect_nonempty: dict = {}  # of those, where the indexed dim may be empty: its test

    def register(self, name, index):
        producer = self.kctx.producers.get(name)
        if producer is None or producer is self.member:
            return None
        return self.kctx.registers[name]  # read at the element its producer computed (scan_rules.py)

    def index(self, expr):
        return self.printed_index(simplify_with_ranges(sympy.sympify(expr), self.ranges).xreplace(self.rename))

    def mask(self, axes):
        return " & ".join(m for a, m in (("x", "xmask"), ("r", "rmask")) if a in axes) or None

    def shape(self, axes):
        return f"[{'XBLOCK' if 'x' in axes else 1}, {'RBLOCK' if 'r' in axes else 1}]"


def _compute_dtype(data) -> torch.dtype:
    return torch.int8 if data.acc_dtype == torch.bool else data.acc_dtype  # (Triton compares int1 poorly)


def _carry_init(m) -> list[str]:
    data, name = m.node.data, m.node.name
    A = _compute_dtype(data)
    base = data.kind.replace("arg", "")
    init = _IDENTITY.get(data.kind, None)
    init = reduction_identity(base, data.acc_dtype) if init is None else init
    lines = [f"carry_{name} = tl.full([XBLOCK, 1], {literal(init, A)}, {TL_DTYPE[A]})"]
    if data.kind in ("argmax", "argmin"):
        lines.append(f"carry_idx_{name} = tl.full([XBLOCK, 1], 0, tl.int64)")
    return lines


def _last_lane(value: str) -> str:
    return f"tl.reduce(tl.where(rbase == RBLOCK - 1, {value}, 0), 1, kh.add)[:, None]"


def _scan_lines(m, value: TVal, looped: bool) -> tuple[list[str], str, torch.dtype]:
    """Lines scanning ``value`` along the block's r axis; the result's name and dtype."""
    data, name = m.node.data, m.node.name
    A = _compute_dtype(data)
    v = f"tl.broadcast_to({value.name}.to({TL_DTYPE[A]}), [XBLOCK, RBLOCK])"
    lines = [f"val_{name} = {v}"]
    if data.kind in ("argmax", "argmin"):
        comb = f"kh.cum{data.kind[3:]}_combine"
        lines += [f"idx_{name} = tl.broadcast_to(rindex.to(tl.int64), [XBLOCK, RBLOCK])",
                  f"scan_{name}, scan_idx_{name} = tl.associative_scan((val_{name}, idx_{name}), 1, {comb})"]
        if looped:
            lines += [f"scan_{name}, scan_idx_{name} = {comb}(carry_{name}, carry_idx_{name}, scan_{name}, scan_idx_{name})",
                      f"carry_{name} = {_last_lane(f'scan_{name}')}",
                      f"carry_idx_{name} = {_last_lane(f'scan_idx_{name}')}"]
        return lines, f"scan_idx_{name}", torch.int64
    lines.append(f"scan_{name} = {_SCAN[data.kind].format(v=f'val_{name}')}")
    if looped:
        lines += [f"scan_{name} = {_WITH_CARRY[data.kind].format(c=f'carry_{name}', s=f'scan_{name}')}",
                  f"carry_{name} = {_last_lane(f'scan_{name}')}"]
    return lines, f"scan_{name}", A


def _member_lines(kctx, m, loops, s, cse, looped: bool) -> list[str]:
    ctx = ScanContext(kctx, m, loops, s)
    ops = TritonOps(ctx, cse=cse)
    if not is_scan(m):
        run_body(m.node, ops)
        return [f"# {m.name}"] + ops.lines
    node, data = m.node, m.node.data
    xs, _ = iteration_vars(node)
    sops = SimplifiedIndices(ops, var_ranges(node))
    value = data.body(sops, xs)
    lines, result, dtype = _scan_lines(m, value, looped)
    ops.lines += lines
    out = ops.to_dtype(TVal(result, dtype, frozenset({"x", "r"})), data.dtype)
    sops.store(node.name, linear_index(xs, node.stride), out)
    return [f"# {m.name}: {data.describe()}"] + ops.lines


def generate_scan_kernel(group: FusedGroup, buffers: dict, index: int,
                         persistent_max: int = PERSISTENT_MAX) -> TritonKernel:
    kctx = KernelContext(group, buffers)
    origins, loops, scans, s = scan_group_shape(group)
    if any_symbolic(loops):  # (the lowering keeps ATen's scan for symbolic sizes under Triton)
        raise NotImplementedError("size-generic Triton scan kernels are not written")
    name = kernel_name("triton", origins, index)
    rows = [n for d, n in enumerate(loops) if d != s]
    xnumel, rnumel = prod(rows), loops[s]
    looped = rnumel > persistent_max
    pid = "tl.program_id(0).to(tl.int64)" if _index_dtype_is_64(group, buffers) else "tl.program_id(0)"
    body = [f"xnumel = {_py(xnumel)}", f"xoffset = {pid} * XBLOCK",
            "xindex = xoffset + tl.arange(0, XBLOCK)[:, None]", "xmask = xindex < xnumel",
            "rbase = tl.arange(0, RBLOCK)[None, :]"]
    body += index_var_defs([f"x{d}" for d in range(len(loops)) if d != s], rows, "xindex")
    cse: dict = {}
    members = []
    for m in group.members:
        members += _member_lines(kctx, m, loops, s, cse, looped)
    step = ["rmask = rindex < " + _py(rnumel), f"{RSCAN} = rindex"] + members
    if looped:
        body += [line for m in scans for line in _carry_init(m)]
        body += [f"for roffset in range(0, {_py(rnumel)}, RBLOCK):"] + _indent(["rindex = roffset + rbase"] + step)
    else:
        body += ["rindex = rbase"] + step
    params = [kctx.pointers[n] for n, _ in kctx.params] + ["XBLOCK: tl.constexpr", "RBLOCK: tl.constexpr"]
    style = "looped" if looped else "persistent"
    header = [f"# {name}: {', '.join(m.name for m in group.members)}  (scan along x{s}, {style})"]
    header += [f"#   {line}" for line in provenance(origins)]
    if group.locals:
        header.append(f"#   kernel-local (registers only): {', '.join(sorted(group.locals))}")
    src = header + [jit_decorator(body), f"def {name}({', '.join(params)}):"] + _indent(body)
    return TritonKernel(name, "\n".join(src) + "\n", kctx.params, origins, style, xnumel, rnumel,
                        xnumel_expr=xnumel, rnumel_expr=rnumel)
