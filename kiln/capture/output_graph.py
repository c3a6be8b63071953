"""The FX graph being built for one frame: its inputs (with sources), parameters, ops and outputs."""
from __future__ import annotations

import contextlib
import operator
import re
from typing import Any, Callable

import torch
import torch.fx as fx

from kiln.capture.guards import GuardKind, GuardSet
from kiln.capture.side_effects import SideEffects
from kiln.capture.sources import Source
from kiln.capture.storage_aliasing import HeldRanges, aliasing_signature, partial_overlap
from kiln.capture.values.base import ConstantValue, Value, unsupported
from kiln.fake import FakeTensor, FakeTensorMode, UnsupportedFakeOp
from kiln.fake.autograd_kind import autograd_kind
from kiln.fake.symbolic import SYMBOLIC_SCALARS, DataDependentSize, ShapeEnv, is_symbolic, symbolic_fake
from kiln.fake.symbolic_composite import SymbolicCompositeMode
from kiln.fake.unbacked import allow_unbacked
from kiln.fake.symbolic_meta import symbolic_getitem
from kiln.fake.tree import leaves, map_leaves
from kiln.capture.values.symbolic import SizeValue, SymbolicInt, has_symbolic, wrap_symbolic


def _clean_name(text: str) -> str:
    name = re.sub(r"[^0-9a-zA-Z_]+", "_", text).strip("_")
    return name if name and not name[0].isdigit() else f"v_{name}"


