"""Split a captured FX graph at DistributedDataParallel's gradient bucket boundaries.

DDP all-reduces gradients bucket by bucket as they become ready in the backward. A graph compiled
as one autograd Function produces every gradient at the end of its backward, so every all-reduce
waits for the whole backward. Split into pieces, one per bucket, each compiled as its own Function,
the backward of the last piece finishes first, its parameters' gradients are ready, and DDP starts
their all-reduce while the backward of the earlier pieces runs (TorchDynamo's DDPOptimizer does the
same).

Buckets: parameters are bucketed in reverse order of their first use (the order their gradients become
ready in the backward), walking the graph from its end and closing a bucket once it holds
``bucket_bytes_cap`` bytes (the first bucket, the last parameters, ``first_bucket_bytes_cap``). Each
bucket's nodes are a contiguous range of the graph, so a piece is a contiguous range too.

A cut is only made where it cannot change a result (``cut_problem`` says why not):
- no autocast block is open and grad mode is what it was at the graph's start (a piece runs as its
  own graph under the caller's modes);
- every value crossing the cut is a tensor computed by the graph (not a view of an input or of
  module state: a backend may hand such an output back as a copy);
- no op after the cut may write in place to the storage of a value crossing it (each piece's
  outputs are separate tensors; an in-place write would no longer reach the other aliases).
A planned cut that is not allowed moves to the nearest earlier position that is, or is dropped.
"""
from __future__ import annotations

import dataclasses
import inspect
import operator
import re
from typing import Callable, Iterable

import torch
import torch.fx as fx

from kiln.distributed.ddp_recompute import recompute_chain, recomputable_nodes

_INPLACE_OPERATORS = frozenset({
    operator.iadd, operator.isub, operator.imul, operator.itruediv, operator.ifloordiv, operator.imod,
    operator.ipow, operator.iand, operator.ior, operator.ixor, operator.ilshift, operator.irshift,
    operator.imatmul, operator.setitem,
})
_GRAD_MODE_SETTERS = (torch._C._set_grad_enabled,)


@dataclasses.dataclass
class Bucket:
    """A planned piece: nodes[start:end] of the graph's body, the parameters it reads first (as seen
    from the end), their bytes."""

    start: int
    end: int
    params: list[str]
    nbytes: int


@dataclasses.dataclass
class Piece:
    """One piece of a split graph: its graph module, which original nodes it takes and gives."""

    gm: fx.GraphModule
    inputs: list[fx.Node]  # original nodes (placeholders or earlier pieces' values) it takes, in order
    outputs: list[fx.Node]  # original nodes it computes that later pieces or the graph output need
    params: list[str]
    nbytes: int


def body_nodes(gm: fx.GraphModule) -> list[fx.Node]:
    return [n for n in gm.graph.nodes if n.op not in ("placeholder", "output")]


def read_attr(gm: fx.GraphModule, target: str):
    obj = gm
    for part in target.split("."):
        obj = getattr(obj, part)
    return obj


def plan_buckets(gm: fx.GraphModule, bucket_cap: int, first_cap: int,
                 is_reduced: Callable[[torch.Tensor], bool]) -> list[Bucket]:
    """Buckets of parameters in reverse order of use; returned in graph order (first piece first)."""
    nodes = body_nodes(gm)
    first_use = _first_uses(gm, nodes, is_reduced)
    buckets = [Bucket(len(nodes), len(nodes), [], 0)]  # buckets[0]: the one being filled
    for index in range(len(nodes) - 1, -1, -1):
        node = nodes[index]
        cap = first_cap if len(buckets) == 1 else bucket_cap
        if buckets[0].params and buckets[0].nbytes >= max(cap, 1):
            buckets.insert(0, Bucket(index + 1, index + 1, [], 0))
        buckets[0].start = index
        value = first_use.get(index)
        if value is not None:
            buckets[0].params.append(node.target)
            buckets[0].nbytes += value.numel() * value.element_size()
    if len(buckets) > 1 and not buckets[0].params:  # nodes before the first parameter: a prelude
        prelude = buckets.pop(0)
        buckets[0].start = prelude.start
    return buckets


