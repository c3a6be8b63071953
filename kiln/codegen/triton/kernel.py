"""Triton code for one fused group.

Two kernel shapes:

* **pointwise** (every member is pointwise over exactly the group's outer loops): 1-D blocks over
  the flattened iteration space, ``xindex = program * XBLOCK + arange(XBLOCK)``, masked at the
  ragged end. A pointwise group that transposes -- it reads or writes some buffer contiguously along
  a loop other than the last, while its stores run contiguously along the last (``tile_dim``) -- is
  *tiled* instead: each program handles a ``[YBLOCK, XBLOCK]`` tile, ``yindex`` (``[YBLOCK, 1]``)
  over that loop and ``xindex`` (``[1, XBLOCK]``) over the other loops flattened, so both accesses
  are coalesced (Triton moves the tile between the two layouts through shared memory).
  A pointwise group that reads per-row values (a read that does not move along the last loop: a
  softmax's max and sum, a loss's labels) is tiled by *rows* (``row_tiles``): ``yindex`` over every
  loop but the last, flattened, and ``xindex`` over the last, so a row's values are loaded once per
  row of the tile, where a 1-D block computed each element's row with ``//`` and loaded them once per
  element (scalar loads beside the data's vector loads).
* **row** (anything else): each program handles ``XBLOCK`` outer iterations ("rows": ``xindex`` is
  ``[XBLOCK, 1]``); each member then covers its own inner space (its inner pointwise loops or its
  reduction loops, flattened) along a second axis of ``RBLOCK`` lanes, ``[1, RBLOCK]``. When every
  member's inner space fits one block the kernel is *persistent* (no loop, a reduction is one
  ``tl.sum``/``tl.reduce`` over the block); otherwise each member loops over its inner space in
  chunks of ``RBLOCK`` with a block accumulator (*looped*). Members run in program order. A value a
  member reads from an earlier member of the group comes from registers, never from memory: a
  per-row value (a reduction result) broadcasts along the row, an inner block must be read at the
  element its producer computed (``fusable`` makes the scheduler keep other groups apart).
"""
from __future__ import annotations

import dataclasses
import math

import sympy

from kiln.codegen.common import kernel_name, kernel_params, mark_updated_in_place, print_index_py, provenance
from kiln.codegen.triton.online import OnlineMaxSumOps, online_pairs
from kiln.codegen.triton.persistent import persistent_fits
from kiln.codegen.triton.ops import TritonOps, jit_decorator
from kiln.loopir.handlers import iteration_vars, run_body
from kiln.loopir.index import ModularIndexing, linear_index, simplify_with_ranges, var
from kiln.loopir.nodes import Reduction
from kiln.loopir.scan import is_scan
from kiln.loopir.sizes import (any_symbolic, exact_sizes, hint, is_size_symbol, is_symbolic, prod, size,
                               used_size_symbols)
from kiln.schedule.fusion import block_of, split_outer
from kiln.schedule.scheduler import FusedGroup

PERSISTENT_MAX = 4096  # inner spaces up to this many elements are held in registers whole
SIDE_BY_SIDE_MIN_ROWS = 256  # see fusable: pointwise members sharing only outer loops need this many rows
INT32_LIMIT = 2 ** 31 - 1
TILE_MIN = 16  # a transposing pointwise kernel is tiled when both of its tile's loops are this long
ROW_TILE_MIN_COLS = 256  # row tiles (row_tiles): the last loop at least this long ...
ROW_TILE_MIN_ELEMENTS = 1 << 16  # ... and the kernel at least this large (static sizes)


