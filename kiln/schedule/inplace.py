"""In-place stores: a mutated input's new value is written straight into the input's memory.

A functional ATen graph returns the new value of each input it mutates (``x.add_(1)``, an optimizer's
``p.addcdiv_``); the runtime then copies it into the caller's tensor (``aot/runtime.write_back``).
That copy is a second pass over memory, and for a graph that updates many tensors (an optimizer step)
it is as many extra kernel launches. Where it is safe, the kernel that computes the new value stores
it into the input's memory instead, and the copy is skipped (the graph returns the input itself).

Safe means nothing can read the input's old contents after they are overwritten:
  - the value is a computed (pointwise) buffer with the input's dtype, device and layout, returned
    whole (or row-major like the input, its loops split by the scheduler, returned as the input's view);
  - in its kernel, every load of the input is at the index the value is stored to, by a member at or
    before the value's own (so each element is read before it is written, by the same iteration);
  - no later kernel or ATen call reads the input, and no other graph output is the input.

Otherwise the value gets its own buffer and is copied back, as before. Inputs that share memory with
each other are the capture's concern (they are guarded as the same tensor, or traced as such)."""
from __future__ import annotations

import sympy

from kiln.loopir.handlers import ReadsWrites, run_body
from kiln.loopir.nodes import ComputedBuffer, InputBuffer, Pointwise, Stored, contiguous_strides, numel
from kiln.schedule.scheduler import ExternStep, FusedGroup, Schedule


def plan_inplace_stores(lg, sched: Schedule, buffers: dict, mutated: list[int]) -> dict[str, str]:
    """{buffer name: input name} for the mutated inputs (placeholder positions ``mutated``, whose new
    values are the graph's first outputs) that can take their new value in place. Each kernel that
    stores in place lists both names in its ``aliased`` set (its code generator must not assume the
    two pointers are distinct). Run before code generation."""
    inputs = {b.name: b for b in lg.inputs}
    names = list(lg.arg_names) or [b.name for b in lg.inputs]
    other_outputs = {o.buffer.name for o in lg.outputs[len(mutated):] if isinstance(o, Stored)}
    schedule = _ScheduleView(sched, buffers)
    plan: dict[str, str] = {}
    for k, position in enumerate(mutated):
        if position >= len(names) or k >= len(lg.outputs):
            continue
        inp, out = inputs.get(names[position]), lg.outputs[k]
        if inp is None or not isinstance(out, Stored):
            continue
        buf = out.buffer
        if buf.name in plan or inp.name in plan.values() or inp.name in other_outputs:
            continue
        if _compatible(buf, out, inp) and schedule.reads_are_safe(buf, inp.name):
            plan[buf.name] = inp.name
            schedule.group_of[buf.name][1].aliased |= {buf.name, inp.name}
    return plan


def _compatible(buf, out: Stored, inp: InputBuffer) -> bool:
    """The buffer covers exactly the input's memory, element for element: it has the input's layout and
    is returned whole, or (its loops split by the scheduler, schedule/split.py) both are row-major with
    the same number of elements and the graph returns the buffer viewed with the input's layout."""
    if not (isinstance(buf, ComputedBuffer) and isinstance(buf.data, Pointwise) and buf.dtype == inp.dtype
            and buf.device == inp.device):
        return False
    layout = (tuple(inp.size), tuple(inp.stride))
    if out.is_whole_buffer():
        return _same(buf.allocation(), layout)
    size, stride = buf.allocation()
    return (out.offset == 0 and _same((tuple(out.size), tuple(out.stride)), layout)
            and _same(layout, (layout[0], contiguous_strides(layout[0])))
            and _same((size, stride), (size, contiguous_strides(size))) and sympy.expand(numel(size) - numel(inp.size)) == 0)


def _same(a, b) -> bool:
    (size_a, stride_a), (size_b, stride_b) = a, b
    return len(size_a) == len(size_b) and all(sympy.expand(sympy.sympify(x) - y) == 0
                                              for x, y in zip((*size_a, *stride_a), (*size_b, *stride_b)))


class _ScheduleView:
    """What the planner asks of a schedule, each worked out once: where each computed buffer runs (step
    index, group, member position), and which buffers the steps after each step read."""

    def __init__(self, sched: Schedule, buffers: dict):
        self.group_of: dict[str, tuple[int, FusedGroup, int]] = {}
        for index, step in enumerate(sched.steps):
            if isinstance(step, FusedGroup):
                for position, member in enumerate(step.members):
                    self.group_of[member.name] = (index, step, position)
        self.read_after: list[set] = [set() for _ in sched.steps]  # read by the steps after step i
        later: set = set()
        for index in range(len(sched.steps) - 1, -1, -1):
            self.read_after[index] = set(later)
            later |= _step_reads(sched.steps[index])
        self.dtypes = {name: b.dtype for name, b in buffers.items()}

    def reads_are_safe(self, buf: ComputedBuffer, inp: str) -> bool:
        if buf.name not in self.group_of:
            return False
        index, group, position = self.group_of[buf.name]
        store = self.store_index(buf)
        for i, member in enumerate(group.members):
            loads = [at for name, at in member.reads if name == inp]
            if not loads:
                continue
            if i > position or member.node.data.ranges != buf.data.ranges:
                return False
            if any(sympy.expand(at - store) != 0 for at in loads):
                return False
        return inp not in self.read_after[index] and None not in self.read_after[index]

    def store_index(self, buf: ComputedBuffer):
        rw = ReadsWrites(self.dtypes)
        run_body(buf, rw)
        (index,) = [index for name, index in rw.writes if name == buf.name]
        return index


def _step_reads(step) -> set:
    if isinstance(step, FusedGroup):
        return step.reads
    if isinstance(step, ExternStep):
        return set(step.node.read_names)
    reads = set()  # a matmul template (schedule/templates.py): its operands and its epilogue's reads
    for attr in ("operand_reads", "epilogue_reads"):
        getter = getattr(step, attr, None)
        if getter is None:
            return {None}  # a step kind this pass does not know: assume it may read anything
        reads |= set(getter() if callable(getter) else getter)
    return reads