class OutputGraph:
    def __init__(self, code_name: str):
        self.graph = fx.Graph()
        self.root = torch.nn.Module()
        self.guards = GuardSet()
        self.side_effects = SideEffects()
        self.guards.class_stores = self.side_effects.class_stores  # (exempt from the class guard: class_guards.py)
        self.grad_enabled = torch.is_grad_enabled()  # the mode ops run under at this point of the graph
        self.changes_grad_mode = False
        self.autocast_stack: list[tuple] = []  # autocast blocks open at this point of the graph
        self.changes_autocast = False
        self.fake_mode = FakeTensorMode()
        self.dynamic = None  # the DynamicPolicy (capture/dynamic.py): which input dims are symbols
        self.shape_env: ShapeEnv | None = None  # made at the first input with symbolic sizes
        self._spare_env: ShapeEnv | None = None  # for unbacked sizes of a frame without dynamic inputs
        self._input_storages: set = set()
        self._dynamic_storages: set = set()
        self.input_sources: list[Source] = []
        self.example_inputs: list[Any] = []
        self.values_by_source: dict[str, Value] = {}
        self.values_by_id: dict[int, Value] = {}  # mutable objects, by identity (see builder.wrap)
        # closure cells that existed before the call, by identity: (the cell, its value); one value per
        # cell, however many functions' closures reach it (values/functions.py: existing_cell)
        self.cells_by_id: dict[int, tuple] = {}
        self._attr_names: dict[int, str] = {}
        self._placeholders: list[fx.Node] = []
        self._input_values: list = []
        self._tensor_inputs: list[tuple] = []  # (source, real, fake, its version when added, placeholder position)
        self._held: list[tuple] = []  # (tensor, fake, fake's version when added) of get_attr tensors
        self._data_views: list[tuple] = []  # (fake, its version when made) of each `t.data` read
        self.op_count = 0
        self.code_name = code_name
        self.user_tx = None  # the tracer running the current instruction (``user_stack`` is read from it)
        self.stepped_generators: list = []  # user generator objects made by this trace (values/lazy_generators.py)
        self.generator_floor: int | None = None  # while a pure call is traced (lru_cache): serial of its first value
        from kiln.capture.values.inference import InferenceState

        self.inference = InferenceState()  # inference-mode blocks and inference tensors (values/inference.py)
        self.retired: dict[int, str] = {}  # id(fake) -> why: tensors whose .data was assigned (tensor_data_store.py)
        self.assigns_held_data = False  # a parameter's or buffer's .data is assigned: live held ranges

    # ---- inputs ------------------------------------------------------------------------------

    def add_input(self, source: Source, real: torch.Tensor) -> Value:
        from kiln.capture.values.tensors import TensorValue

        if real.layout != torch.strided:  # (sparse, nested: no storage of the strided kind to trace)
            unsupported(f"{source.name()} is a tensor with layout {real.layout}: kiln compiles strided tensors only",
                        hint="the frame runs eagerly")
        for i, known in enumerate(self.example_inputs):
            if known is real:  # the same object under another name: one input, guarded to stay so
                self.guards.add(GuardKind.IDENTITY_OF_SOURCE, source, self.input_sources[i])
                return self._input_values[i]
        if id(real) in self._attr_names:  # a parameter or buffer the graph holds, reached here too: one tensor
            self.guards.identity(source, real)
            return self.add_attr(real, self._attr_names[id(real)])
        node = self._placeholder(source, real)
        fake = self._dynamic_fake(source, real)
        if fake is None:
            self.guards.tensor(source, real)
            fake = self.fake_mode.from_real(real)
            if self.shape_env is not None and _storage_key(real) in self._dynamic_storages:
                self.shape_env.failed = f"{source.name()} shares memory with an input traced with dynamic sizes"
        self.inference.note_input(real, fake)
        node.meta["example_value"] = fake
        self._tensor_inputs.append((source, real, fake, _version(fake), len(self.example_inputs) - 1))
        value = TensorValue(node, fake, source=source)
        self._input_values.append(value)
        return value

    def _placeholder(self, source: Source, example) -> fx.Node:
        """A new graph input after the others, for ``source`` (its example: a tensor or an int)."""
        name = _clean_name(source.name().replace("L[", "").replace("G[", "g_"))
        if self._placeholders:
            where = self.graph.inserting_after(self._placeholders[-1])
        else:
            where = self.graph.inserting_before(next(iter(self.graph.nodes), None))
        with where:
            node = self.graph.placeholder(self._unique(name))
        self._placeholders.append(node)
        self.input_sources.append(source)
        self.example_inputs.append(example)
        return node

    def add_int_input(self, source: Source, value: int, duck: bool = False) -> Value | None:
        """An int argument traced as a symbol (``Options.dynamic_ints``): a graph input whose example value
        is the SymInt, bound in the ShapeEnv so the guards read the symbol from it. None where the policy
        keeps it a constant."""
        if self.dynamic is None or not self.dynamic.int_is_dynamic(source.name(), value):
            return None
        if self.shape_env is None:
            self.shape_env = ShapeEnv()
            self.shape_env.where = self._user_line
            self.guards.shape_env = self.shape_env
        node = self._placeholder(source, value)
        symint = self.shape_env.int_symbol(value, source.name(), duck=duck)
        self.shape_env.bind_scalar(source.name(), symint.node.expr)
        self.guards.dynamic_int(source, value)
        node.meta["example_value"] = symint
        result = SymbolicInt(node, symint, self)
        self._input_values.append(result)
        return result

    def _dynamic_fake(self, source: Source, real: torch.Tensor):
        """A fake with symbolic sizes where the dynamic policy asks for some (None: static sizes)."""
        if self.dynamic is None:
            return None
        dims, marked = self.dynamic.dims_for(source.name(), real)
        if not dims or real.layout != torch.strided or _storage_key(real) in self._input_storages:
            self._input_storages.add(_storage_key(real))
            return None
        self._input_storages.add(_storage_key(real))
        if self.shape_env is None:
            self.shape_env = ShapeEnv()
            self.shape_env.where = self._user_line
            self.guards.shape_env = self.shape_env
        fake = symbolic_fake(real, self.shape_env, source.name(), dims, marked)
        if fake is not None:
            self.guards.dynamic_tensor(source, real)
            self._dynamic_storages.add(_storage_key(real))
        return fake

    @property
    def user_stack(self) -> list[tuple[str, int, str]]:
        """(file, line, function) of the op being added, outermost frame first (made when read: most
        instructions add no op)."""
        return [] if self.user_tx is None else self.user_tx.user_stack()

    def _user_line(self) -> str:
        if not self.user_stack:
            return ""
        file, line, fn = self.user_stack[-1]
        return f"{file}:{line} in {fn}"

    def add_attr(self, tensor: torch.Tensor, qualname: str) -> Value:
        """A parameter or buffer of a module: a get_attr node holding the live tensor."""
        from kiln.capture.values.tensors import TensorValue

        if tensor.layout != torch.strided:  # (sparse, nested: as for inputs)
            unsupported(f"{qualname} is a tensor with layout {tensor.layout}: kiln compiles strided tensors only",
                        hint="the code that reads it runs as Python")
        for i, known in enumerate(self.example_inputs):
            if known is tensor:  # a buffer read as a graph input (capture/dynamic.py): the same tensor
                return self._input_values[i]
        name = self._attr_names.get(id(tensor))
        if name is None:
            name = self._unique(_clean_name(qualname))
            self._attr_names[id(tensor)] = name
            if isinstance(tensor, torch.nn.Parameter):
                self.root.register_parameter(name, tensor)
            else:
                self.root.register_buffer(name, tensor)
            self.guards.held_tensor(qualname, tensor)
            fake = self.fake_mode.from_real(tensor)
            self._held.append((tensor, fake, _version(fake)))
        node = self.graph.get_attr(name)
        fake = self.fake_mode.from_real(tensor)
        self.inference.note_input(tensor, fake)
        node.meta["example_value"] = fake
        return TensorValue(node, fake, tensor_type=type(tensor))  # nn.Parameter: isinstance/type() see it

    def real_tensor_of(self, value) -> torch.Tensor | None:
        """The caller's tensor a TensorValue stands for: a frame input (by its source) or a parameter or
        buffer; None for a tensor the graph makes."""
        real = self._input_tensor(value.source) if value.source is not None else None
        return real if real is not None else self.held_tensor_of(value.example)

    def _input_tensor(self, source: Source) -> torch.Tensor | None:
        """The caller's tensor at the frame input ``source``, or None."""
        name = source.name()
        return next((real for known, real, *_ in self._tensor_inputs if known.name() == name), None)

    def guard_storage_offset(self, fake) -> None:
        """The trace reads where ``fake`` starts in its storage as a number (``x.storage_offset()``, the
        explicit offset of ``as_strided``): each caller's tensor sharing that storage keeps its offset (a
        guard). The graph was traced at those offsets, and no tensor guard checks them: a batch
        ``data[i:i + 3]`` at another ``i`` reused the graph with the first call's offset."""
        try:
            key = fake.untyped_storage()._cdata
        except (RuntimeError, NotImplementedError, AttributeError):
            return
        for source, real, known, *_ in self._tensor_inputs:
            if known.untyped_storage()._cdata == key:
                if known.storage_offset() != real.storage_offset():  # (a fake with symbolic sizes starts at 0)
                    self.shape_env.failed = self.shape_env.failed or \
                        f"the program reads the storage offset of {source.name()}, which starts at {real.storage_offset()}"
                    continue
                self.guards.storage_offset(source, real.storage_offset())

    def held_tensor_of(self, fake) -> torch.Tensor | None:
        """The parameter/buffer a get_attr value's fake stands for (None: not a held tensor)."""
        return next((t for t, f, _ in self._held if f is fake), None)

    def _unique(self, name: str) -> str:
        taken = {n.name for n in self.graph.nodes} | set(dir(self.root))
        if name not in taken:
            return name
        i = 1
        while f"{name}_{i}" in taken:
            i += 1
        return f"{name}_{i}"

    # ---- ops ---------------------------------------------------------------------------------

    def call(self, kind: str, target: Any, args: list[Value], kwargs: dict[str, Value]) -> Value:
        """Record `target(*args, **kwargs)` (kind: call_function or call_method) and return its value."""
        node_args = tuple(to_fx(a) for a in args)
        node_kwargs = {k: to_fx(v) for k, v in kwargs.items()}
        example = self._run_on_fakes(kind, target, node_args, node_kwargs)
        if self.inference.active():
            self._check_inference(kind, target, node_args, node_kwargs, example)
        node = self.graph.create_node(kind, target, node_args, node_kwargs)
        stack = self.user_stack
        if stack:
            node.meta["stack"] = stack
        self.op_count += 1
        return self.wrap_result(node, example)

    def _run_on_fakes(self, kind, target, args, kwargs):
        def example(x):
            if isinstance(x, slice):  # (a slice may hold size nodes)
                return slice(example(x.start), example(x.stop), example(x.step))
            return x.meta["example_value"] if isinstance(x, fx.Node) else x

        fargs = map_leaves(example, args)
        fkwargs = map_leaves(example, kwargs)
        if self.retired:
            self._refuse_retired(fargs, fkwargs)
        _refuse_write_to_overlapping(kind, target, fargs, fkwargs)
        env = self._unbacked_env()
        try:
            with contextlib.ExitStack() as stack:
                stack.enter_context(self.fake_mode)
                stack.enter_context(allow_unbacked(env))
                stack.enter_context(torch.set_grad_enabled(self.grad_enabled))
                for device, dtype, enabled, cache in self.autocast_stack:
                    stack.enter_context(torch.autocast(device, dtype=dtype, enabled=enabled))
                if self.shape_env is not None:  # (ATen composites whose C++ bodies cannot take symbolic sizes)
                    stack.enter_context(SymbolicCompositeMode())
                if kind == "call_method":
                    return getattr(fargs[0], target)(*fargs[1:], **fkwargs)
                if target is operator.getitem and isinstance(fargs[0], FakeTensor) and _symbolic_index(fargs[1]):
                    return symbolic_getitem(fargs[0], fargs[1])  # (Python's slice() refuses SymInts)
                return target(*fargs, **fkwargs)
        except DataDependentSize as exc:  # (env.unbacked_failed is set: the frame is traced again without them)
            unsupported(f"{_describe(target)}: {exc}")
        except UnsupportedFakeOp as exc:
            unsupported(f"data-dependent operation {_describe(target)}: {exc}",
                        hint="values computed from tensor data (item(), nonzero(), bool(tensor)) "
                             "cannot be known while tracing")
        except RecursionError as exc:  # (torch versions whose Python meta kernels re-enter on symbolic sizes)
            if self.shape_env is not None and _has_symbolic_arg(fargs, fkwargs):
                self.shape_env.failed = self.shape_env.failed or f"{_describe(target)} recursed on symbolic sizes"
            unsupported(f"{_describe(target)} failed on fake tensors: RecursionError")
        except (RuntimeError, TypeError, ValueError, IndexError, AttributeError, KeyError, NotImplementedError,
                AssertionError) as exc:
            # what eager would raise too (a wrong argument; torch's Python meta kernels also assert, e.g.
            # nll_loss's on a weight of the wrong size): the op runs as Python at a break, and raises there
            unsupported(f"{_describe(target)} failed on fake tensors: {type(exc).__name__}: {_first_part(exc)}")

    def _unbacked_env(self) -> ShapeEnv | None:
        """The env data-dependent ops make unbacked sizes in (None where the policy does not allow them);
        a frame without dynamic inputs gets one here, kept only once an unbacked symbol is made."""
        if self.dynamic is None or not getattr(self.dynamic, "unbacked", False):
            return None
        if self.shape_env is not None:
            return self.shape_env
        if self._spare_env is None:
            self._spare_env = ShapeEnv()
            self._spare_env.where = self._user_line
        return _AdoptOnUse(self)

    def _check_inference(self, kind, target, args, kwargs, example) -> None:
        def fake(x):
            return x.meta["example_value"] if isinstance(x, fx.Node) else x

        fargs, fkwargs = map_leaves(fake, args), map_leaves(fake, kwargs)
        tensors_in = [t for t in leaves((fargs, fkwargs)) if isinstance(t, torch.Tensor)]
        results = [t for t in leaves(example) if isinstance(t, torch.Tensor)]
        written = [t for t in written_tensors(kind, target, fargs, fkwargs) if isinstance(t, torch.Tensor)]
        self.inference.check_op(self.grad_enabled, tensors_in, written, results, _describe(target))

    def inference_outputs(self, outputs: list) -> list[int]:
        """Indexes of the graph outputs that are inference tensors in eager."""
        return [i for i, v in enumerate(outputs) if self.inference.is_inference(v.example)]

    def wrap_result(self, node: fx.Node, example: Any) -> Value:
        from kiln.capture.values.containers import TupleValue, ListValue
        from kiln.capture.values.namedtuples import NamedTupleValue
        from kiln.capture.values.tensors import TensorValue

        node.meta["example_value"] = example
        if isinstance(example, FakeTensor):
            return TensorValue(node, example)
        if isinstance(example, (tuple, list)) and not isinstance(example, torch.Size):  # (a Size is a constant)
            parts = []
            for i, item in enumerate(example):
                sub = self.graph.call_function(operator.getitem, (node, i))
                parts.append(self.wrap_result(sub, item))
            from kiln.capture.values.namedtuples import is_structseq

            if isinstance(example, tuple) and (hasattr(type(example), "_fields") or is_structseq(type(example))):
                return NamedTupleValue(parts, type(example))
            return TupleValue(parts) if isinstance(example, tuple) else ListValue(parts)
        if example is None:
            return ConstantValue(None)  # e.g. setitem: the node stays, it mutates its input
        if isinstance(example, SYMBOLIC_SCALARS):  # a number computed from dynamic sizes
            return wrap_symbolic(self, node, example)
        if isinstance(example, torch.Size) and has_symbolic(example):
            parts = [wrap_symbolic(self, self.graph.call_function(operator.getitem, (node, i)), n)
                     if is_symbolic(n) else ConstantValue(int(n)) for i, n in enumerate(example)]
            for part in parts:
                if isinstance(part, SymbolicInt):
                    part.node.meta["example_value"] = part.example
            return SizeValue(parts)
        if isinstance(example, (int, float, bool, torch.Size, torch.dtype, torch.device, torch.layout,
                                torch.memory_format)):
            # metadata results (sizes, numel, dtypes) are known statically: use the constant, drop the node
            if not node.users:
                self.graph.erase_node(node)
                self.op_count -= 1
            return ConstantValue(example)
        unsupported(f"{_describe(node.target)} returned {type(example).__name__}, which kiln cannot hold in a graph")

    # ---- finishing ---------------------------------------------------------------------------

    def finish(self, outputs: list[Value]) -> fx.GraphModule:
        # no dead-code elimination here: in-place ops and setitem have no users but must run
        self.graph.output(tuple(to_fx(v) for v in outputs))
        gm = fx.GraphModule(self.root, self.graph, class_name=f"{_clean_name(self.code_name)}_graph")
        self._guard_storage_aliasing()
        self._guard_autograd_kinds()
        steps = self._version_steps()
        if steps is not None:
            gm.meta["kiln_version_steps"] = steps
        if self.shape_env is not None:
            gm.meta["kiln_shape_env"] = self.shape_env
        return gm

    def input_is_leaf(self, source: Source) -> bool:
        """``t.is_leaf`` of the input at ``source`` (a guard keeps it so: the tensor guard does not)."""
        from kiln.capture.sources import AttrSource

        real = self._input_tensor(source)
        if real is None:
            return True  # (a held tensor: parameters and buffers are leaves)
        self.guards.constant(AttrSource(source, "is_leaf"), real.is_leaf)
        return real.is_leaf

    def tensor_data(self, value: Value) -> Value:
        """``t.data``: a tensor sharing t's memory, detached, with a version counter of its own (writes
        through it do not count as changes of ``t`` for autograd's checks, as in eager)."""
        result = self.call("call_function", getattr, [value, ConstantValue("data")], {})
        self._data_views.append((result.example, _version(result.example)))
        return result

    def _version_steps(self):
        """How far the version counter of each input and held tensor moved while tracing, where not by one:
        (placeholder position -> steps, id of held tensor -> steps), ``gm.meta["kiln_version_steps"]``.
        Fakes take eager's version bumps (autograd's ADInplaceOrView layer runs above them as above real
        tensors): 2 for two in-place ops on one tensor, 0 for writes through ``t.data`` (a version counter
        of its own) or that eager does not count (batch norm's running statistics). The AOT runtimes
        advance a written tensor's counter by as much (aot/runtime.py: ``write_back``)."""
        positions = {pos: steps for _, _, fake, v, pos in self._tensor_inputs
                     if (steps := _steps(fake, v)) is not None}
        held = {id(t): steps for t, fake, v in self._held if (steps := _steps(fake, v)) is not None}
        return (positions, held) if positions or held else None

    def retire(self, fake, why: str) -> None:
        """No op of this trace may use ``fake`` any more (its tensor's .data was assigned: ``why``)."""
        self.retired[id(fake)] = why
        if any(f is fake for _, f, _ in self._held):
            self.assigns_held_data = True

    def _refuse_retired(self, fargs, fkwargs) -> None:
        for x in leaves((fargs, fkwargs)):
            if isinstance(x, torch.Tensor) and id(x) in self.retired:
                unsupported(f"a use of a tensor after {self.retired[id(x)]}",
                            hint="the rest runs as Python on the swapped tensor")

    def _guard_autograd_kinds(self) -> None:
        """An input that is not a leaf and that the graph writes in place: autograd allowed the write on
        its fake because the fake sits where the input does (fake/autograd_kind.py); a leaf (or a view
        refusing in-place ops) with the same metadata on a later call must not run this graph."""
        from kiln.capture.sources import AutogradKindSource

        for source, real, fake, version, _ in self._tensor_inputs:
            kind = autograd_kind(real)
            if kind != "leaf" and (version is None or _version(fake) != version):
                self.guards.constant(AutogradKindSource(source), kind)

    def _guard_storage_aliasing(self) -> None:
        """A graph that writes a tensor is right only for the aliasing of its inputs it was traced with
        (capture/storage_aliasing.py): guard it."""
        written = any(v is None or _version(fake) != v for fake, v in
                      [t[2:4] for t in self._tensor_inputs] + [t[1:] for t in self._held] + self._data_views)
        if not written or not self._tensor_inputs:
            return
        sources = [t[0] for t in self._tensor_inputs]
        held = HeldRanges([t[0] for t in self._held], live=self.assigns_held_data) if self._held else None
        signature = aliasing_signature(tuple(t[1] for t in self._tensor_inputs), held)
        if signature is None:
            unsupported(f"tensors among {', '.join(s.name() for s in sources)} overlap in memory without "
                        "sharing one storage, and the graph writes a tensor in place",
                        hint="kiln runs this as Python; pass views of one tensor instead")
        if len(sources) > 1 or held is not None:
            self.guards.storage_aliasing(sources, held, signature)


