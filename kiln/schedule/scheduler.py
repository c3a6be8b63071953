"""The scheduler: lowered nodes -> an ordered list of kernels (fused groups and extern calls).

Greedy in program order: each computed node joins the legal group that saves the most bytes
(``fusion.score``), or starts a new group. A node may only join a group if everything it depends on
outside the group is computed by an earlier group, so the groups' order stays a topological order.
A buffer written and read only inside one group (and not a graph output) becomes local to the
kernel: it is never allocated.
"""
from __future__ import annotations

import dataclasses

from kiln.loopir.nodes import ExternKernel
from kiln.loopir.scatter import is_update
from kiln.schedule.fusion import common_prefix, group_legal, score
from kiln.schedule.nodes import SchedulerNode, make_node, make_scheduler_nodes
from kiln.loopir.scan import is_scan
from kiln.loopir.sort import is_row_sort
from kiln.schedule.scan_rules import scan_group_ok
from kiln.schedule.split import adopt, refine, split_buffer


# buffers one kernel may touch: each is a kernel argument (ctypes takes at most 1024 per call; Triton's
# launch cost and compile time grow with them). A group that would exceed it is not joined.
MAX_KERNEL_BUFFERS = 256


@dataclasses.dataclass(eq=False)
class FusedGroup:
    """Nodes that become one generated kernel, sharing ``depth`` outer loops of sizes ``outer``."""

    members: list[SchedulerNode]
    depth: int
    index: int
    locals: set[str] = dataclasses.field(default_factory=set)  # buffers that never leave the kernel
    name: str = ""
    # buffers that share memory in this kernel: a value stored into the input it replaces (schedule/inplace.py)
    aliased: set[str] = dataclasses.field(default_factory=set)

    @property
    def outer(self) -> list[int]:
        return self.members[0].ranges[: self.depth]

    @property
    def writes(self) -> set[str]:
        return {w for m in self.members for w in m.writes}

    @property
    def reads(self) -> set[str]:
        return {r for m in self.members for r in m.read_names}


@dataclasses.dataclass(eq=False)
class ExternStep:
    node: SchedulerNode
    index: int


@dataclasses.dataclass
class Schedule:
    steps: list  # FusedGroup | ExternStep (| templates.MatmulTemplate), in execution order

    def groups(self) -> list[FusedGroup]:
        return [s for s in self.steps if isinstance(s, FusedGroup)]

    def format(self) -> str:
        lines = []
        for s in self.steps:
            if isinstance(s, FusedGroup):
                names = ", ".join(m.name for m in s.members)
                local = f"  local: {', '.join(sorted(s.locals))}" if s.locals else ""
                lines.append(f"kernel {s.name}: [{names}] outer {s.outer}{local}")
            elif hasattr(s, "describe"):  # a step made by a later pass (schedule/templates.py)
                lines.append(s.describe())
            else:
                lines.append(f"extern {s.node.name}: {s.node.node.op}")
        return "\n".join(lines)


def schedule(nodes, buffers: dict, output_names: set[str], fuse: bool = True, can_fuse=None) -> Schedule:
    """``can_fuse(members, depth)``, when given, is a code generator's own condition on a group (on top
    of ``fusion.group_legal``)."""
    dtypes = {name: b.dtype for name, b in buffers.items()}
    nbytes = {name: b.nbytes for name, b in buffers.items()}
    snodes = make_scheduler_nodes(nodes, dtypes)
    steps: list = []
    group_of: dict[SchedulerNode, object] = {}
    for sn in snodes:
        if sn.is_extern:
            step = ExternStep(sn, len(steps))
        else:
            step = _best_group(sn, steps, group_of, nbytes, dtypes, can_fuse) if fuse else None
            if step is None:
                step = FusedGroup([sn], len(sn.ranges), len(steps))
                steps.append(step)
            else:
                step.members.append(sn)
                step.depth = common_prefix(step.outer, sn.ranges)
            group_of[sn] = step
            continue
        steps.append(step)
        group_of[sn] = step
    _mark_locals(steps, snodes, group_of, output_names)
    return Schedule(steps)


def _best_group(sn: SchedulerNode, steps, group_of, nbytes, dtypes, can_fuse=None):
    """The group ``sn`` fuses into with the best score, or None.

    Everything ``sn`` needs from outside the group must be computed before the group runs. A step
    after the group that ``sn`` needs is moved in front of the group when its own inputs allow. When
    ``sn``'s loop dims split into the group's outer loop sizes (a view between them), the split node
    is tried too, and kept if it fuses.
    """
    best, best_score, best_moves, best_split = None, 0, [], None
    if is_update(sn.node):
        return None  # a scatter (kiln/loopir/scatter.py) is a kernel of its own
    for step in steps:
        if not isinstance(step, FusedGroup) or any(is_update(m.node) for m in step.members):
            continue
        s = score(step.reads, step.writes, sn, nbytes)
        if s == 0 or s < best_score:
            continue
        if len(step.reads | step.writes | sn.read_names | set(sn.writes)) > MAX_KERNEL_BUFFERS:
            continue
        later = {group_of[d] for d in sn.deps if group_of[d] is not step and group_of[d].index >= step.index}
        if not all(_can_move_before(h, step, steps, group_of) for h in later):
            continue
        for cand in _candidates(sn, step, dtypes):
            k = common_prefix(step.outer, cand.ranges)
            if scan_group_ok(step.members, cand) is False:
                continue
            if cand.is_reduction and any(m.is_reduction for m in step.members) and k < 1:
                continue
            if can_fuse is not None and not can_fuse(step.members + [cand], k):
                continue
            if group_legal(step.members + [cand], k):
                best, best_score, best_moves = step, s, sorted(later, key=lambda h: h.index)
                best_split = cand if cand is not sn else None
                break
    for h in best_moves:
        steps.remove(h)
        steps.insert(steps.index(best), h)
    for i, st in enumerate(steps):
        st.index = i
    if best_split is not None:
        adopt(sn.node, best_split.node)
        sn.reads = best_split.reads
    return best


def _candidates(sn: SchedulerNode, step, dtypes):
    """``sn`` as it is, then (lazily) ``sn`` with its loop dims split into the group's outer sizes."""
    yield sn
    k = common_prefix(step.outer, sn.ranges)
    if k >= len(step.outer) or sn.is_extern or is_scan(sn) or is_row_sort(sn):  # (a scan's dim would move)
        return
    factors = refine(sn.ranges, step.outer)
    if factors is not None:
        yield make_node(split_buffer(sn.node, factors), dtypes, sn.order, sn.deps)


def _can_move_before(h, g, steps, group_of) -> bool:
    """Can step ``h`` (after ``g``) run just before ``g``? Only if all it reads comes from before ``g``."""
    members = h.members if isinstance(h, FusedGroup) else [h.node]
    return all(group_of[d] is not h and group_of[d].index < g.index for m in members for d in m.deps)


def _mark_locals(steps, snodes, group_of, output_names) -> None:
    readers: dict[str, set] = {}
    for sn in snodes:
        for name in sn.read_names:
            readers.setdefault(name, set()).add(group_of[sn])
    for step in steps:
        if not isinstance(step, FusedGroup) or len(step.members) == 1:
            continue
        for m in step.members:
            for w in m.writes:
                if w in output_names or w not in readers:
                    continue
                if readers[w] == {step}:
                    step.locals.add(w)


def extern_nodes(sched: Schedule) -> list[ExternKernel]:
    return [s.node.node for s in sched.steps if isinstance(s, ExternStep)]
