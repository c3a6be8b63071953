"""GraphLowering: a core-op ATen FX graph -> loop-IR buffers, extern kernels and graph outputs.

It walks the graph once, in order. Each node's lowering returns a ``TensorValue``; pointwise results
stay ``Lazy`` (inlined into their readers) unless they are outputs, are read by an extern kernel,
feed several readers and are costly to recompute, or have grown too large to inline.
"""
from __future__ import annotations

import dataclasses
import operator
from typing import Any

import sympy
import torch
import torch.fx as fx
from torch.utils._pytree import tree_flatten, tree_map

from kiln.loopir.handlers import ReadsWrites
from kiln.loopir.sizes import hint, shape_of, size, strides_of
from kiln.loopir.nodes import (
    Buffer, ComputedBuffer, ConstantBuffer, ExternKernel, ExternOutput, InputBuffer, Lazy, Pointwise, Reduction,
    Stored, TensorValue, contiguous_strides, is_dense,
)
from kiln.lower.user_ops import lower_user_op, user_op_reason
from kiln.lower.bias_fold import fold_bias_into_matmul
from kiln.lower.gemm_padding import REALIZE, pad_misaligned_matmuls
from kiln.lower.registry import Unlowerable, lowerings

# a Lazy whose body inlines more ops than this is realized even with one reader
MAX_INLINE_COST = 64
# a Lazy read by several nodes is realized when it costs more than this to recompute
MULTI_USE_COST = 8
# ... unless recomputing it reads little memory and does only cheap math (``cheap_to_recompute``): each
# of its loads touches at most 1/RECOMPUTE_READ_RATIO as many distinct elements as the value has
RECOMPUTE_READ_RATIO = 16
CHEAP_OPS = frozenset(
    "neg abs sign relu add sub mul truediv floordiv truncdiv mod maximum minimum bitwise_and bitwise_or "
    "bitwise_xor bitwise_not lshift rshift eq ne lt le gt ge logical_and logical_or logical_xor logical_not "
    "isnan isinf isfinite".split())


@dataclasses.dataclass
class LoweredGraph:
    """The result of lowering: what the scheduler and the wrapper generator consume."""

    inputs: list[InputBuffer]
    nodes: list  # ComputedBuffer | ExternKernel, in program order
    outputs: list[Any]  # per graph output: Stored, or a Python value
    fallbacks: dict  # op name -> reason (ops run through ATen)
    constants: list = dataclasses.field(default_factory=list)  # ConstantBuffers (get_attr tensors)
    # the wrapper's parameters in placeholder order: tensor inputs' buffer names and int inputs' names
    # (Options.dynamic_ints); int_inputs: name -> its size (a symbol, or an int in a static compile)
    arg_names: list = dataclasses.field(default_factory=list)
    int_inputs: dict = dataclasses.field(default_factory=dict)

    def buffers(self) -> dict[str, Buffer]:
        return buffers_by_name(self.inputs, self.constants, self.nodes)

    def format(self) -> str:
        from kiln.loopir.handlers import format_buffer

        dtypes = {name: b.dtype for name, b in self.buffers().items()}
        lines = [f"inputs: {', '.join(b.describe() for b in self.inputs)}"]
        for n in self.nodes:
            if isinstance(n, ExternKernel):
                outs = ", ".join(o.describe() for o in n.outputs)
                lines.append(f"extern {n.name}: {n.op}  ->  {outs}   ({n.reason})")
            else:
                lines.append(format_buffer(n, dtypes))
        lines.append("outputs: " + ", ".join(_describe_out(o) for o in self.outputs))
        return "\n".join(lines)


def buffers_by_name(inputs, constants, nodes) -> dict[str, Buffer]:
    """Every buffer of a lowered graph by name: inputs, constants, computed buffers, extern outputs."""
    out = {b.name: b for b in inputs}
    out.update({b.name: b for b in constants})
    for n in nodes:
        if isinstance(n, ExternKernel):
            out.update({o.name: o for o in n.outputs})
        else:
            out.setdefault(n.name, n)  # a scatter update (loopir/scatter.py) keeps its copy's name
    return out


