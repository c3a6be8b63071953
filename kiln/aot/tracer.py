"""AtenTracer: records every ATen op of a computation on fake tensors into a functional FX graph.

The tracer is a ``TorchDispatchMode``. For each op it (1) applies a decomposition if the table has
one (the decomposition's own ops come back through the tracer), (2) lifts real tensors it meets:
parameters and buffers become graph inputs, other tensors become constants, (3) records the op,
turning views into view steps and mutations into functional ops (see ``functionalize.py``).
"""
from __future__ import annotations

import dataclasses
from typing import Mapping

import torch
import torch.fx as fx

from kiln.aot.builder import GraphBuilder
from kiln.aot.functional_twin import functional_twin
from kiln.aot.functionalize import Functionalizer, Storage, Value, ViewStep, same_layout
from kiln.aot.schema import (
    bind_arguments,
    functional_variant,
    has_composite_implicit,
    run_composite_implicit,
    is_inplace_view,
    is_view,
    mutated_arguments,
    unbind_arguments,
)
from kiln.aot.causal_mask import SDPA_FUNCTIONS, rewrite_causal_mask
from kiln.debug.stats import stats
from kiln.fake.mode import DispatchMode
from kiln.fake import FakeTensor, UnsupportedFakeOp, fake_from_real, meta_alias, run_on_fakes
from kiln.fake.symbolic_composite import ATEN_RULES, SymbolicCompositeMode
from kiln.fake.symbolic_meta import has_symbolic_tensor
from kiln.fake.unbacked import allow_unbacked
from kiln.fake.tensor import METADATA_OPS, metadata_query
from kiln.fake.tree import leaves, map_leaves

aten = torch.ops.aten
prim = torch.ops.prim

# CompositeImplicitAutograd ops that reach the tracer are decomposed by their own C++ body unless a
# decomposition in the table claims them first; these few are kept whole instead.
KEEP_COMPOSITE: frozenset = frozenset()


def _snapshot(x):
    """A fake with x's current metadata and storage, immune to later in-place metadata changes of x."""
    if isinstance(x, FakeTensor):
        return FakeTensor(meta_alias(x), x.fake_device)
    return x


