"""Triton code for a matmul template (``schedule/templates.py``): a tiled matmul with the epilogue
group's pointwise members generated on the accumulator tile.

Each program computes one ``[BLOCK_M, BLOCK_N]`` tile of the (M, N) result: ``tl.program_id(0)`` is
mapped to (pid_m, pid_n) in groups of ``GROUP_M`` row tiles (programs running together share
operand tiles in L2), the K loop loads ``[BLOCK_M, BLOCK_K]`` and ``[BLOCK_K, BLOCK_N]`` blocks of the
operands through their own strides and offsets (any layout: transposed views cost nothing), masks the
ragged end of K (unless ``EVEN_K``), and accumulates ``tl.dot`` in float32. Rows and columns past
the end are clamped (``% M``, ``% N``) for the loads and masked at the stores.

The epilogue: for addmm, ``alpha * acc + beta * bias`` in float32 (the library's rounding); then the
result is rounded to its dtype, as eager's matmul returns it, and stored when needed. The epilogue's
members then run through ``TritonOps`` like a kernel of the ``row`` shape (``kernel.py``): rows are the
``x`` axis (``xindex`` ``[BLOCK_M, 1]``, ``xmask``), columns the ``r`` axis (``rindex`` ``[1, BLOCK_N]``,
``rmask``); their loads of the matmul result are the rounded accumulator.
"""
from __future__ import annotations

import dataclasses

import sympy
import torch

from kiln.codegen.common import kernel_name, kernel_params, provenance
from kiln.codegen.triton.kernel import INT32_LIMIT, MemberContextBase, index_var_defs
from kiln.codegen.triton.ops import TL_DTYPE, TritonOps, TVal, jit_decorator
from kiln.loopir.handlers import run_body
from kiln.loopir.index import simplify_with_ranges, var
from kiln.schedule.templates import MatmulTemplate, broadcast_strides

CONSTEXPRS = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "EVEN_K")


@dataclasses.dataclass
class MatmulKernel:
    name: str
    source: str
    params: list[tuple[str, str]]  # (buffer name, "in" | "out") in argument order
    origins: tuple
    template: MatmulTemplate
    dtype: torch.dtype  # the operands'
    epilogue_kernel: str | None = None  # the epilogue group's own kernel (run after the library call)
    style: str = "matmul"
    fn: object = None  # the MatmulChoice, set by the runtime

    @property
    def shape(self) -> tuple[int, int, int]:
        return self.template.shape


class EpilogueKernelContext:
    """Pointers, registers and temporaries of one template kernel."""

    def __init__(self, template: MatmulTemplate, buffers: dict, pointers: dict):
        self.template, self.buffers, self.pointers = template, buffers, pointers
        members = template.epilogue.members if template.epilogue is not None else []
        self.producers = {w: m for m in members for w in m.writes}
        self.registers: dict[str, TVal] = {}
        self.count = 0

    def new_tmp(self, prefix: str = "tmp") -> str:
        self.count += 1
        return f"{prefix}{self.count - 1}"


class EpilogueContext(MemberContextBase):
    """What ``TritonOps`` asks while generating one epilogue member on a tile."""

    reduction_mode = "persistent"

    def __init__(self, kctx: EpilogueKernelContext, member, result: TVal):
        self.kctx, self.member, self.result = kctx, member, result
        split = kctx.template.row_dims
        self.ranges = {var("x", d): n for d, n in enumerate(member.ranges)}
        self.axis_of = {var("x", d): ("x" if d < split else "r") for d in range(len(member.ranges))}
        self.indirect: dict = {}
        self.indirect_nonempty: dict = {}  # of those, where the indexed dim may be empty: its test

    def register(self, name, index):
        if name == self.kctx.template.out:
            return self.result  # the pass checked that the member reads it at the element it computes
        producer = self.kctx.producers.get(name)
        if producer is None or producer is self.member:
            return None
        return self.kctx.registers[name]  # a pointwise group: read at the element written (fusion legality)

    def index(self, expr) -> tuple[str, frozenset]:
        return self.printed_index(simplify_with_ranges(sympy.sympify(expr), self.ranges))

    def mask(self, axes) -> str | None:
        return " & ".join(m for a, m in (("x", "xmask"), ("r", "rmask")) if a in axes) or None

    def shape(self, axes) -> str:
        return f"[{'BLOCK_M' if 'x' in axes else 1}, {'BLOCK_N' if 'r' in axes else 1}]"

    def reduction_linear(self) -> str:
        raise NotImplementedError("a matmul epilogue has no reductions")