def _first_uses(gm, nodes, is_reduced) -> dict[int, torch.Tensor]:
    """For each parameter DDP reduces: the index of its first read that an op uses -> the parameter.
    Its gradient is complete only once the backward of that first use has run (a tied weight used
    again at the end is ready last), and a read that is only returned produces no gradient."""
    found: dict[int, torch.Tensor] = {}
    seen: set[int] = set()
    for index, node in enumerate(nodes):
        if node.op != "get_attr" or all(user.op == "output" for user in node.users):
            continue
        value = read_attr(gm, node.target)
        if isinstance(value, torch.Tensor) and value.requires_grad and is_reduced(value) and id(value) not in seen:
            seen.add(id(value))
            found[index] = value
    return found


def _example(node) -> object:
    return node.meta.get("example_value") if isinstance(node, fx.Node) else None


def _storage(value) -> int | None:
    if not isinstance(value, torch.Tensor):
        return None
    try:
        return value.untyped_storage()._cdata
    except Exception:  # noqa: BLE001 - no storage to compare: treated as unknown
        return None


def may_write_in_place(node: fx.Node) -> bool:
    """Whether ``node`` may write into one of its tensor arguments (by name: ``add_``, ``x += y``,
    ``x[i] = y``, ``inplace=True``, ``out=``)."""
    if node.op == "call_method":
        name = str(node.target)
        return (name.endswith("_") and not name.startswith("__")) or name in ("__setitem__",) or \
            (name.startswith("__i") and name.endswith("__") and name not in ("__index__", "__int__", "__invert__"))
    if node.op == "call_function":
        if node.target in _INPLACE_OPERATORS:
            return True
        name = getattr(node.target, "__name__", "")
        if name.endswith("_") and not name.startswith("__"):
            return True
        return bool(_bound_argument(node, "inplace")) or node.kwargs.get("out") is not None
    return node.op == "call_module"  # a submodule call: unknown


def _bound_argument(node: fx.Node, name: str):
    """The value of parameter ``name`` in the call (``F.relu(x, True)`` binds inplace positionally);
    True where the call cannot be bound (unknown: assume the worst)."""
    if name in node.kwargs:
        return node.kwargs[name]
    try:
        signature = inspect.signature(node.target)
    except (TypeError, ValueError):
        return None  # a builtin without a signature: no ``inplace`` parameter to bind
    if name not in signature.parameters:
        return None
    try:
        bound = signature.bind(*node.args, **node.kwargs)
    except TypeError:
        return True
    return bound.arguments.get(name)


def _tensor_args(node: fx.Node) -> Iterable[fx.Node]:
    found: list[fx.Node] = []
    fx.map_arg((node.args, node.kwargs), lambda n: found.append(n))
    return found