def _describe_out(o) -> str:
    if isinstance(o, Stored):
        return o.buffer.name if o.is_whole_buffer() else f"view({o.buffer.name}, {list(o.size)}, {list(o.stride)}, {o.offset})"
    return repr(o)


def fake_val(node) -> Any:
    return node.meta.get("val") if isinstance(node, fx.Node) else node


class GraphLowering:
    def __init__(self, gm: fx.GraphModule, gemm_padding: str = "auto", codegen: str = "cpp"):
        self.gemm_padding = gemm_padding
        self.codegen = codegen  # the code generator's target ("cpp", "triton", ...): some lowerings are for one
        self.gm = gm
        self.new_input_values = _new_input_values(gm)
        self.nodes: list = []
        self.inputs: list[InputBuffer] = []
        self.env: dict[fx.Node, Any] = {}
        self.fallbacks: dict[str, str] = {}
        self.constants: list[ConstantBuffer] = []
        self.arg_names: list[str] = []
        self.int_inputs: dict[str, Any] = {}
        self._count = 0
        self.current: fx.Node | None = None
        # id(Lazy) -> (the Lazy, kept alive so its id is not reused; the node whose lowering returned it):
        # a value realized later (as an extern's input, say) takes the layout ATen gives that node
        self._producer: dict[int, tuple[Lazy, fx.Node]] = {}
        # (id(Lazy), strides) -> (the Lazy, kept alive; its buffer): a value read by two externs, or by an
        # extern and the graph's output, is computed once
        self._realized: dict[tuple[int, tuple], tuple[Lazy, Stored]] = {}
        # id(Lazy) -> (the Lazy; a function returning it as a view of a smaller realized value, or None):
        # a broadcast (expand) is realized as its base with stride-0 dims, as ATen's view is
        self._as_view: dict[int, tuple[Lazy, Any]] = {}
        self._dtypes = _BufferDtypes(self)  # buffer name -> dtype (cheap_to_recompute's bytes)

    # ---------------------------------------------------------------------------------- naming

    def new_name(self, prefix: str = "buf") -> str:
        name = f"{prefix}{self._count}"
        self._count += 1
        return name

    # ------------------------------------------------------------------------------- realizing

    def realize(self, value: TensorValue, stride=None) -> Stored:
        """Make ``value`` a view of a buffer, computing it into a new buffer if it is ``Lazy``.

        The buffer gets ``stride`` (default: the layout ATen gives the node that made the value, when
        dense). A dense layout that is not row-major (channels-last, a transpose) is computed in memory
        order: the buffer is the row-major tensor of the permuted size, its loops run over that, and the
        returned view permutes back, so consecutive iterations write consecutive addresses."""
        if isinstance(value, Stored):
            return value
        assert isinstance(value, Lazy), value
        if stride is None and id(value) in self._as_view:
            view = self._as_view[id(value)][1]()
            if view is not None:
                self._as_view[id(value)] = (value, lambda: view)  # realized once
                return view
        size = tuple(value.size)
        if stride is None:
            val = fake_val(self._producer.get(id(value), (value, self.current))[1])
            stride = _layout_for(size, val)
        stride = tuple(stride)
        done = self._realized.get((id(value), stride))
        if done is not None:
            return done[1]
        order = memory_order(size, stride)
        loops, loop_stride, body, view = size, stride, value.body, None
        if order is not None:
            loops = tuple(size[d] for d in order)
            loop_stride, body, view = contiguous_strides(loops), _unpermuted(value.body, order), (size, stride)
        buf = ComputedBuffer(self.new_name(), value.dtype, value.device, loops, loop_stride, value.origins,
                             data=Pointwise(loops, body, value.dtype), view=view)
        self.nodes.append(buf)
        stored = Stored(buf, size, stride, 0)
        self._realized[(id(value), stride)] = (value, stored)
        return stored

    def realize_as_view(self, value: Lazy, make) -> None:
        """When ``value`` is realized with its default layout, ``make()`` gives it instead (a view of a
        smaller buffer), unless it returns None."""
        self._as_view[id(value)] = (value, make)

    def add_reduction(self, size, rsize, body, kind, src_dtype, dtype, device, inlined=()) -> Stored:
        """``inlined``: the FX nodes of the producers ``body`` inlines (``Lazy.origins``)."""
        size = tuple(size)
        stride = contiguous_strides(size)
        buf = ComputedBuffer(
            self.new_name(), dtype, device, size, stride, (self.current,),
            data=Reduction(size, tuple(rsize), body, kind, src_dtype, dtype),
            inlined=tuple(o for o in inlined if o is not self.current),
        )
        self.nodes.append(buf)
        return Stored(buf, size, stride, 0)

    def add_extern(self, op, args, kwargs, reason: str, node: fx.Node):
        """Run ``op`` through ATen on realized inputs; returns the node's value built of ``Stored``s."""
        args, kwargs = tree_map(lambda v: self.realize(v) if isinstance(v, TensorValue) else v, (args, kwargs))
        kernel = ExternKernel(self.new_name("extern"), op, args, kwargs, [], reason, (node,))
        val = fake_val(node)

        def make(path, v):
            if not isinstance(v, torch.Tensor):
                return v
            out = ExternOutput(self.new_name(), v.dtype, v.device, shape_of(v), strides_of(v), (node,),
                               kernel=kernel, path=path)
            kernel.outputs.append(out)
            return Stored(out, out.size, out.stride, 0)

        if isinstance(val, (tuple, list)):
            result = type(val)(make((i,), v) for i, v in enumerate(val))
        else:
            result = make((), val)
        self.nodes.append(kernel)
        return result

    # ------------------------------------------------------------------------------------ walk

    def run(self) -> LoweredGraph:
        table = lowerings()
        outputs = None
        read_after_random_fill(self.gm.graph)
        folded = fold_bias_into_matmul(self.gm.graph)
        if pad_misaligned_matmuls(self.gm.graph, self.gemm_padding) or folded:
            self.gm.recompile()
        for node in self.gm.graph.nodes:
            if node.op == "call_function" and mutates_an_argument(node.target) and not fills_fresh_tensor(node):
                # later readers of the mutated value are lazy reads of its old contents here
                raise Unlowerable(f"the graph mutates a value in place ({node.target})")
        for node in self.gm.graph.nodes:
            self.current = node
            if node.op == "placeholder":
                self.env[node] = self._input(node)
            elif node.op == "call_function":
                self.env[node] = self._call(node, table)
            elif node.op == "get_attr":
                self.env[node] = self._constant(node)
            elif node.op == "output":
                outputs = [self._output(v) for v in tree_flatten(node.args[0])[0]]
            else:
                raise Unlowerable(f"FX node kind {node.op!r}")
        return LoweredGraph(self.inputs, self.nodes, outputs, self.fallbacks, self.constants,
                            self.arg_names, self.int_inputs)

    def _input(self, node):
        val = fake_val(node)
        if isinstance(val, (int, torch.SymInt)) and not isinstance(val, bool):
            # an int argument (Options.dynamic_ints): its value is a size (a symbol the wrapper reads)
            name = f"arg_{node.name}"
            self.arg_names.append(name)
            self.int_inputs[name] = size(val)
            return self.int_inputs[name]
        if not isinstance(val, torch.Tensor):
            raise Unlowerable(f"graph input {node.name} is not a tensor ({type(val).__name__})")
        self.arg_names.append(node.name)
        buf = InputBuffer(node.name, val.dtype, val.device, shape_of(val), strides_of(val), (node,),
                          position=len(self.inputs))
        self.inputs.append(buf)
        return Stored(buf, buf.size, buf.stride, 0)

    def _constant(self, node):
        """A tensor constant: a 0-dim one becomes an inlined scalar, others a buffer the wrapper holds."""
        value = getattr(self.gm, node.target)
        if not isinstance(value, torch.Tensor):
            raise Unlowerable(f"constant {node.target} of type {type(value).__name__}")
        if value.dtype.is_complex:
            raise Unlowerable("complex constant")
        if value.dim() == 0:
            scalar, dtype = value.item(), value.dtype

            def body(ops, index):
                return ops.constant(scalar, dtype)

            return Lazy((), dtype, value.device, body, 1, (node,))
        buf = ConstantBuffer(self.new_name("const"), value.dtype, value.device, tuple(value.shape),
                             tuple(value.stride()), (node,), value=value)
        self.constants.append(buf)
        return Stored(buf, buf.size, buf.stride, 0)

    def _call(self, node, table):
        args, kwargs = tree_map(lambda a: self.env[a] if isinstance(a, fx.Node) else a, (node.args, node.kwargs))
        if node.target is operator.getitem:
            return args[0][args[1]]
        if is_size_node(node):  # sym_size / size arithmetic: the size expression (kiln.loopir.sizes)
            return size(fake_val(node))
        if fills_fresh_tensor(node):
            # x.bernoulli_(p) on a tensor nothing else reads: ATen's op fills a copy of its own, so the
            # random numbers come from ATen's generator in eager's order
            x = args[0]
            fresh = self.realize(Lazy(tuple(x.size), x.dtype, x.device, x.loader(), 1, (node,)))
            return self.add_extern(node.target, (fresh, *args[1:]), kwargs, "random op (ATen's generator)", node)
        fn = table.get(node.target)
        user_reason = user_op_reason(node) if fn is None else None  # custom ops, user Triton kernels
        if user_reason is not None:
            return lower_user_op(self, node, args, kwargs, user_reason)
        if fn is None:
            reason = "no lowering"
        else:
            try:
                out = fn(self, node, *args, **kwargs)
                if isinstance(out, Lazy):
                    self._producer.setdefault(id(out), (out, node))
                return self._maybe_realize(node, out)
            except Unlowerable as exc:
                reason = exc.reason
        self.fallbacks.setdefault(str(node.target), reason)
        return self.add_extern(node.target, args, kwargs, reason, node)

    def _maybe_realize(self, node, out):
        if isinstance(out, Lazy):
            if node.meta.get(REALIZE):
                return self.realize(out)
            readers = _separate_readers(node)
            too_big = out.cost > MAX_INLINE_COST and not _only_padded(node)
            shared = readers > 1 and out.cost > MULTI_USE_COST and not cheap_to_recompute(
                out, readers, self._dtypes, memory_bound=self.codegen == "triton")
            if too_big or shared:
                return self.realize(out)
            if readers > 1 and node in self.new_input_values:
                # a mutated input's new value, read again by later ops: they read it from the buffer it
                # is stored to (possibly the input itself, schedule/inplace.py), not recompute it from
                # the input's old contents
                return self.realize(out)
        return out

    def _output(self, v):
        value = self.env[v] if isinstance(v, fx.Node) else v
        if not isinstance(value, TensorValue):
            return value
        self.current = v
        val = fake_val(v)
        want = strides_of(val)
        if isinstance(value, Stored) and tuple(value.stride) == want:
            return value
        if isinstance(value, Stored):
            value = Lazy(value.size, value.dtype, value.device, value.loader(), 1, (v,))
        stride = want if is_dense(shape_of(val), want) else None
        return self.realize(value, stride)