@dataclasses.dataclass
class TritonKernel:
    name: str
    source: str  # the @jit function (module imports are added by the runtime)
    params: list[tuple[str, str]]  # (buffer name, "in" | "out") in argument order
    origins: tuple
    style: str  # "pointwise" | "tiled" | "persistent" | "looped"
    xnumel: int
    rnumel: int  # the largest inner space of a member (1 for pointwise kernels)
    fn: object = None  # the launcher, set by the runtime
    ynumel: int = 1  # tiled kernels: the tile loop's size (xnumel: the other loops')
    size_args: list = dataclasses.field(default_factory=list)  # size symbols passed after the pointers
    xnumel_expr: object = None  # xnumel as a size expression (symbolic: the grid is computed per call)
    rnumel_expr: object = None  # rnumel as a size expression (symbolic: the block sizes are chosen per call)
    ynumel_expr: object = 1  # a tiled kernel's ynumel as a size expression
    column: bool = False  # a row kernel whose reads run along its rows' outer loops (column_reads)
    row_tiles: bool = False  # a tiled kernel whose y axis is every loop but the last (row_tiles)
    # size-generic kernels: the largest index the kernel can compute is below the largest of these
    # size expressions; the launcher sets INDEX64 (64-bit indices) for sizes where it reaches int32's range
    index_bounds: tuple = ()


# ------------------------------------------------------------------------------- fusion legality


def inner_sizes(member, k: int) -> list[int]:
    """The sizes of a member's loops inside the group's ``k`` outer loops: inner pointwise dims, or
    the reduction dims of a reduction (whose outer loops must then be all of its loops)."""
    if member.is_reduction:
        return [size(n) for n in member.node.data.reduction_ranges if n != 1]
    return member.ranges[k:]


def _inner_vars(member, k: int) -> list[sympy.Symbol]:
    if member.is_reduction:
        return [var("r", d) for d in range(len(inner_sizes(member, k)))]
    return [var("x", d) for d in range(k, len(member.ranges))]


def _store_index(member) -> sympy.Expr:
    xs, _ = iteration_vars(member.node)
    return linear_index(xs, member.node.stride)


def register_read_ok(consumer, index, producer, k: int) -> bool:
    """Can ``consumer`` read ``producer``'s buffer at ``index`` from the producer's registers?"""
    block = block_of(producer, k)
    if block is None:
        return False
    if block[1] == 1:
        return True  # one value per row: broadcast along the consumer's row
    if producer.is_reduction or inner_sizes(consumer, k) != inner_sizes(producer, k):
        return False
    rename = dict(zip(_inner_vars(consumer, k), _inner_vars(producer, k)))
    return sympy.expand(sympy.sympify(index).xreplace(rename) - _store_index(producer)) == 0


def fusable(members, k: int, persistent_max: int = PERSISTENT_MAX) -> bool:
    """The Triton generator's extra condition on a fused group (on top of ``schedule.fusion``)."""
    if any(m.is_reduction and len(m.ranges) != k for m in members):
        return False
    by_name = {w: m for m in members for w in m.writes}
    needs_persistent = False
    for consumer in members:
        for name, index in consumer.reads:
            producer = by_name.get(name)
            if producer is None or producer is consumer:
                continue
            if not register_read_ok(consumer, index, producer, k):
                return False
            needs_persistent |= block_of(producer, k)[1] != 1
    inner = max(hint(prod(inner_sizes(m, k))) for m in members)
    if needs_persistent:  # (a symbolic inner size: persistent under the guard that it fits one block)
        return persistent_fits([prod(inner_sizes(m, k)) for m in members], persistent_max)
    if not any(m.is_reduction for m in members) and inner > 1:
        # Pointwise members of different shapes side by side over shared outer loops (RoPE's q and k
        # over (batch, kv-head)): the fusion only shares reads, while the kernel runs one program per
        # few rows and walks each row's inner space. Few rows, or long rows (a loop), cost far more
        # than the shared reads save: separate pointwise kernels are flat and fully parallel.
        # A program walks every member's row in turn: the rows together stay within what one program
        # holds (an optimizer step's parameters sharing a first dim made one kernel of ~100 members that
        # ran 2x slower than separate kernels, and took minutes to compile).
        rows = hint(prod(members[0].ranges[:k]))
        row_work = sum(hint(prod(inner_sizes(m, k))) for m in members)
        return inner <= persistent_max and row_work <= persistent_max and rows >= SIDE_BY_SIDE_MIN_ROWS and \
            not any(any_symbolic(inner_sizes(m, k)) for m in members)
    return True