class CutChecker:
    """Answers, for each position p of the body (a cut before nodes[p]), why no cut may go there."""

    def __init__(self, gm: fx.GraphModule, grad_enabled: bool):
        self.nodes = body_nodes(gm)
        self.position = {n: i for i, n in enumerate(self.nodes)}
        self.inputs = {n for n in gm.graph.nodes if n.op == "placeholder"}
        input_values = [_example(n) for n in gm.graph.nodes if n.op in ("placeholder", "get_attr")]
        self.input_storages = {s for s in map(_storage, input_values) if s is not None}
        self.mode_problem = self._mode_problems(grad_enabled)
        # per node: the last position using it (the graph output counts as after the end)
        self.last_use: dict[fx.Node, int] = {}
        for node in gm.graph.nodes:
            for arg in _tensor_args(node):
                where = self.position.get(node, len(self.nodes))
                self.last_use[arg] = max(self.last_use.get(arg, -1), where)
        # positions of ops that may write in place, with the storages of their tensor arguments
        self.writes = [(i, {_storage(_example(a)) for a in _tensor_args(n)})
                       for i, n in enumerate(self.nodes) if may_write_in_place(n)]
        # views and casts of inputs and module state a later piece computes again (ddp_recompute.py)
        self.recomputable = recomputable_nodes(self.nodes, _example, _storage, _tensor_args, self.writes,
                                               self.mode_problem)

    def _mode_problems(self, grad_enabled: bool) -> list[str | None]:
        problems: list[str | None] = []
        depth, grad = 0, grad_enabled
        for node in self.nodes:
            problems.append("inside an autocast block" if depth else
                            "inside a block that switches grad mode" if grad != grad_enabled else None)
            name = getattr(node.target, "__name__", "")
            if node.op == "call_function" and name == "_enter_autocast":
                depth += 1
            elif node.op == "call_function" and name == "_exit_autocast":
                depth -= 1
            elif node.op == "call_function" and node.target in _GRAD_MODE_SETTERS:
                grad = bool(node.args[0]) if node.args else grad
        return problems

    def crossing(self, p: int) -> list[fx.Node]:
        """Values computed before position p (not get_attr, not computed again) used at p or later."""
        return [n for n in self.nodes[:p]
                if n.op != "get_attr" and n not in self.recomputable and self.last_use.get(n, -1) >= p]

    def cut_problem(self, p: int) -> str | None:
        if p <= 0 or p >= len(self.nodes):
            return "at the graph's edge"
        if self.mode_problem[p]:
            return self.mode_problem[p]
        storages = set()
        for node in self.crossing(p):
            value = _example(node)
            if not isinstance(value, torch.Tensor):
                return f"{node.name} crosses the cut and is not a tensor"
            key = _storage(value)
            if key is None or key in self.input_storages:
                return f"{node.name} crosses the cut and views an input or module state"
            storages.add(key)
        for where, written in self.writes:
            if where >= p and (written & storages or None in written):
                return f"{self.nodes[where].name} may write in place to a value crossing the cut"
        return None


def place_cuts(buckets: list[Bucket], checker: CutChecker) -> tuple[list[int], list[str]]:
    """Cut positions (sorted) for the planned bucket starts, each moved earlier to the nearest allowed
    position after the previous cut, or dropped; and notes on moved or dropped cuts."""
    cuts: list[int] = []
    notes: list[str] = []
    for bucket in buckets[1:]:
        planned = bucket.start
        low = cuts[-1] + 1 if cuts else 1
        for p in range(planned, low - 1, -1):
            problem = checker.cut_problem(p)
            if problem is None:
                cuts.append(p)
                if p != planned:
                    notes.append(f"cut before node {planned} moved to {p}: {checker.cut_problem(planned)}")
                break
        else:
            notes.append(f"cut before node {planned} dropped: {checker.cut_problem(planned)}")
    return cuts, notes


def split_graph(gm: fx.GraphModule, cuts: list[int], buckets: list[Bucket] | None = None,
                recompute: frozenset | set = frozenset()) -> list[Piece]:
    """The graph's body cut before each position in ``cuts``: one graph module per range, reading
    module state through its own get_attr nodes, taking the values it needs from earlier ranges and
    the graph's inputs, and returning what later ranges and the graph's output need. A node of
    ``recompute`` (``CutChecker.recomputable``) a later range uses is computed again there."""
    nodes = body_nodes(gm)
    bounds = [0, *cuts, len(nodes)]
    piece_of = {}
    for k in range(len(bounds) - 1):
        for node in nodes[bounds[k]:bounds[k + 1]]:
            piece_of[node] = k
    output = next(n for n in gm.graph.nodes if n.op == "output")
    needed_later: dict[fx.Node, int] = {}  # node -> last piece that needs it (len(pieces): the output)
    for node in nodes + [output]:
        user_piece = piece_of.get(node, len(bounds) - 1)
        for arg in _tensor_args(node):
            if arg.op != "get_attr" and not (arg in recompute and node.op != "output"):
                needed_later[arg] = max(needed_later.get(arg, -1), user_piece)
    pieces = []
    for k in range(len(bounds) - 1):
        body = nodes[bounds[k]:bounds[k + 1]]
        pieces.append(_build_piece(gm, body, k, needed_later, recompute))
        if buckets is not None:
            own = [b for b in buckets if bounds[k] <= b.start < bounds[k + 1]]
            pieces[-1].params = [p for b in own for p in b.params]
            pieces[-1].nbytes = sum(b.nbytes for b in own)
    return pieces