def _new_input_values(gm: fx.GraphModule) -> set:
    """The nodes whose values the graph returns as the new contents of inputs it mutates (its first
    outputs, ``gm.meta["kiln_mutated_inputs"]``)."""
    n = len(gm.meta.get("kiln_mutated_inputs", ()))
    out = next((node for node in gm.graph.nodes if node.op == "output"), None) if n else None
    values = tree_flatten(out.args[0])[0][:n] if out is not None else []
    return {v for v in values if isinstance(v, fx.Node)}


def is_size_node(node) -> bool:
    """A node that computes a size (``aten.sym_size.int``, ``operator.mul`` of sizes, ...), not a tensor."""
    val = fake_val(node)
    return isinstance(val, (int, torch.SymInt)) and not isinstance(val, bool) and (
        node.target in _SIZE_OPS or not isinstance(node.target, torch._ops.OpOverload))


_SIZE_OPS = (torch.ops.aten.sym_size.int, torch.ops.aten.sym_stride.int, torch.ops.aten.sym_numel.default,
             torch.ops.aten.sym_storage_offset.default)


class _RecomputeCost(ReadsWrites):
    """Records a body's loads and whether it does any math outside ``CHEAP_OPS`` or loads through an
    index read from memory."""

    def __init__(self, dtypes):
        super().__init__(dtypes)
        self.costly = self.indirect = False

    def unary(self, op, x):
        self.costly |= op not in CHEAP_OPS
        return super().unary(op, x)

    def binary(self, op, a, b):
        self.costly |= op not in CHEAP_OPS
        return super().binary(op, a, b)

    def indirect_indexing(self, value, size, wrap_negative=True):
        self.indirect = True  # a gather: its reads are wherever the indices point
        return super().indirect_indexing(value, size, wrap_negative)