def _unit_stride_dim(index, dims: dict) -> int | None:
    """The loop along which ``index`` advances by one element (``x_d`` or ``x_d % m`` with a long
    ``m``, coefficient 1), or None."""
    for term in sympy.Add.make_args(sympy.expand(index)):
        coeff, rest = term.as_coeff_Mul()
        if coeff != 1:
            continue
        if rest in dims:
            return dims[rest]
        if isinstance(rest, ModularIndexing) and rest.args[0] in dims and rest.args[1] == 1 \
                and rest.args[2].is_Integer and int(rest.args[2]) >= TILE_MIN:
            return dims[rest.args[0]]
    return None


def column_reads(group: FusedGroup, buffers: dict) -> bool:
    """For a row kernel: do most bytes it reads from memory (reads that move along the rows' inner
    loops) advance by one element along an outer loop rather than an inner one? A column reduction
    (``x.sum(0)`` of a row-major matrix, batch norm's statistics of a channels-last tensor) is: a block
    of one row and many inner elements touches one element per memory segment; it needs many
    neighbouring rows per block and few inner elements (``launch.candidate_configs``)."""
    k = group.depth
    produced = {w for m in group.members for w in m.writes}
    along_outer = along_inner = 0
    for m in group.members:
        inner = set(_inner_vars(m, k))
        if not inner:
            continue
        dims = {var("x", d): "outer" for d in range(k)}
        dims.update({v: "inner" for v in inner})
        for name, index in m.reads:
            index = sympy.sympify(index)
            if name in produced or not (index.free_symbols & inner):
                continue
            where = _unit_stride_dim(index, dims)
            size = buffers[name].dtype.itemsize
            if where == "outer":
                along_outer += size
            elif where == "inner":
                along_inner += size
    return along_outer > along_inner


def tile_dim(group: FusedGroup, buffers: dict) -> int | None:
    """For a pointwise group: the loop to tile along, or None for a 1-D kernel.

    Every access (a load from outside the group, a store) runs contiguously along at most one loop.
    When some run along the last loop (a dense result always does: it is computed in memory order)
    and others along an earlier loop while also moving with the last one -- a transpose, where a
    1-D block would touch one element per memory segment -- the earlier loop carrying the most bytes
    is the tile's y loop. A read that does not move with the last loop (a per-row bias) is no transpose.
    """
    sizes = list(group.outer)  # (size expressions in a size-generic kernel: judged by their hints)
    last = len(sizes) - 1
    if last < 1 or hint(sizes[last]) < TILE_MIN:
        return None
    dims = {var("x", d): d for d in range(len(sizes))}
    ranges = {v: sizes[d] for v, d in dims.items()}
    produced = {w for m in group.members for w in m.writes}
    accesses = [(r, index) for m in group.members for r, index in m.reads if r not in produced]
    accesses += [(w, _store_index(m)) for m in group.members for w in m.writes if w not in group.locals]
    along_last, across = 0, {}
    for name, index in accesses:
        index = simplify_with_ranges(sympy.sympify(index), ranges)
        d = _unit_stride_dim(index, dims)
        size = buffers[name].dtype.itemsize
        if d == last:
            along_last += size
        elif d is not None and hint(sizes[d]) >= TILE_MIN and var("x", last) in index.free_symbols:
            across[d] = across.get(d, 0) + size
    if not along_last or not across:
        return None
    return max(across, key=lambda d: (across[d], d))


def row_tiles(group: FusedGroup) -> bool:
    """For a pointwise group that is no transpose: tile it rows x columns (y: every loop but the last,
    x: the last) because some read from outside the group is a per-row value (its index moves with an
    outer loop but not with the last one)."""
    sizes = list(group.outer)
    if len(sizes) < 2 or any_symbolic(sizes):
        return False
    if sizes[-1] < ROW_TILE_MIN_COLS or math.prod(sizes) < ROW_TILE_MIN_ELEMENTS:
        return False
    ranges = {var("x", d): n for d, n in enumerate(sizes)}
    last = var("x", len(sizes) - 1)
    produced = {w for m in group.members for w in m.writes}
    for m in group.members:
        for name, index in m.reads:
            if name in produced:
                continue
            loops = simplify_with_ranges(sympy.sympify(index), ranges).free_symbols & set(ranges)
            if loops and last not in loops:
                return True
    return False