def _term(var_name: str, stride: int) -> str:
    if stride == 0:
        return ""
    return f" + {var_name}" if stride == 1 else f" + {var_name} * {stride}"


def _max_offset(v) -> int:
    return int(v.offset) + sum((int(n) - 1) * abs(int(s)) for n, s in zip(v.size, v.stride))


def _needs_int64(t: MatmulTemplate, buffers, names) -> bool:
    views = [t.a, t.b] + ([t.bias] if t.bias is not None else [])
    return (max(buffers[n].numel for n in names) > INT32_LIMIT
            or max(_max_offset(v) for v in views) > INT32_LIMIT)


def _dims_defs(ranges, split: int) -> list[str]:
    """``x0..`` of the epilogue's loops from the tile's rows (``xindex``) and columns (``rindex``)."""
    names = [f"x{d}" for d in range(len(ranges))]
    return (index_var_defs(names[:split], ranges[:split], "xindex")
            + index_var_defs(names[split:], ranges[split:], "rindex"))


def _mainloop(t: MatmulTemplate, ptr: dict, wide: bool, dot_precision: str | None) -> list[str]:
    m, n, k = t.shape
    (sam, sak), (sbk, sbn) = t.a.stride, t.b.stride
    cast = ".to(tl.int64)" if wide else ""
    prec = f", input_precision={dot_precision!r}" if dot_precision else ""
    return [
        "pid = tl.program_id(0)",
        f"num_pid_m = ({m} + BLOCK_M - 1) // BLOCK_M",
        f"num_pid_n = ({n} + BLOCK_N - 1) // BLOCK_N",
        "num_pid_in_group = GROUP_M * num_pid_n",
        "first_pid_m = (pid // num_pid_in_group) * GROUP_M",
        "group_size_m = tl.minimum(num_pid_m - first_pid_m, GROUP_M)",
        "pid_m = first_pid_m + (pid % num_pid_in_group) % group_size_m",
        "pid_n = (pid % num_pid_in_group) // group_size_m",
        f"rm = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)){cast}",
        f"rn = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)){cast}",
        f"ram = rm % {m}",
        f"rbn = rn % {n}",
        f"rk = tl.arange(0, BLOCK_K){cast}",
        f"a_ptrs = {ptr[t.a.buffer.name]} + ({t.a.offset}{_term('ram[:, None]', sam)}{_term('rk[None, :]', sak)})",
        f"b_ptrs = {ptr[t.b.buffer.name]} + ({t.b.offset}{_term('rk[:, None]', sbk)}{_term('rbn[None, :]', sbn)})",
        "acc = tl.full([BLOCK_M, BLOCK_N], 0, tl.float32)",
        f"for k in range(0, {k}, BLOCK_K):",
        "    if EVEN_K:",
        "        a = tl.load(a_ptrs)",
        "        b = tl.load(b_ptrs)",
        "    else:",
        f"        a = tl.load(a_ptrs, mask=rk[None, :] < {k} - k, other=0.0)",
        f"        b = tl.load(b_ptrs, mask=rk[:, None] < {k} - k, other=0.0)",
        f"    acc += tl.dot(kh.dot_operand(a), kh.dot_operand(b){prec})",
        f"    a_ptrs += BLOCK_K * {sak}" if sak else "    pass",
        f"    b_ptrs += BLOCK_K * {sbk}" if sbk else "    pass",
    ]