class _AnyDtype(dict):
    """Buffer dtypes when none are given: the loads' positions are what matters then."""

    def __missing__(self, name):
        return torch.float32


class _BufferDtypes(_AnyDtype):
    """A lowering's buffer dtypes by name, filled in again from its buffers (those made so far) when a
    name is not known yet."""

    def __init__(self, lowering: "GraphLowering"):
        super().__init__()
        self.lowering = lowering

    def __missing__(self, name):
        low = self.lowering
        self.update((n, b.dtype) for n, b in buffers_by_name(low.inputs, low.constants, low.nodes).items())
        return self[name] if name in self else super().__missing__(name)


def cheap_to_recompute(value: Lazy, readers: int = 2, dtypes=None, memory_bound: bool = False) -> bool:
    """Whether each of ``readers`` readers can compute ``value`` again instead of reading it from a
    buffer written once for them all.

    Always when its math is cheap (``CHEAP_OPS``: comparisons, selects, integer and sign arithmetic)
    and each load touches few distinct elements, because its index leaves out the value's large dims
    (a loss gradient built from one label per row, broadcast along a 50257-word vocabulary; a mask
    made from positions): writing it costs a full write and a full read per reader. With
    ``memory_bound`` (generated GPU kernels, where math is nearly free next to memory traffic), also
    when the bytes the readers load to recompute it are fewer than writing it once and reading it
    back in each reader (GPT-2's recomputed GELU: ``tanh(...) + 1`` as float32 from a bfloat16
    input). ``dtypes`` maps buffer names to dtypes (for the bytes)."""
    numel = 1
    for n in value.size:
        numel *= hint(n)
    if numel < 2 * RECOMPUTE_READ_RATIO:
        return False
    index = [sympy.Symbol(f"d{i}", integer=True, nonnegative=True) for i in range(len(value.size))]
    rw = _RecomputeCost(dtypes if dtypes is not None else _AnyDtype())
    value.body(rw, index)
    if rw.indirect:
        return False
    big_load_bytes = 0  # per element, of the loads that touch many distinct elements
    for name, expr in rw.reads:
        touched = 1
        for i, sym in enumerate(index):
            if sym in expr.free_symbols:
                touched *= hint(value.size[i])
        if touched * RECOMPUTE_READ_RATIO > numel:
            big_load_bytes += rw.dtypes[name].itemsize
    if not big_load_bytes and not rw.costly:
        return True
    written = value.dtype.itemsize
    return memory_bound and readers * big_load_bytes < (1 + readers) * written