def _first_part(exc: BaseException) -> str:
    """An exception's message without the C++ backtrace torch appends ("Exception raised from ...")."""
    return str(exc).split("\nException raised from ")[0].strip()


def _steps(fake: torch.Tensor, version) -> int | None:
    """How many times ``fake``'s version counter moved since it read ``version``; None for once (the
    runtimes' default) or unknown."""
    now = _version(fake)
    if version is None or now is None or now - version == 1:
        return None
    return now - version


def _version(fake: torch.Tensor):
    """A fake's version counter (bumped by in-place ops on it and its views); None for inference tensors,
    which have none (they are then taken as written)."""
    try:
        return fake._version
    except RuntimeError:
        return None


class _AdoptOnUse:
    """Stands for the spare ShapeEnv while an op runs: the first unbacked symbol made in it makes it the
    graph's env (so frames without data-dependent ops keep no env)."""

    def __init__(self, output: OutputGraph):
        self.output = output

    def __getattr__(self, name):
        env = self.output._spare_env
        if name == "create_unbacked" and self.output.shape_env is None:
            self.output.shape_env = env
            self.output.guards.shape_env = env
        return getattr(env, name)


def _has_symbolic_arg(args, kwargs) -> bool:
    for x in leaves((args, kwargs)):
        if isinstance(x, SYMBOLIC_SCALARS) or (isinstance(x, torch.Tensor) and has_symbolic(tuple(x.shape))):
            return True
    return False