def _rename_without_indices(graph: fx.Graph) -> None:
    """Node names without the numbers that say which layer they came from (``blocks_3_qkv`` ->
    ``p_blocks_qkv``; repeats get fx's ``_1``, ``_2`` in graph order), so pieces of repeated blocks have the
    same code. Names only label values: a name that still differs costs a cache miss, never a result."""
    for node in graph.nodes:
        if node.op not in ("output", "placeholder"):  # (placeholders are made with such names)
            node._rename(_unindexed(node.name))


def _unindexed(name: str, graph: fx.Graph | None = None) -> str:
    """``p_`` + the name without its numbers; with ``graph``: made unique among its placeholders."""
    base = "p_" + (re.sub(r"_?\d+", "", name).strip("_") or "v")
    if graph is None:
        return base
    taken = {n.target for n in graph.nodes if n.op == "placeholder"}
    return next(c for c in (base if i == 0 else f"{base}_{i}" for i in range(len(taken) + 1)) if c not in taken)


def _build_piece(gm, body, k, needed_later, recompute=frozenset()) -> Piece:
    """Piece k: graph inputs and earlier pieces' values become placeholders (first); module state is read
    again, under names local to the piece (``state0``, ``state1``... in order of first read), so pieces
    of repeated blocks (a transformer's layers) have the same code and the backend's whole-graph cache
    serves the second one from the first (its key holds each state tensor's sizes, dtype and aliasing;
    the compiled piece reads this piece's own tensors by those names)."""
    graph = fx.Graph()
    env: dict[fx.Node, fx.Node] = {}
    members = set(body)
    external: list[fx.Node] = []
    redo: list[fx.Node] = []  # nodes of earlier ranges this piece computes again, sources first
    for node in body:
        for arg in _tensor_args(node):
            if arg in members or arg in external or arg in redo:
                continue
            if arg not in recompute:
                external.append(arg)
                continue
            for again in recompute_chain(arg, recompute, _tensor_args):
                if again not in members and again not in redo:
                    redo.append(again)
                    external.extend(a for a in _tensor_args(again) if a not in recompute and a not in external)
    inputs = [a for a in external if a.op != "get_attr"]
    for arg in inputs:
        env[arg] = graph.placeholder(_unindexed(arg.name, graph))
        env[arg].meta = dict(arg.meta)
    state: dict[str, object] = {}
    local: dict[str, str] = {}  # original target -> the piece's name for it
    for node in [a for a in external if a.op == "get_attr"] + [n for n in body if n.op == "get_attr"]:
        if node.target not in local:
            local[node.target] = f"state{len(local)}"
            state[local[node.target]] = read_attr(gm, node.target)
    for arg in external:
        if arg.op == "get_attr":
            env[arg] = graph.get_attr(local[arg.target])
            env[arg].meta = dict(arg.meta)
    for node in redo + body:
        env[node] = graph.node_copy(node, lambda a: env[a])
        if node.op == "get_attr":
            env[node].target = local[node.target]
    outputs = [n for n in body if needed_later.get(n, -1) > k]
    graph.output(tuple(env[n] for n in outputs))
    _rename_without_indices(graph)
    piece_gm = fx.GraphModule(state, graph)
    piece_gm.meta.update({key: v for key, v in gm.meta.items() if key != "kiln_backend_report"})
    return Piece(piece_gm, inputs, outputs, [], 0)