class AtenTracer(DispatchMode):
    """Builds a functional ATen graph while fake tensors run through a computation."""

    def __init__(self, decompositions: Mapping | None = None) -> None:
        super().__init__()
        self.b = GraphBuilder()
        self.fn = Functionalizer(self.b)
        self.decompositions = dict(decompositions or {})
        self._in_decomposition = 0  # depth of decompositions running (for stats' stage times)
        self._values: dict[int, tuple[FakeTensor, Value]] = {}
        self._reals: dict[int, tuple[torch.Tensor, FakeTensor]] = {}  # lifted real tensor -> its fake
        self._state: dict[int, tuple[torch.Tensor, str, str]] = {}  # candidate state: (real, name, kind)
        self._storage_bases: dict = {}
        self._real_storages: dict[int, list[int]] = {}  # real storage key -> flat input indices
        self.inputs: list = []  # (kind, name, real-or-None) per flat graph input

    # inputs -----------------------------------------------------------------------------------
    def add_input(self, real, name: str, kind: str = "user", symbolic=None):
        """A graph input; returns the fake (or the Python value) the traced code should see.
        ``symbolic``: the input's fake with symbolic sizes (a dynamic graph), used instead of a fake
        of ``real``."""
        index = len(self.inputs)
        self.inputs.append((kind, name, real if kind != "user" else None))
        if not isinstance(real, torch.Tensor):
            if isinstance(symbolic, torch.SymInt):  # an int traced as a symbol: bound to this input
                self.b.placeholder(name, symbolic)
                return symbolic
            self.b.placeholder(name, real)
            return real
        if symbolic is not None:
            fake = FakeTensor(meta_alias(symbolic), real.device, requires_grad=real.requires_grad)
        else:
            fake = fake_from_real(real, self._storage_bases)
        if real.requires_grad and not real.is_leaf:
            fake = fake.clone()  # a non-leaf, so in-place ops on it are allowed as in eager
        node = self.b.placeholder(name, _snapshot(fake))
        self._bind(fake, Value(Storage(node, input_index=index), (), node, 0))
        self._reals[id(real)] = (real, fake)
        key = real.untyped_storage().data_ptr() or id(real.untyped_storage())
        self._real_storages.setdefault(key, []).append(index)
        return fake

    def offer_state(self, tensors: Mapping[str, tuple[torch.Tensor, str]]) -> None:
        """Tensors (parameters, buffers) that become graph inputs if the computation uses them."""
        for name, (real, kind) in tensors.items():
            self._state.setdefault(id(real), (real, name, kind))

    def aliased_inputs(self) -> list[list[int]]:
        return [group for group in self._real_storages.values() if len(group) > 1]

    # bookkeeping ------------------------------------------------------------------------------
    def _bind(self, fake: FakeTensor, value: Value) -> None:
        self._values[id(fake)] = (fake, value)

    def value(self, fake: FakeTensor) -> Value:
        found = self._values.get(id(fake))
        if found is None or found[0] is not fake:
            raise UnsupportedFakeOp("trace", f"a fake tensor that this trace did not make reached an op: {fake!r}")
        return found[1]

    def node_of(self, x):
        if isinstance(x, FakeTensor):
            return self.fn.current(self.value(x))
        return x

    def _nodes(self, tree):
        return map_leaves(self.node_of, tree)

    def _lift(self, x):
        if not isinstance(x, torch.Tensor) or isinstance(x, FakeTensor):
            return x
        known = self._reals.get(id(x))
        if known is not None and known[0] is x:
            return known[1]
        state = self._state.get(id(x))
        if state is not None and state[0] is x:
            return self.add_input(x, state[1], state[2])
        if x.is_meta:
            raise UnsupportedFakeOp("trace", "a meta tensor reached the trace; kiln traces real or fake tensors")
        # a constant: its value is baked into the graph
        fake = fake_from_real(x, self._storage_bases)
        node = self.b.constant(x.detach(), _snapshot(fake))
        self._bind(fake, Value(Storage(node), (), node, 0))
        self._reals[id(x)] = (x, fake)
        return fake

    def _bind_fresh(self, out, node: fx.Node) -> None:
        if isinstance(out, FakeTensor):
            self._bind(out, Value(Storage(node), (), node, 0))
        elif isinstance(out, (tuple, list)):
            for i, item in enumerate(out):
                if isinstance(item, FakeTensor):
                    item_node = self.b.getitem(node, i)
                    self._bind(item, Value(Storage(item_node), (), item_node, 0))

    # dispatch ---------------------------------------------------------------------------------
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        sizes = self.b.sizes  # (data-dependent ops make unbacked sizes in a graph traced with symbolic sizes)
        with allow_unbacked(sizes.env if sizes is not None else None):
            return self._dispatch(func, args, kwargs or {})

    def _dispatch(self, func, args, kwargs):
        if func is prim.device.default:
            return run_on_fakes(func, args, kwargs)
        if func in METADATA_OPS:  # (a size or stride query: no op in the graph)
            return metadata_query(func, args, kwargs)
        if func is aten.native_batch_norm.default and func not in self.decompositions:
            # its schema does not say that it writes the running stats; this twin's schema does
            func = aten._native_batch_norm_legit.default if args[3] is not None else None
            if func is None:
                return aten._native_batch_norm_legit.no_stats(*args[:3], *args[5:], **kwargs)
        decomposition = self.decompositions.get(func)
        if decomposition is not None:
            self._in_decomposition += 1
            try:
                with self, stats.timed("decompositions"):
                    out = decomposition(*args, **kwargs)
            finally:
                self._in_decomposition -= 1
            if out is not NotImplemented:
                return out
        if self._in_decomposition:  # an op a decomposition made: its tracing counts as tracing
            with stats.timed("aot"):
                return self._trace_op(func, args, kwargs)
        return self._trace_op(func, args, kwargs)

    def _trace_op(self, func, args, kwargs):
        if func in ATEN_RULES and has_symbolic_tensor(args):  # (its C++ body may not take symbolic sizes)
            with self:
                out = ATEN_RULES[func](*args, **kwargs)
            if out is not NotImplemented:  # (a rule that does not cover this call: the op as it is)
                return out
        if has_composite_implicit(func) and func not in KEEP_COMPOSITE:
            with self:
                out = run_composite_implicit(func, *args, **kwargs)
            if out is not NotImplemented:
                return out
        args, kwargs = map_leaves(self._lift, (args, kwargs))
        if is_inplace_view(func):
            return self._inplace_view(func, args, kwargs)
        if func._schema.is_mutable:
            return self._mutation(func, args, kwargs)
        if is_view(func) and isinstance(args[0], FakeTensor):
            return self._view(func, args, kwargs)
        return self._functional(func, args, kwargs)

    def _functional(self, func, args, kwargs):
        out = run_on_fakes(func, args, kwargs)
        if not any(isinstance(x, torch.Tensor) or _is_unbacked(x) for x in leaves(out)):
            return out  # metadata queries (``_fused_sdp_choice``) leave no trace
        node = self.b.call(func, self._nodes(args), self._nodes(kwargs), val=map_leaves(_snapshot, out))
        self._bind_fresh(out, node)
        return out

    def _view(self, func, args, kwargs):
        base, rest = args[0], args[1:]
        if any(isinstance(x, torch.Tensor) for x in leaves((rest, kwargs))):
            raise UnsupportedFakeOp(func, "kiln does not trace view ops that take extra tensors")
        base_value = self.value(base)
        if func is aten.as_strided.default:
            base_value.storage.check_storage_view()
        out = run_on_fakes(func, args, kwargs)
        base_node = self.node_of(base)
        base_val = base_node.meta.get("val")
        if isinstance(base_val, FakeTensor) and (base_val.storage_offset() != base.storage_offset()
                                                 or not same_layout(base_val, base)):
            # the graph's value of the base is not the user's tensor in memory (an input with an offset or a
            # slice of a larger tensor, written in the graph: its new value is compact from 0): the node's
            # meta follows the node's own base, or code indexing the base through the view reads it wrongly
            node = self.b.call(func, (base_node, *rest), kwargs)
        else:
            node = self.b.call(func, (base_node, *rest), kwargs, val=map_leaves(_snapshot, out))
        frozen_kwargs = tuple(sorted(kwargs.items()))
        storage = base_value.storage
        if isinstance(out, FakeTensor):
            step = ViewStep(func, tuple(rest), frozen_kwargs)
            self._bind(out, Value(storage, base_value.steps + (step,), node, storage.version))
        else:
            for i, item in enumerate(out):
                step = ViewStep(func, tuple(rest), frozen_kwargs, i)
                self._bind(item, Value(storage, base_value.steps + (step,), self.b.getitem(node, i), storage.version))
        return out

    def mark_data_view(self, fake) -> None:
        """``fake`` is the result of the user's ``t.data`` (traced as ``aten.detach``): rebuilt after the
        call as ``t.data``, with a version counter of its own (ViewStep.own_version)."""
        found = self._values.get(id(fake)) if isinstance(fake, FakeTensor) else None
        if found is None or found[0] is not fake or not found[1].steps:
            return
        value = found[1]
        if value.steps[-1].func is aten.detach.default:
            value.steps = value.steps[:-1] + (dataclasses.replace(value.steps[-1], own_version=True),)

    def _inplace_view(self, func, args, kwargs):
        view_op = _view_twin(func)
        target, rest = args[0], args[1:]
        if view_op is None or any(isinstance(x, torch.Tensor) for x in leaves((rest, kwargs))):
            raise UnsupportedFakeOp(func, "kiln cannot functionalize this in-place metadata change")
        value = self.value(target)
        before = self.node_of(target)
        run_on_fakes(func, args, kwargs)  # changes target's size/stride in place
        if value.storage.input_index is not None:
            value.storage.metadata_mutated = True
        step = ViewStep(view_op, tuple(rest), tuple(sorted(kwargs.items())))
        value.steps = value.steps + (step,)
        value.node = self.fn.replay(step, before)
        return target

    def _mutation(self, func, args, kwargs):
        bound = bind_arguments(func, args, kwargs)
        targets = []  # (argument name, position in a list argument or None, fake)
        for name in mutated_arguments(func):
            arg = bound.get(name)
            if isinstance(arg, FakeTensor):
                targets.append((name, None, arg))
            elif isinstance(arg, (list, tuple)):
                targets += [(name, i, t) for i, t in enumerate(arg) if isinstance(t, FakeTensor)]
        node_args = {k: self._nodes(v) for k, v in bound.items()}
        out = run_on_fakes(func, args, kwargs)
        variant = functional_variant(func)
        twin = functional_twin(func) if variant is None else None  # a user op's (functional_twin.py)
        if twin is not None or (variant is not None and all(i is None for _, i, _ in targets)):
            variant = variant or twin
            # the functional op goes through the tracer again, so decompositions apply to it
            fargs, fkwargs = unbind_arguments(variant.op, bound, drop=variant.drop)
            with self:
                fout = variant.op(*fargs, **fkwargs)
            results = (fout,) if len(variant.op._schema.returns) == 1 else fout
            for name, i, fake in targets:
                new = results[variant.new_values[name]]
                self._write(fake, self.node_of(new if i is None else new[i]))
            outs = out if isinstance(out, (tuple, list)) else (out,)
            for orig, fidx in variant.results.items():
                if isinstance(outs[orig], FakeTensor):
                    source = self.value(results[fidx])
                    self._bind(outs[orig], Value(source.storage, source.steps, source.node, source.version))
            return out
        # no functional form in ATen: mutate fresh copies inside the graph instead of the originals
        clones = {}
        for name, i, fake in targets:
            clones[(name, i)] = self.b.call(aten.clone.default, (self.node_of(fake),))
        for (name, i), clone in clones.items():
            if i is None:
                node_args[name] = clone
            else:
                node_args[name] = list(node_args[name])
                node_args[name][i] = clone
        margs, mkwargs = unbind_arguments(func, node_args)
        mnode = self.b.call(func, margs, mkwargs, val=map_leaves(_snapshot, out))
        mnode.meta["mutates_fresh_copies"] = True
        for name, i, fake in targets:
            self._write(fake, clones[(name, i)])
        written = {id(fake) for _, _, fake in targets}
        if isinstance(out, (tuple, list)):
            for k, item in enumerate(out):
                if isinstance(item, FakeTensor) and id(item) not in written:
                    self._bind(item, Value(Storage(self.b.getitem(mnode, k)), (), self.b.getitem(mnode, k), 0))
        elif isinstance(out, FakeTensor) and id(out) not in written:
            self._bind(out, Value(Storage(mnode), (), mnode, 0))
        return out

    def _write(self, fake: FakeTensor, new: fx.Node) -> None:
        new_val = new.meta["val"]
        if new_val.dtype != fake.dtype:
            new = self.b.call(aten._to_copy.default, (new,), {"dtype": fake.dtype})
            new_val = new.meta["val"]
        if tuple(new_val.shape) != tuple(fake.shape):
            if new_val.dim() <= fake.dim():
                new = self.b.call(aten.expand.default, (new, list(fake.shape)))
            else:
                raise UnsupportedFakeOp("write", f"new value of shape {tuple(new_val.shape)} for {fake!r}")
        self.fn.write(self.value(fake), new)