def _symbolic_index(index) -> bool:
    for i in (index if isinstance(index, tuple) else (index,)):
        if isinstance(i, slice) and any(isinstance(p, SYMBOLIC_SCALARS) for p in (i.start, i.stop, i.step)):
            return True
        if isinstance(i, SYMBOLIC_SCALARS):
            return True
    return False


def _storage_key(t: torch.Tensor) -> int:
    storage = t.untyped_storage()
    return storage.data_ptr() or id(storage)


def to_fx(v: Value) -> Any:
    """A symbolic value as an FX node argument."""
    from kiln.capture.values.containers import SequenceValue, SliceValue, DictValue
    from kiln.capture.values.tensors import TensorValue

    if isinstance(v, (TensorValue, SymbolicInt)):
        return v.node
    if isinstance(v, SliceValue):
        return slice(*[to_fx(p) for p in v.parts])
    if isinstance(v, SequenceValue):
        items = [to_fx(x) for x in v.elements]
        if isinstance(v, SizeValue) or (type(v).__name__ == "NamedTupleValue" and v.tuple_type is torch.Size):
            # (a Size holds only ints: with size nodes in it, the op gets a tuple, which it takes alike)
            return tuple(items) if any(isinstance(x, fx.Node) for x in items) else torch.Size(items)
        return list(items) if v.python_kind is list else tuple(items)
    if isinstance(v, DictValue):
        from kiln.capture.values.container_keys import ObjectKey

        if any(isinstance(k, ObjectKey) for k in v.entries):
            unsupported("passing a dict keyed by Python objects to a torch operation")
        return {k: to_fx(x) for k, x in v.entries.items()}
    if v.is_constant():
        return v.as_constant()
    unsupported(f"passing {v} to a torch operation")


