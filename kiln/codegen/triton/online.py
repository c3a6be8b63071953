"""Online softmax: a row's maximum and its ``sum(exp(x - max))`` in one pass over the row.

A looped kernel (rows longer than one block) runs each member as its own loop over the row, so
softmax reads the row three times: for the maximum, for the sum of exponentials, for the output.
When a member ``m = max(v)`` is followed by ``s = sum(exp(v - m))`` of the same ``v`` over the same
row, one loop keeps both per lane: the running maximum and the running sum, rescaled by
``exp(old_max - new_max)`` when the maximum grows. After the loop the lanes are combined the same
way. Two reads of the row instead of three (the output still reads it again).

Values are those of the two-pass form up to rounding (``exp(v - m1) * exp(m1 - m)`` for
``exp(v - m)``). Infinities and NaN give what the two-pass form gives: the rescale factor is 1
where the maximum did not change (so ``-inf - -inf`` and ``inf - inf`` of an unchanged maximum make
no NaN); a lane that has seen only ``-inf`` adds 0, and a row that is all ``-inf`` gets a NaN sum
(the two-pass form's ``exp(-inf - -inf)``); a NaN, or ``inf - inf`` against a maximum of ``inf``,
propagates as it does there.
"""
from __future__ import annotations

import re

import torch

from kiln.codegen.triton.ops import TL_DTYPE, TritonOps, TVal
from kiln.loopir.handlers import Printer, run_body

_REDUCTION = re.compile(r"(tmp\d+) = reduction\((\w+), (tmp\d+)\)")
_FLOATS = (torch.float32, torch.float64)


def online_pairs(group, buffers) -> dict:
    """{name of a max member: the sum member it computes in the same pass} for the group's members."""
    dtypes = {n: b.dtype for n, b in buffers.items()}
    members = group.members
    return {a.name: b for a, b in zip(members, members[1:]) if _is_pair(a, b, group.locals, dtypes)}


def _listing(member, dtypes) -> list[str]:
    p = Printer(dtypes)
    run_body(member.node, p)
    return p.lines


def _is_pair(a, b, locals_, dtypes) -> bool:
    """``b`` is ``sum(exp(v - a))`` over the same row, with ``a = max(v)``, and lives in registers only."""
    if not (a.is_reduction and b.is_reduction) or b.name not in locals_:
        return False
    da, db = a.node.data, b.node.data
    dtypes_used = {da.src_dtype, da.dtype, db.src_dtype, db.dtype}
    if (da.kind, db.kind) != ("max", "sum") or len(dtypes_used) != 1 or not dtypes_used <= set(_FLOATS):
        return False
    if tuple(da.reduction_ranges) != tuple(db.reduction_ranges) or a.ranges != b.ranges:
        return False
    la, lb = _listing(a, dtypes), _listing(b, dtypes)
    if len(la) < 3 or not la[-1].startswith(f"store({a.name}, "):
        return False
    m = _REDUCTION.fullmatch(la[-2])
    if m is None or m.group(2) != "max":
        return False
    prefix, v = la[:-2], m.group(3)
    rest = lb[len(prefix):]
    if lb[:len(prefix)] != prefix or len(rest) != 5:
        return False
    load = re.fullmatch(rf"(tmp\d+) = load\({re.escape(a.name)}, .*\)", rest[0])
    if load is None:
        return False
    sub = re.fullmatch(rf"(tmp\d+) = sub\({v}, {load.group(1)}\)", rest[1])
    exp = sub and re.fullmatch(rf"(tmp\d+) = exp\({sub.group(1)}\)", rest[2])
    red = exp and _REDUCTION.fullmatch(rest[3])
    return bool(red and red.group(2) == "sum" and red.group(3) == exp.group(1)
                and rest[4].startswith(f"store({b.name}, "))


class OnlineMaxSumOps(TritonOps):
    """``TritonOps`` for the max member of a pair: its reduction also computes the sum member's value,
    which it records as that member's register (the sum member generates no code)."""

    def __init__(self, ctx, sum_name: str):
        super().__init__(ctx, cse=None)
        self.sum_name = sum_name

    def reduction(self, kind, value, dtype):
        assert kind == "max" and self.ctx.reduction_mode == "looped", (kind, self.ctx.reduction_mode)
        ctx = self.ctx
        if value.dtype != dtype:
            value = self.to_dtype(value, dtype)
        row = frozenset({"x", "r"})
        mask, full, T = ctx.mask(row), ctx.shape(row), TL_DTYPE[dtype]
        acc_max, acc_sum = TVal(ctx.new_tmp("accmax"), dtype, row), ctx.new_tmp("accsum")
        self.pre += [f"{acc_max} = tl.full({full}, float('-inf'), {T})", f"{acc_sum} = tl.full({full}, 0, {T})"]
        new_max = TVal(ctx.new_tmp("newmax"), dtype, row)
        self.lines.append(f"{new_max} = tl.where({mask}, kh.maximum({acc_max}, {value}), {acc_max})")
        scale = self._rescale(acc_max, new_max)
        # while a lane has seen only -inf, its terms are exp(-inf - m) = 0 for the row's final m, or NaN
        # when the whole row is -inf (exp(-inf - -inf)): that case is decided after the loop
        exp = self.unary("exp", self.binary("sub", value, new_max))
        term = self.ctx.new_tmp()
        self.lines.append(f"{term} = tl.where({new_max} == float('-inf'), 0.0, {exp})")
        self.lines.append(f"{acc_sum} = tl.where({mask}, {acc_sum} * {scale} + {term}, {acc_sum})")
        self.lines.append(f"{acc_max} = {new_max}")
        self.after_reduction = True  # what follows goes after the loop
        row_max = TVal(ctx.new_tmp(), dtype, frozenset({"x"}))
        self.post.append(f"{row_max} = (tl.reduce({acc_max}, 1, kh.maximum))[:, None].to({T})")
        scale = self._rescale(acc_max, row_max)
        row_sum = TVal(ctx.new_tmp(), dtype, frozenset({"x"}))
        total = f"(tl.reduce({acc_sum} * {scale}, 1, tl.standard._sum_combine))[:, None].to({T})"
        self.post.append(f"{row_sum} = tl.where({row_max} == float('-inf'), float('nan'), {total})")
        ctx.record(self.sum_name, row_sum)
        return row_max

    def _rescale(self, old: TVal, new: TVal) -> str:
        """``exp(old - new)``, and 1 where the maximum is unchanged (also when both are infinite)."""
        factor = self.unary("exp", self.binary("sub", old, new))
        name = self.ctx.new_tmp()
        self.out.append(f"{name} = tl.where({old} == {new}, 1.0, {factor})")
        return name