def _view_twin(func):
    """The view op that does out of place what the in-place metadata op ``func`` (``t_``) does."""
    packet = getattr(aten, func._schema.name.split("::")[1].rstrip("_"), None)
    if packet is None:
        return None
    wanted = [str(a.type) for a in func._schema.arguments[1:]]
    for name in [func._overloadname] + list(packet.overloads()):
        if name not in packet.overloads():
            continue
        candidate = getattr(packet, name)
        if is_view(candidate) and [str(a.type) for a in candidate._schema.arguments[1:]] == wanted:
            return candidate
    return None


def stack_trace(n: fx.Node) -> str | None:
    """The user's frames that made ``n`` (capture records them as ``meta["stack"]``), as traceback text."""
    if n.meta.get("stack_trace"):
        return n.meta["stack_trace"]
    stack = n.meta.get("stack")
    if not stack:
        return None
    return "\n".join(f'  File "{file}", line {line}, in {fn}' for file, line, fn in stack)


def user_op_name(n: fx.Node) -> str | None:
    """The name of the call the user wrote that made ``n`` (``masked_scatter``, ``gather``, ``getitem``):
    errors from the ATen ops it decomposes into name it."""
    if n.op == "call_method":
        return str(n.target)
    if n.op == "call_function":
        return getattr(n.target, "__name__", None) or str(n.target)
    if n.op == "call_module":
        return str(n.target)
    return None


