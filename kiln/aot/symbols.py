"""Symbolic sizes in ATen graphs: every SymInt argument of an op is an FX node.

A graph traced from a dynamic capture graph (``gm.meta["kiln_shape_env"]``) has placeholders whose
fakes have symbolic sizes (``s0``, ``s1``, ...). Ops take sizes computed from them (``view(x, [4*s0])``):
``SizeNodes`` turns each such SymInt into FX nodes that compute it at run time from the inputs:

    sym_size_int = torch.ops.aten.sym_size.int(x, 0)      # s0, read from the input
    mul = operator.mul(sym_size_int, 4)                     # 4*s0

so the graph runs as plain FX on real tensors of any allowed size, and a later stage reads the
expression back with ``kiln.fake.shapes.to_expr(node.meta["val"])``. A symbol is *bound* to the first
placeholder dim whose size is exactly that symbol; nodes are cached per expression.
"""
from __future__ import annotations

import dataclasses
import operator

from kiln.lazy import sympy
import torch
import torch.fx as fx

from kiln.fake.shapes import to_expr
from kiln.fake.symbolic import SYMBOLIC_SCALARS, is_symbolic
from kiln.fake.symbolic_meta import SymbolicShapeUnsupported

aten = torch.ops.aten

# the targets of size nodes (their values are Python ints at run time, SymInts while tracing)
SIZE_TARGETS = frozenset({aten.sym_size.int, operator.add, operator.sub, operator.mul, operator.floordiv,
                          operator.mod, operator.neg, torch.sym_max, torch.sym_min, torch.sym_float})


def shape_env_of(gm: fx.GraphModule):
    """The ShapeEnv of a dynamic capture graph whose symbols are not all specialized, else None."""
    env = getattr(gm, "meta", {}).get("kiln_shape_env")
    if env is None or is_fully_specialized(env):
        return None
    return env


def is_fully_specialized(env) -> bool:
    """Every symbol has a guard pinning it to its hint (``env.specialize_all()`` ran): compile statically."""
    if getattr(env, "unbacked", None):
        return False  # (unbacked sizes have no value to be pinned to)
    pinned = {g.fact for g in env.guards}
    return all(sympy.Eq(s, h) in pinned or env.static_value(sympy.Eq(s, h)) is True for s, h in env.hints.items())


def is_size_node(node) -> bool:
    """A node computing a size (a SymInt while tracing, an int at run time)."""
    return isinstance(node, fx.Node) and node.op == "call_function" and node.target in SIZE_TARGETS \
        and isinstance(node.meta.get("val"), SYMBOLIC_SCALARS)


def size_hint(n) -> int:
    """An int, or a SymInt's value at the sizes seen while compiling (no guard)."""
    if is_symbolic(n):
        return n.node.env.size_hint(to_expr(n))
    return int(n)


def has_symbols(x) -> bool:
    if isinstance(x, torch.Tensor):
        return any(is_symbolic(s) for s in x.shape) or any(is_symbolic(s) for s in x.stride())
    if isinstance(x, (list, tuple)):
        return any(has_symbols(v) for v in x)
    if isinstance(x, dict):
        return any(has_symbols(v) for v in x.values())
    return is_symbolic(x)


def size_symbols(v) -> set:
    """The size symbols in a value's metadata: a tensor's sizes, strides and offset, a SymInt, or
    lists and tuples of them."""
    if isinstance(v, torch.Tensor):
        return set().union(*(size_symbols(s) for s in (*v.shape, *v.stride(), v.storage_offset())))
    if isinstance(v, (list, tuple)):
        return set().union(*(size_symbols(x) for x in v)) if v else set()
    return set(to_expr(v).free_symbols) if is_symbolic(v) else set()