_VIEWS = (torch.ops.aten.view.default, torch.ops.aten._unsafe_view.default, torch.ops.aten.reshape.default)


def _only_padded(node) -> bool:
    """Whether ``node``'s value is read only by a ``constant_pad_nd`` (through views): the padded
    buffer is then computed with the value inlined, whatever its cost, rather than the value written
    once and copied into the padded buffer (the padded gradient of a misaligned LM head, 412 MB per
    step for GPT-2)."""
    for _ in range(4):
        if len(node.users) != 1:
            return False
        (node,) = node.users
        if node.target is torch.ops.aten.constant_pad_nd.default:
            return True
        if node.target not in _VIEWS:
            return False
    return False


def _separate_readers(node) -> int:
    """How many of ``node``'s readers compute apart: a pointwise reader whose only reader is a
    pointwise op that also reads ``node`` (the ``x < 0`` of relu's ``where(x < 0, 0, x)``) is part of
    that reader's computation, which inlines ``node`` once for both at the same index (generated
    kernels share common subexpressions). A reduction or a view reads elsewhere: it counts."""
    users = node.users

    def folded(u) -> bool:
        if not (_pointwise(u) and len(u.users) == 1):
            return False
        (consumer,) = u.users
        return consumer in users and _pointwise(consumer)

    return sum(1 for u in users if not folded(u))