def _result(t: MatmulTemplate, kctx: EpilogueKernelContext, dtype) -> tuple[list[str], TVal]:
    """Lines computing the matmul's result (rounded to its dtype) on the tile, and that value."""
    m, n, _ = t.shape
    lines = ["xindex = rm[:, None]", f"xmask = xindex < {m}", "rindex = rn[None, :]", f"rmask = rindex < {n}"]
    acc = "acc"
    if t.bias is not None and t.beta != 0:
        sm, sn = broadcast_strides(t.bias, (m, n))
        idx = f"{t.bias.offset}{_term('xindex', sm)}{_term('rindex', sn)}"
        mask = " & ".join([x for x, s in (("xmask", sm), ("rmask", sn)) if s]) or None
        load = f"tl.load({kctx.pointers[t.bias.buffer.name]} + ({idx})" + (f", {mask}, other=0)" if mask else ")")
        scaled = "acc" if t.alpha == 1 else f"acc * {float(t.alpha)!r}"
        bias = "bias" if t.beta == 1 else f"bias * {float(t.beta)!r}"
        lines += [f"bias = {load}.to(tl.float32)", f"acc = {scaled} + {bias}"]
    elif t.alpha != 1:
        lines.append(f"acc = acc * {float(t.alpha)!r}")
    if dtype == torch.bfloat16:
        lines.append(f"mm_result = kh.to_bfloat16({acc})")  # round to nearest even, as eager's result
    elif dtype == torch.float16:
        lines.append(f"mm_result = {acc}.to(tl.float16)")
    else:
        lines.append(f"mm_result = {acc}")
    if t.store_out:
        sm, sn = kctx.buffers[t.out].stride
        idx = f"0{_term('xindex', sm)}{_term('rindex', sn)}"
        lines.append(f"tl.store({kctx.pointers[t.out]} + ({idx}), mm_result, xmask & rmask)")
    return lines, TVal("mm_result", dtype, frozenset({"x", "r"}))


def generate_matmul(t: MatmulTemplate, buffers: dict, index: int, dot_precision: str | None = None) -> MatmulKernel:
    """The template's kernel. ``dot_precision`` is ``tl.dot``'s input_precision for float32 operands
    ("ieee", or "tf32" when torch allows TF32 for matmuls)."""
    reads = t.operand_reads + t.epilogue_reads
    writes = t.epilogue_writes + ([t.out] if t.store_out else [])
    params, pointers = kernel_params(reads, writes)
    members = t.epilogue.members if t.epilogue is not None else []
    origins = tuple(o for o in t.extern.node.origins if o is not None)
    origins += tuple(o for m in members for o in m.node.origins if o is not None)
    name = kernel_name("triton_mm", origins, index)
    dtype = buffers[t.out].dtype
    kctx = EpilogueKernelContext(t, buffers, pointers)
    wide = _needs_int64(t, buffers, reads + writes)
    body = _mainloop(t, pointers, wide, dot_precision if dtype == torch.float32 else None)
    lines, result = _result(t, kctx, dtype)
    body += lines
    if members:
        body += _dims_defs(members[0].ranges, t.row_dims)
    cse: dict = {}
    for m in members:
        body.append(f"# {m.name}" + (" (kernel-local)" if m.name in t.epilogue.locals else ""))
        ops = TritonOps(EpilogueContext(kctx, m, result), cse=cse)
        run_body(m.node, ops)
        body += ops.lines + ops.post
    args = [pointers[n] for n, _ in params] + [f"{c}: tl.constexpr" for c in CONSTEXPRS]
    mm, nn, kk = t.shape
    header = [f"# {name}: {t.kind} {mm}x{nn}x{kk} ({TL_DTYPE[dtype]})"
              + (f" + epilogue {', '.join(m.name for m in members)}" if members else "") + "  (matmul template)"]
    header += [f"#   {line}" for line in provenance(origins)]
    if not t.store_out:
        header.append(f"#   {t.out} (the matmul's result) stays in registers")
    src = header + [jit_decorator(body), f"def {name}({', '.join(args)}):"] + ["    " + line for line in body]
    return MatmulKernel(name, "\n".join(src) + "\n", params, origins, t, dtype)