def _describe(target: Any) -> str:
    if isinstance(target, str):
        return f"Tensor.{target}"
    mod = getattr(target, "__module__", None) or ""
    name = getattr(target, "__qualname__", None) or getattr(target, "__name__", repr(target))
    return f"{mod}.{name}" if mod else str(name)


def written_tensors(kind: str, target, args, kwargs) -> list:
    """What an op writes in place: its first argument (`t.add_(...)`, `t += ...`, `t[i] = v`), `out=`."""
    from kiln.capture.values.base import INPLACE_TO_PLAIN

    written = []
    if kind == "call_method" and isinstance(target, str) and target.endswith("_") and not target.endswith("__"):
        written.append(args[0] if args else None)
    elif kind == "call_function" and (target in INPLACE_TO_PLAIN or target is operator.setitem):
        written.append(args[0] if args else None)
    elif kind == "call_function" and isinstance(target, torch._ops.OpOverload) and target._schema.is_mutable:
        for i, arg in enumerate(target._schema.arguments):  # torch.ops.<ns>.<op>: its (a!) arguments
            if arg.alias_info is not None and arg.alias_info.is_write:
                value = args[i] if i < len(args) and not arg.kwarg_only else kwargs.get(arg.name)
                written.extend(value if isinstance(value, (tuple, list)) else [value])
    out = kwargs.get("out")
    written.extend(out if isinstance(out, (tuple, list)) else [out])
    return written