# ------------------------------------------------------------------------------------ generation


def _py(n) -> str:
    """A size in Triton code: an int, or an expression over the kernel's size arguments (parenthesized
    unless a single symbol: it is used as an operand of // and %)."""
    if not is_symbolic(n):
        return str(n)
    n = exact_sizes(n)
    text = print_index_py(n)
    return text if getattr(n, "is_Symbol", False) else f"({text})"


def _next_pow2(n: int) -> int:
    return 1 << max(0, int(n) - 1).bit_length()


class KernelContext:
    """Pointers, registers and temporaries of one kernel; ``MemberContext`` adds a member's indexing."""

    def __init__(self, group: FusedGroup, buffers: dict):
        self.group, self.buffers, self.k = group, buffers, group.depth
        self.y_dims: tuple[int, ...] = ()  # tiled pointwise kernels: the loops along the tile's y axis
        writes = [w for m in group.members for w in m.writes if w not in group.locals]
        produced = {w for m in group.members for w in m.writes}
        reads = [r for m in group.members for r, _ in m.reads if r not in produced]
        self.params, self.pointers = kernel_params(reads, writes)
        self.params = mark_updated_in_place(self.params, group.members)
        self.producers = {w: m for m in group.members for w in m.writes}
        self.registers: dict[str, object] = {}
        self.count = 0
        self.inner_prefixes: dict[tuple, str] = {}
        self.evictions: dict[str, dict[str, str]] = {}  # member -> buffer -> eviction policy of its loads
        self.merge_outer = False  # set where every outer loop variable comes from xindex (merge_loop_vars)
        self.merged: dict[tuple[int, int], sympy.Symbol] = {}  # (first, last) outer loop -> merged variable

    def merged_var(self, first: int, last: int) -> sympy.Symbol:
        key = (first, last)
        if key not in self.merged:  # (every loop: the flat index itself)
            name = "xindex" if key == (0, len(self.group.outer) - 1) else f"x{first}_{last}"
            self.merged[key] = sympy.Symbol(name, integer=True, nonnegative=True)
        return self.merged[key]

    def merged_defs(self) -> list[str]:
        """Definitions of the merged loop variables used: ``x0_1`` is ``x0 * size1 + x1`` computed from
        the flat index with one division (and a modulo unless it starts at the outermost loop)."""
        sizes, lines = self.group.outer, []
        for (first, last), sym in sorted(self.merged.items()):
            if sym.name == "xindex":
                continue
            inner = prod(sizes[last + 1:])
            expr = "xindex" if inner == 1 else f"(xindex // {_py(inner)})"
            if first > 0:
                expr = f"{expr} % {_py(prod(sizes[first:last + 1]))}"
            lines.append(f"{sym.name} = {expr}")
        return lines

    def plan_evictions(self, looped_members: list) -> None:
        """Cache hints for a looped kernel, whose loops may read a buffer more than once (a softmax
        row: once for max and sum, again to normalize): a load that a later loop repeats keeps its
        lines in L2 (evict_last), the last of them lets them go (evict_first). Measured on an H100,
        a 2048x32768 softmax went from 67% to 88% of copy bandwidth with 16 warps."""
        readers: dict[str, list[int]] = {}
        for i, m in enumerate(looped_members):
            for name in dict.fromkeys(r for r, _ in m.reads if r not in self.producers):
                readers.setdefault(name, []).append(i)
        for name, idx in readers.items():
            if len(idx) < 2:
                continue
            for i in idx:
                policy = "evict_first" if i == idx[-1] else "evict_last"
                self.evictions.setdefault(looped_members[i].name, {})[name] = policy

    def new_tmp(self, prefix: str = "tmp") -> str:
        self.count += 1
        return f"{prefix}{self.count - 1}"

    def inner_prefix(self, sizes) -> str:
        sizes = tuple(sizes)
        if sizes not in self.inner_prefixes:
            self.inner_prefixes[sizes] = "r" + "abcdefghijklmnopqrstuvwxyz"[len(self.inner_prefixes) % 26] + (
                str(len(self.inner_prefixes) // 26) if len(self.inner_prefixes) >= 26 else "")
        return self.inner_prefixes[sizes]


class MemberContextBase:
    """Buffer and register queries every member context answers the same way (a fused group's member
    here, a matmul epilogue's in ``matmul.py``); ``kctx`` holds the kernel's buffers and registers."""

    def new_tmp(self, prefix: str = "tmp") -> str:
        return self.kctx.new_tmp(prefix)

    def dtype_of(self, name):
        return self.kctx.buffers[name].dtype

    def pointer(self, name):
        return self.kctx.pointers.get(name)

    def eviction(self, name) -> str | None:
        """The cache hint for this member's loads of ``name`` (``KernelContext.plan_evictions``)."""
        return None

    def record(self, name, value):
        self.kctx.registers[name] = value

    def printed_index(self, expr) -> tuple[str, frozenset]:
        """A simplified index as Triton code, and the block axes it varies along."""
        axes = set()
        for s in expr.free_symbols:
            if s in self.indirect:
                axes |= self.indirect[s]
            elif s in self.axis_of or not is_size_symbol(s):
                axes.add(self.axis_of[s])
        return print_index_py(exact_sizes(expr)), frozenset(axes)


class MemberContext(MemberContextBase):
    """What ``TritonOps`` asks while generating one member."""

    def __init__(self, kctx: KernelContext, member, row: bool, reduction_mode: str):
        self.kctx, self.member, self.row, self.reduction_mode = kctx, member, row, reduction_mode
        k = kctx.k
        self.sizes = inner_sizes(member, k) if row else []
        self.prefix = kctx.inner_prefix(self.sizes) if row else ""
        outer = {var("x", d): n for d, n in enumerate(member.ranges[:k])}
        inner_syms = _inner_vars(member, k) if row else []
        self.ranges = dict(outer)
        self.ranges.update(dict(zip(inner_syms, self.sizes)))
        if not row:  # pointwise kernels: every loop is an outer loop
            self.ranges = {var("x", d): n for d, n in enumerate(member.ranges)}
        self.rename = {s: sympy.Symbol(f"{self.prefix}{d}", integer=True, nonnegative=True)
                       for d, s in enumerate(inner_syms)}
        self.axis_of = {s: "x" for s in outer} if row else {s: "x" for s in self.ranges}
        if not row:
            self.axis_of.update({var("x", d): "y" for d in kctx.y_dims})
        self.axis_of.update({s: "r" for s in self.rename.values()})
        self.indirect: dict = {}  # symbols made by ops.indirect_indexing -> the axes of their values
        self.indirect_nonempty: dict = {}  # of those, where the indexed dim may be empty: its test

    # ------------------------------------------------------------------------ buffers

    def eviction(self, name) -> str | None:
        return self.kctx.evictions.get(self.member.name, {}).get(name)

    def register(self, name, index):
        producer = self.kctx.producers.get(name)
        if producer is None or producer is self.member:
            return None
        if not register_read_ok(self.member, index, producer, self.kctx.k):
            raise NotImplementedError(f"Triton: {self.member.name} reads {name} where its producer did not compute it")
        return self.kctx.registers[name]

    # ------------------------------------------------------------------------ indexing

    def index(self, expr) -> tuple[str, frozenset]:
        e = simplify_with_ranges(sympy.sympify(expr), self.ranges).xreplace(self.rename)
        if self.kctx.merge_outer:
            e = merge_loop_vars(e, self.kctx)
            self.axis_of.update({sym: "x" for sym in self.kctx.merged.values()})
        return self.printed_index(e)

    def mask(self, axes) -> str | None:
        parts = []
        if "y" in axes:
            parts.append("ymask")
        if "x" in axes:
            parts.append("xmask")
        if "r" in axes:
            parts.append(f"rmask_{self.prefix}")
        return " & ".join(parts) or None

    def shape(self, axes) -> str:
        if not self.row:
            if self.kctx.y_dims:
                return f"[{'YBLOCK' if 'y' in axes else 1}, {'XBLOCK' if 'x' in axes else 1}]"
            return "[XBLOCK]"
        return f"[{'XBLOCK' if 'x' in axes else 1}, {'RBLOCK' if 'r' in axes else 1}]"

    def reduction_linear(self) -> str:
        return "rindex"


def merge_loop_vars(expr, kctx: KernelContext):
    """``expr`` with each run of adjacent outer loop variables that it uses as one flat position
    (``c*size1*x0 + c*x1``: coefficients in the ratio of the loops' sizes) replaced by one merged
    variable (``c*x0_1``), which the kernel computes from ``xindex`` with one division. This is exact
    for every value of ``xindex`` (also past the mask): ``x0*size1 + x1 == xindex // inner`` for the
    outermost loops, ``(xindex // inner) % (size0*size1)`` for others. Dynamic sizes gain most: each
    loop variable costs a division by a runtime size, which the GPU cannot turn into a multiply."""
    sizes = kctx.group.outer
    xs = [var("x", d) for d in range(len(sizes))]
    used = [d for d, x in enumerate(xs) if x in expr.free_symbols]
    if len(used) < 2:
        return expr
    coeffs: dict[int, sympy.Expr] = {}
    nonlinear: set[int] = set()
    terms = sympy.Add.make_args(sympy.expand(expr))
    for term in terms:
        ds = [d for d in used if term.has(xs[d])]
        if len(ds) == 1:
            c, dep = term.as_independent(xs[ds[0]], as_Add=False)
            if dep == xs[ds[0]]:
                coeffs[ds[0]] = coeffs.get(ds[0], 0) + c
                continue
        nonlinear.update(ds)
    linear = [d for d in used if d in coeffs and d not in nonlinear]
    runs, d = [], 0
    while d < len(sizes):
        e = d
        while e + 1 in linear and d in linear and sympy.expand(coeffs[e] - coeffs[e + 1] * sizes[e + 1]) == 0:
            e += 1
        if e > d:
            runs.append((d, e))
        d = e + 1
    if not runs:
        return expr
    merged = {i for a, b in runs for i in range(a, b + 1)}
    rest = [t for t in terms if not any(t.has(xs[i]) for i in merged)]
    return sympy.Add(*rest, *(coeffs[b] * kctx.merged_var(a, b) for a, b in runs))


def index_var_defs(names, sizes, source: str) -> list[str]:
    """``name_d = (source // inner) % size_d`` for each dim: loop variables of ``sizes`` (row-major)
    from the flat index ``source``."""
    lines = []
    for d, (name, n) in enumerate(zip(names, sizes)):
        inner = prod(sizes[d + 1:])
        expr = source if inner == 1 else f"({source} // {_py(inner)})"
        if d > 0:
            expr = f"{expr} % {_py(n)}"
        lines.append(f"{name} = {expr}")
    return lines


def _outer_defs(sizes, source: str) -> list[str]:
    """Definitions of the loop variables ``x0..`` over ``sizes`` from a flat ``source`` index."""
    return index_var_defs([f"x{d}" for d in range(len(sizes))], sizes, source)


def _inner_defs(prefix: str, sizes) -> list[str]:
    return index_var_defs([f"{prefix}{d}" for d in range(len(sizes))], sizes, "rindex")


def _indent(lines, n=1):
    pad = "    " * n
    return [pad + line if line else line for line in lines]


def _index_dtype_is_64(group, buffers) -> bool:
    names = _buffers_of(group)
    sizes = [buffers[n].numel for n in names] + [prod(group.outer)]
    if any_symbolic(sizes):
        return True  # symbolic sizes: 64-bit indices are right for every size
    biggest = max((buffers[n].numel for n in names), default=1)
    return biggest > INT32_LIMIT or math.prod(group.outer) > INT32_LIMIT


def generate_kernel(group: FusedGroup, buffers: dict, index: int, persistent_max: int = PERSISTENT_MAX) -> TritonKernel:
    if any(is_scan(m) for m in group.members):
        from kiln.codegen.triton.scan import generate_scan_kernel

        return generate_scan_kernel(group, buffers, index, persistent_max)
    kctx = KernelContext(group, buffers)
    origins = tuple(o for m in group.members for o in m.node.origins if o is not None)
    name = kernel_name("triton", origins, index)
    k = group.depth
    xnumel = prod(group.outer)
    row = not all(not m.is_reduction and len(m.ranges) == k for m in group.members)
    inners = [prod(inner_sizes(m, k)) for m in group.members] if row else [1]
    rnumel = max(inners, key=hint)
    persistent = persistent_fits(inners, persistent_max)
    style = "pointwise" if not row else ("persistent" if persistent else "looped")
    if not fusable(group.members, k, persistent_max):
        raise NotImplementedError(f"Triton cannot generate group {[m.name for m in group.members]} at depth {k}")
    pid = "pid"  # (defined by _index_width_head once the size arguments are known)
    updates = any(kind == "inout" for _, kind in kctx.params)  # a scatter: 1-D blocks over its source
    tile = tile_dim(group, buffers) if not row and not updates else None
    by_rows = tile is None and not row and not updates and row_tiles(group)
    kctx.y_dims = (tile,) if tile is not None else tuple(range(len(group.outer) - 1)) if by_rows else ()
    ynumel = 1
    if kctx.y_dims:
        style, ynumel = "tiled", prod([group.outer[d] for d in kctx.y_dims])
        xnumel = prod([n for d, n in enumerate(group.outer) if d not in kctx.y_dims])
        body = _tiled_head(group.outer, kctx.y_dims, xnumel, ynumel, pid)
    else:
        body = [f"xnumel = {_py(xnumel)}", f"xoffset = {pid} * XBLOCK"]
        if row:
            body += ["xindex = xoffset + tl.arange(0, XBLOCK)[:, None]", "xmask = xindex < xnumel",
                     "rbase = tl.arange(0, RBLOCK)[None, :]"]
            if style == "persistent":
                body.append("rindex = rbase")
        else:
            body += ["xindex = xoffset + tl.arange(0, XBLOCK)", "xmask = xindex < xnumel"]
        body += _outer_defs(group.outer, "xindex")
        kctx.merge_outer = True
    defs_end = len(body)
    shared_cse: dict = {}
    defined_prefixes: set[str] = set()
    pairs = online_pairs(group, buffers) if style == "looped" else {}
    in_pairs = {b.name for b in pairs.values()}
    if style == "looped":
        kctx.plan_evictions([m for m in group.members if m.name not in in_pairs
                             and (m.is_reduction or inner_sizes(m, k))])
    for m in group.members:
        if m.name in in_pairs:
            continue  # computed with its max member (online softmax)
        note = f"; {pairs[m.name].name} in the same pass (online softmax)" if m.name in pairs else ""
        body.append(f"# {m.name}" + (f" (kernel-local)" if m.name in group.locals else "") + note)
        body += _member_code(kctx, m, row, style, shared_cse, defined_prefixes, pairs.get(m.name))
    body[defs_end:defs_end] = kctx.merged_defs()
    size_args = used_size_symbols("\n".join(body))
    bounds = ()
    if size_args:  # size-generic: the launcher picks the index width per call (INDEX64) from these
        bounds = tuple(dict.fromkeys([prod(group.outer) * max(inners, key=hint)]
                                     + [buffers[n].numel for n in _buffers_of(group)]))
        # (a buffer's size can name a symbol the body does not, as ``e[0]`` reads only a row of ``e``:
        # the kernel takes it too, so that the launcher can compute the bound)
        size_args = used_size_symbols("\n".join(body + [str(b) for b in bounds]))
    params = [kctx.pointers[n] for n, _ in kctx.params] + [str(s) for s in size_args] + ["XBLOCK: tl.constexpr"]
    if row:
        params.append("RBLOCK: tl.constexpr")
    if style == "tiled":
        params.append("YBLOCK: tl.constexpr")
    if size_args:
        params.append("INDEX64: tl.constexpr")
    body = _index_width_head(size_args, _index_dtype_is_64(group, buffers)) + body
    how = style if style != "tiled" else "tiled by rows" if by_rows else f"tiled: x{tile} along y"
    header = [f"# {name}: {', '.join(m.name for m in group.members)}  ({how})"]
    header += [f"#   {line}" for line in provenance(origins)]
    if group.locals:
        header.append(f"#   kernel-local (registers only): {', '.join(sorted(group.locals))}")
    src = header + [jit_decorator(body, size_args), f"def {name}({', '.join(params)}):"] + _indent(body)
    return TritonKernel(name, "\n".join(src) + "\n", kctx.params, origins, style, hint(xnumel), hint(rnumel),
                        ynumel=hint(ynumel), size_args=size_args, xnumel_expr=xnumel, rnumel_expr=rnumel,
                        ynumel_expr=ynumel, column=row and column_reads(group, buffers), row_tiles=by_rows,
                        index_bounds=bounds)


def _buffers_of(group) -> set[str]:
    return {w for m in group.members for w in m.writes} | {r for m in group.members for r, _ in m.reads}


def _index_width_head(size_args, wide: bool) -> list[str]:
    """The kernel's first lines: ``pid``, the program's number, 64-bit where an index can reach 2**31
    (then every index computed from it is 64-bit). A size-generic kernel leaves that to the launcher,
    which sets INDEX64 per call from the sizes (``TritonKernel.index_bounds``), and then also widens
    the size arguments; most sizes run the faster 32-bit index arithmetic."""
    if not size_args:
        return ["pid = tl.program_id(0).to(tl.int64)" if wide else "pid = tl.program_id(0)"]
    return (["pid = tl.program_id(0)", "if INDEX64:", "    pid = pid.to(tl.int64)"]
            + [f"    {s} = {s}.to(tl.int64)" for s in size_args])


def _tiled_head(sizes, y_dims: tuple, xnumel: int, ynumel: int, pid: str) -> list[str]:
    """The start of a tiled kernel: the program's tile (y tiles vary fastest across programs), the
    block indices and masks, and the loop variables (those of ``y_dims`` from ``yindex``, the others
    from ``xindex``, each row-major)."""
    rest = [d for d in range(len(sizes)) if d not in y_dims]
    lines = [f"xnumel = {_py(xnumel)}", f"ynumel = {_py(ynumel)}",
             "ytiles = (ynumel + YBLOCK - 1) // YBLOCK",
             "yoffset = (pid % ytiles) * YBLOCK", "xoffset = (pid // ytiles) * XBLOCK",
             "yindex = yoffset + tl.arange(0, YBLOCK)[:, None]", "ymask = yindex < ynumel",
             "xindex = xoffset + tl.arange(0, XBLOCK)[None, :]", "xmask = xindex < xnumel"]
    lines += index_var_defs([f"x{d}" for d in y_dims], [sizes[d] for d in y_dims], "yindex")
    return lines + index_var_defs([f"x{d}" for d in rest], [sizes[d] for d in rest], "xindex")


def _member_code(kctx, m, row, style, shared_cse, defined_prefixes, online_sum=None) -> list[str]:
    """Lines for one member (at the kernel's top level); ``online_sum``: the sum member that this max
    member computes in the same loop (``online.py``)."""
    k = kctx.k
    sizes = inner_sizes(m, k) if row else []
    n_inner = _py(prod(sizes))
    has_inner = row and (m.is_reduction or sizes)
    looped = style == "looped" and has_inner
    ctx = MemberContext(kctx, m, row, "looped" if looped else "persistent")
    ops = OnlineMaxSumOps(ctx, online_sum.name) if online_sum is not None else \
        TritonOps(ctx, cse=None if looped else shared_cse)
    run_body(m.node, ops)
    if not has_inner:
        return ops.lines + ops.post
    prefix = ctx.prefix
    defs = [f"rmask_{prefix} = rindex < {n_inner}"] + _inner_defs(prefix, sizes)
    if not looped:
        head = [] if prefix in defined_prefixes else defs
        defined_prefixes.add(prefix)
        return head + ops.lines + ops.pre + ops.post
    loop = [f"for roffset in range(0, {n_inner}, RBLOCK):"]
    loop += _indent(["rindex = roffset + rbase"] + defs + ops.lines)
    return ops.pre + loop + ops.post