class SizeNodes:
    """Makes the FX nodes for SymInt arguments in ``graph``, binding symbols to placeholder dims."""

    def __init__(self, graph: fx.Graph, env, stamp=None) -> None:
        self.graph, self.env = graph, env
        self.stamp = stamp or (lambda node: node)
        self.bindings: dict[sympy.Symbol, tuple[fx.Node, int]] = {}
        self.scalars: dict[sympy.Symbol, fx.Node] = {}  # unbacked numbers: the node computing each (item)
        self.pending: list = []  # (tuple node, index, tensor) of multi-output ops with unbacked sizes
        self._cache: dict = {}

    def bind(self, placeholder: fx.Node, val) -> None:
        """Symbols that are whole sizes of ``val`` (the placeholder's fake) are read from it; an int input
        that is a symbol (``Options.dynamic_ints``) is that symbol's node itself."""
        if isinstance(val, torch.SymInt) and is_symbolic(val):
            expr = to_expr(val)
            if expr.is_Symbol and expr not in self.bindings and expr not in self.scalars:
                self.scalars[expr] = placeholder
            return
        if not isinstance(val, torch.Tensor):
            return
        for d, size in enumerate(val.shape):
            if is_symbolic(size):
                expr = to_expr(size)
                if expr.is_Symbol and expr not in self.bindings:
                    self.bindings[expr] = (placeholder, d)

    def bind_result(self, node: fx.Node, val) -> None:
        """Unbacked symbols made by the op of ``node`` (``nonzero``'s row count, ``item``'s value) are read
        from its result at run time: ``aten.sym_size.int(node, d)``, or the node itself for a number."""
        unbacked = getattr(self.env, "unbacked", None)
        if not unbacked:
            return
        if isinstance(val, torch.SymInt) and is_symbolic(val):
            expr = to_expr(val)
            if expr.is_Symbol and expr in unbacked and expr not in self.bindings and expr not in self.scalars:
                self.scalars[expr] = node
            return
        if isinstance(val, (list, tuple)):
            for i, v in enumerate(val):  # (the tuple's items are read through getitem nodes made later)
                if isinstance(v, torch.Tensor):
                    self.pending.append((node, i, v))
            return
        if isinstance(val, torch.Tensor):
            for d, size in enumerate(val.shape):
                expr = to_expr(size) if is_symbolic(size) else None
                if expr is not None and expr.is_Symbol and expr in unbacked and expr not in self.bindings:
                    self.bindings[expr] = (node, d)

    def map_args(self, tree):
        """``tree`` (op arguments) with each SymInt/SymFloat/SymBool replaced by a node or a constant."""
        if isinstance(tree, (list, tuple)):
            return type(tree)(self.map_args(x) for x in tree)
        if isinstance(tree, dict):
            return {k: self.map_args(v) for k, v in tree.items()}
        if isinstance(tree, torch.SymBool):
            return bool(tree)  # a guard where it depends on sizes
        if isinstance(tree, torch.SymFloat):
            if not is_symbolic(tree):
                return float(tree)
            return self._float_node(tree)
        if isinstance(tree, torch.SymInt):
            return self.node_for(tree)
        return tree

    def node_for(self, value):
        """The node computing SymInt ``value`` (an int where it is a constant)."""
        if not is_symbolic(value):
            return int(value)
        return self.expr_node(to_expr(value))

    def expr_node(self, expr):
        expr = sympy.sympify(expr)
        if expr.is_Integer:
            return int(expr)
        found = self._cache.get(expr)
        if found is not None:
            return found
        node = self._build(expr)
        self._cache[expr] = node
        return node

    def _pending_binding(self, expr):
        """An unbacked size of an item of a multi-output op (``unique``): read through a getitem node."""
        for node, i, val in self.pending:
            for d, size in enumerate(val.shape):
                if is_symbolic(size) and to_expr(size) == expr:
                    with self.graph.inserting_after(node):
                        item = self.stamp(self.graph.call_function(operator.getitem, (node, i)))
                    item.meta["val"] = val
                    self.bindings[expr] = (item, d)
                    return item, d
        return None

    def _call(self, target, args, expr) -> fx.Node:
        node = self.stamp(self.graph.call_function(target, tuple(args)))
        node.meta["val"] = self.env.symint(expr) if not isinstance(expr, torch.SymFloat) else expr
        return node

    def _build(self, expr) -> fx.Node:
        from kiln.loopir.index import FloorDiv, ModularIndexing
        if expr.is_Symbol:
            if expr in self.scalars:
                return self.scalars[expr]
            where = self.bindings.get(expr) or self._pending_binding(expr)
            if where is None:
                raise SymbolicShapeUnsupported("size", f"the size {expr} is not a size of any input of this graph")
            return self._call(aten.sym_size.int, where, expr)
        if isinstance(expr, sympy.Add):
            coeff, terms = expr.as_coeff_add()
            positive = [t for t in terms if not t.could_extract_minus_sign()]
            negative = [-t for t in terms if t.could_extract_minus_sign()]
            if not positive:
                return self._call(operator.neg, (self.expr_node(-expr),), expr)
            acc, acc_expr = self.expr_node(positive[0]), positive[0]
            for t in positive[1:]:
                acc_expr = acc_expr + t
                acc = self._call(operator.add, (acc, self.expr_node(t)), acc_expr)
            for t in negative:
                acc_expr = acc_expr - t
                acc = self._call(operator.sub, (acc, self.expr_node(t)), acc_expr)
            if coeff != 0:
                target = operator.add if coeff > 0 else operator.sub
                acc = self._call(target, (acc, abs(int(coeff))), expr)
            return acc
        if isinstance(expr, sympy.Mul):
            coeff, factors = expr.as_coeff_mul()
            if not coeff.is_Integer:
                raise SymbolicShapeUnsupported("size", f"no integer form for the size {expr}")
            acc, acc_expr = self.expr_node(factors[0]), factors[0]
            for f in factors[1:]:
                acc_expr = acc_expr * f
                acc = self._call(operator.mul, (acc, self.expr_node(f)), acc_expr)
            if coeff != 1:
                acc = self._call(operator.mul, (acc, int(coeff)), expr)
            return acc
        if isinstance(expr, sympy.Pow) and expr.exp.is_Integer and int(expr.exp) > 0:
            base = self.expr_node(expr.base)
            acc, acc_expr = base, expr.base
            for _ in range(int(expr.exp) - 1):
                acc_expr = acc_expr * expr.base
                acc = self._call(operator.mul, (acc, base), acc_expr)
            return acc
        if isinstance(expr, FloorDiv):
            return self._call(operator.floordiv, (self.expr_node(expr.args[0]), self.expr_node(expr.args[1])), expr)
        if isinstance(expr, ModularIndexing):
            base, div, mod = expr.args
            inner = self.expr_node(FloorDiv(base, div)) if div != 1 else self.expr_node(base)
            return self._call(operator.mod, (inner, self.expr_node(mod)), expr)
        if isinstance(expr, (sympy.Max, sympy.Min)):
            target = torch.sym_max if isinstance(expr, sympy.Max) else torch.sym_min
            args = list(expr.args)
            acc, acc_expr = self.expr_node(args[0]), args[0]
            for a in args[1:]:
                acc_expr = type(expr)(acc_expr, a)
                acc = self._call(target, (acc, self.expr_node(a)), acc_expr)
            return acc
        raise SymbolicShapeUnsupported("size", f"no FX form for the size expression {expr} ({type(expr).__name__})")

    def _float_node(self, value: torch.SymFloat):
        expr = value.node.expr
        if not expr.is_integer:
            raise SymbolicShapeUnsupported("size", f"a float argument computed from sizes: {expr}")
        inner = self.expr_node(expr)
        node = self.stamp(self.graph.call_function(torch.sym_float, (inner,)))
        node.meta["val"] = value
        return node