def _refuse_write_to_overlapping(kind: str, target, args, kwargs) -> None:
    """An in-place op (`t.add_(...)`, `t += ...`, `out=`) writing a tensor whose elements share memory (an
    `expand`ed dim: stride 0, size > 1). Eager raises for most such ops (and for the others writes each
    location once); the meta kernels do not check, and a graph that raised at run time would drop the side
    effects recorded before it. So the op breaks the graph and runs as Python, as in eager."""
    for t in written_tensors(kind, target, args, kwargs):
        if isinstance(t, torch.Tensor) and any(st == 0 and n > 1 for st, n in zip(t.stride(), t.shape)):
            unsupported(f"in-place {_describe(target)} writes a tensor whose elements share memory "
                        f"(size {tuple(t.shape)}, stride {tuple(t.stride())})",
                        hint="kiln runs it as Python, where eager raises; clone() the expanded tensor first")
        if isinstance(t, torch.Tensor) and _overlaps_itself(t):
            unsupported(f"in-place {_describe(target)} writes a tensor whose elements overlap in memory "
                        f"(size {tuple(t.shape)}, stride {tuple(t.stride())}: an unfold or as_strided view)",
                        hint="kiln runs it as Python: the result depends on the order eager's kernel writes "
                             "in; clone() the view first")
    others = [x for x in leaves((args, kwargs)) if isinstance(x, torch.Tensor)]
    for t in written_tensors(kind, target, args, kwargs):
        if not isinstance(t, torch.Tensor):
            continue
        dest = t
        if target is operator.setitem and len(args) == 3:  # writes t[index], from the value
            dest = _basic_index_view(t, args[1])
        for other in others:
            if other is t or other is dest:
                continue
            if dest is None:  # (an advanced index: any sharing breaks, and eager decides)
                overlap = other.untyped_storage()._cdata == t.untyped_storage()._cdata
            else:
                overlap = partial_overlap(dest, other)
            if overlap:
                symbolic = any(isinstance(n, torch.SymInt) for x in (dest if dest is not None else t, other)
                               for n in (*x.shape, *x.stride(), x.storage_offset()))
                hint = ("its sizes are symbolic here, and kiln cannot tell for every size whether the two overlap: "
                        "it runs the op as Python, which raises only where eager does" if symbolic else
                        "kiln runs it as Python, where eager raises; clone() the source first")
                unsupported(f"in-place {_describe(target)} writes a tensor that {'may partly overlap' if symbolic else 'partly overlaps'} "
                            f"another of its arguments in memory (size {tuple(t.shape)} at offset {t.storage_offset()}, "
                            f"size {tuple(other.shape)} at offset {other.storage_offset()}, one storage)", hint=hint)