def interpret(gm: fx.GraphModule, tracer: AtenTracer, args: list) -> object:
    """Run the torch-level graph ``gm`` on ``args`` with ``tracer`` recording, node by node."""

    class _Interpreter(fx.Interpreter):
        def call_function(self, target, args, kwargs):
            if target in SDPA_FUNCTIONS:  # (a mask proven causal: is_causal=True, which the fused kernels take)
                args, kwargs = rewrite_causal_mask(target, args, kwargs, tracer.node_of, tracer.b.root)
            return super().call_function(target, args, kwargs)

        def run_node(self, n):
            tracer.b.provenance = {"from_node": n.name, "stack_trace": stack_trace(n), "from_op": user_op_name(n)}
            out = super().run_node(n)
            if n.op == "call_function" and n.target is getattr and n.args[1:] == ("data",):
                tracer.mark_data_view(out)
            return out

    held = [real for real, _, _ in tracer._state.values() if not real.is_inference()]  # (no version counter)
    versions = [real._version for real in held]
    with tracer, SymbolicCompositeMode():
        try:
            return _Interpreter(gm, garbage_collect_values=True).run(*args)
        except RuntimeError as exc:
            if "data is not allocated" in str(exc):  # a C++ kernel read the data of a fake tensor
                raise UnsupportedFakeOp("trace", f"an op read tensor data while tracing: {exc}") from None
            raise
        finally:
            # an in-place op on a parameter or buffer reaches the tracer as the real tensor, after autograd's
            # ADInplaceOrView layer bumped its version counter; the tracer writes nothing into it, so the
            # counter goes back (else the first call counted one write more than eager)
            if held:
                torch._C._autograd._unsafe_set_version_counter(tuple(held), tuple(versions))


def _is_unbacked(x) -> bool:
    """A number the op computed from data (``item``): an unbacked SymInt, kept as a node of the graph."""
    return isinstance(x, torch.SymInt) and hasattr(x.node, "env") and x.node.env.is_unbacked(x.node.expr)