def _pointwise(node) -> bool:
    target = getattr(node, "target", None)
    return isinstance(target, torch._ops.OpOverload) and torch.Tag.pointwise in target.tags


def read_after_random_fill(graph: fx.Graph) -> None:
    """``t = clone(empty); bernoulli_(t); div(t, q)``: readers of ``t`` after an in-place random op read
    the op's result instead (the same tensor: an in-place op returns its argument), so the op is the
    value's last writer and can run on a copy of its own (``fills_fresh_tensor``)."""
    order = {n: i for i, n in enumerate(graph.nodes)}
    for node in graph.nodes:
        if node.op != "call_function" or not node.args or not isinstance(node.args[0], fx.Node):
            continue
        schema = getattr(node.target, "_schema", None)
        if schema is None or torch.Tag.nondeterministic_seeded not in node.target.tags:
            continue
        first = schema.arguments[0]
        if first.alias_info is None or not first.alias_info.is_write:
            continue
        target = node.args[0]
        others = [u for u in target.users if u is not node]
        if all(order[u] > order[node] for u in others):
            for u in others:
                u.replace_input_with(target, node)


def fills_fresh_tensor(node) -> bool:
    """An in-place random op (``bernoulli_``, ``normal_``, ...) on a value that only it reads (as in
    ``empty_like(x).bernoulli_(p)``, which dropout becomes): it can run on a copy of its own."""
    if node.op != "call_function" or not getattr(node.target, "_schema", None):
        return False
    if torch.Tag.nondeterministic_seeded not in node.target.tags or not mutates_an_argument(node.target):
        return False
    first = node.target._schema.arguments[0]
    if first.alias_info is None or not first.alias_info.is_write:
        return False
    target = node.args[0] if node.args else None
    return isinstance(target, fx.Node) and target.op == "call_function" and len(target.users) == 1


def mutates_an_argument(target) -> bool:
    """True for ATen ops that write into one of their arguments (``normal_``, ``out=`` variants)."""
    schema = getattr(target, "_schema", None)
    if schema is None:
        return False
    return any(a.alias_info is not None and a.alias_info.is_write for a in schema.arguments)


def _layout_for(size, val) -> tuple[int, ...]:
    """Strides for realizing a value: the ones ATen would give it when dense, else contiguous."""
    if isinstance(val, torch.Tensor) and shape_of(val) == tuple(size):
        stride = strides_of(val)
        if is_dense(size, stride):
            return stride
    return contiguous_strides(size)


def memory_order(size, stride) -> tuple[int, ...] | None:
    """The dims of a dense layout from the largest stride to the smallest (dims of size 1 where they
    are), or None when that is the dims' own order (row-major) or the layout is not dense."""
    if not is_dense(size, stride):
        return None
    # (symbolic strides of a dense layout keep their order for every size: sorted at the hints)
    big = sorted((d for d in range(len(size)) if size[d] != 1), key=lambda d: -hint(stride[d]))
    it = iter(big)
    order = tuple(d if size[d] == 1 else next(it) for d in range(len(size)))
    return None if order == tuple(range(len(size))) else order


def _unpermuted(body, order):
    """``body`` over the logical index, called with the index in ``order``'s loop order."""
    where = [order.index(d) for d in range(len(order))]

    def permuted_body(ops, index):
        return body(ops, [index[w] for w in where])

    return permuted_body


def lower_graph(gm: fx.GraphModule, gemm_padding: str = "auto", codegen: str = "cpp") -> LoweredGraph:
    return GraphLowering(gm, gemm_padding, codegen).run()