def _overlaps_itself(t: torch.Tensor) -> bool:
    """Whether two elements of ``t`` can be one memory location (``x.unfold(0, 2, 1)``): going from the
    smallest stride out, each dim's stride must pass the farthest offset the dims inside it reach.
    Symbolic sizes and strides are taken at this trace's values (the views that overlap, unfold's and
    expand's, overlap at every size)."""
    def value(v):
        return int(v.node.hint) if isinstance(v, torch.SymInt) else v

    pairs = [(value(st), value(n)) for st, n in zip(t.stride(), t.shape)]
    reach = 0
    for st, n in sorted((p for p in pairs if p[1] > 1), key=lambda p: p[0]):
        if st <= reach:
            return True
        reach += (n - 1) * st
    return False


def _basic_index_view(t: torch.Tensor, index):
    """``t[index]`` (a view of the fake) for a basic index (ints, slices, None, ...), else None."""
    parts = index if isinstance(index, tuple) else (index,)
    if not all(p is None or p is Ellipsis or isinstance(p, (int, slice, *SYMBOLIC_SCALARS)) for p in parts):
        return None
    from kiln.fake.symbolic_composite import tensor_getitem

    try:
        view = tensor_getitem(t, index)  # (a symbolic int index: t[index] would read it as a plain int)
        return t[index] if view is NotImplemented else view
    except Exception:
        return None