# ---- sizes in view steps replayed on real tensors by the runtime (outputs that view inputs) ----------

@dataclasses.dataclass(frozen=True)
class SizeArg:
    """A symbolic size argument of a view step, computed from the call's input sizes."""

    expr: sympy.Expr

    def value(self, sizes: dict) -> int:
        return int(self.expr.xreplace({s: sympy.Integer(sizes[s]) for s in self.expr.free_symbols}))

    def __repr__(self) -> str:
        return str(self.expr)


def freeze_sizes(tree):
    """``tree`` with each symbolic SymInt as a ``SizeArg`` (a constant SymInt as an int)."""
    if isinstance(tree, (list, tuple)):
        return type(tree)(freeze_sizes(x) for x in tree)
    if isinstance(tree, torch.SymInt):
        if is_symbolic(tree) and tree.node.env.is_unbacked(tree.node.expr):  # (not computable from input sizes)
            raise SymbolicShapeUnsupported("output view", f"a view argument with a data-dependent size: {tree}")
        return SizeArg(to_expr(tree)) if is_symbolic(tree) else int(tree)
    if isinstance(tree, (torch.SymFloat, torch.SymBool)):
        raise SymbolicShapeUnsupported("output view", f"a view argument computed from sizes: {tree}")
    return tree


def resolve_sizes(tree, sizes: dict):
    if isinstance(tree, (list, tuple)):
        return type(tree)(resolve_sizes(x, sizes) for x in tree)
    return tree.value(sizes) if isinstance(tree, SizeArg) else tree


def has_size_args(tree) -> bool:
    if isinstance(tree, (list, tuple)):
        return any(has_size_args(x) for x in tree)
    return isinstance(tree, SizeArg)


@dataclasses.dataclass(frozen=True)
class SizeReader:
    """Reads the symbols' values from a call's flat inputs: symbol -> (input index, dim)."""

    where: tuple  # ((symbol, input index, dim), ...); dim None: the input is the int itself

    def read(self, flat) -> dict:
        return {s: flat[i] if d is None else flat[i].size(d) for s, i, d in self.where}


def size_reader(sizes: SizeNodes | None, placeholders: list) -> SizeReader:
    if sizes is None:
        return SizeReader(())
    index = {node: i for i, node in enumerate(placeholders)}
    where = [(s, index[node], d) for s, (node, d) in sizes.bindings.items() if node in index]
    where += [(s, index[node], None) for s, node in sizes.scalars.items() if node in index]  # int inputs
    return SizeReader(tuple(where))
