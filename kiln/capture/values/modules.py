"""torch.nn.Module instances: parameters and buffers become graph attributes, forward is inlined."""
from __future__ import annotations

import types

import torch
from torch.nn.modules import module as nn_module_internals

from kiln.capture.class_guards import note_class, note_name
from kiln.capture.sources import AttrSource, ConstantSource, DictEntrySource
from kiln.capture.values.base import ConstantValue, Value, is_constant_literal, unsupported
from kiln.capture.values.functions import UserFunctionValue, UserMethodValue
from kiln.capture.values.class_stores import class_has_pending, pending_class_attribute
from kiln.capture.values.objects import ClassValue, class_attribute

_GLOBAL_HOOK_DICTS = (
    "_global_forward_hooks", "_global_forward_pre_hooks", "_global_backward_hooks",
    "_global_backward_pre_hooks", "_global_forward_hooks_always_called",
)


_MODULE_INTERNALS = ConstantSource("torch.nn.modules.module", nn_module_internals)


def _global_hooks_present() -> bool:
    return any(getattr(nn_module_internals, name, None) for name in _GLOBAL_HOOK_DICTS)


# what a module's __dict__ holds besides its settings: the tables and hook dicts nn.Module.__init__ makes
_MODULE_TABLES = frozenset(torch.nn.Module().__dict__) - {"training"}


def stateless(module: torch.nn.Module) -> bool:
    """A module that holds no tensors, submodules or hooks, only settings (ints, floats, strings, ...):
    ``nn.CrossEntropyLoss()``, ``nn.GELU()``, ``nn.Dropout(0.1)``. A program may make a new one per
    call (transformers builds its loss module inside ``forward``)."""
    d = module.__dict__
    if not _MODULE_TABLES <= d.keys():  # (in its __init__, before nn.Module.__init__ made them)
        return False
    if d["_parameters"] or d["_modules"] or any(b is not None for b in d["_buffers"].values()):
        return False
    for name, v in d.items():
        if name == "_non_persistent_buffers_set" or name == "_buffers":
            continue
        if name in _MODULE_TABLES:
            if v:  # a hook
                return False
        elif not is_constant_literal(v):
            return False
    return True


def guard_module(guards, source, module: torch.nn.Module) -> None:
    """Guards for a module read from ``source``: the same object, as it holds tensors the graph holds
    too (each parameter and buffer read is also guarded by identity). A ``stateless`` module is guarded
    by its class and that it stays stateless instead (no parameters, submodules or hooks, the same None
    buffers): what its code reads from it is guarded read by read (its settings by value, names absent
    from it as absent), so a new instance with the same settings runs the same compiled code and does
    not recompile on every call."""
    if not stateless(module):
        guards.identity(source, module)
        return
    guards.type(source, module)
    guards.stateless_modules.setdefault(source.name(), (source, module))
    guards.dict_keys(AttrSource(source, "_parameters"), module._parameters)
    guards.dict_keys(AttrSource(source, "_modules"), module._modules)
    guards.dict_keys(AttrSource(source, "_buffers"), module._buffers)
    for name in module._buffers:
        guards.constant(DictEntrySource(source, "_buffers", name), None)
    guards.no_module_hooks(source)


def guard_module_aliasing(output) -> None:
    """Where the trace wrote to a module guarded by class (``guard_module``), whether it is the same
    object as each other such module read from another place: a write through one is what a read through
    the other sees exactly when they are one object (the trace modelled the objects it saw; identity
    guards kept that before). Only then: such modules are many (a model's activation modules)."""
    registered = list(output.guards.stateless_modules.values())
    if len(registered) < 2:
        return
    written = {key[1] for key in output.side_effects.places_written()}
    for i, (source, module) in enumerate(registered):
        for other_source, other in registered[i + 1:]:
            if id(module) in written or id(other) in written:
                if module is other:
                    output.guards.same(source, other_source)
                else:
                    output.guards.not_same(source, other_source)


class NNModuleValue(Value):
    def __init__(self, module: torch.nn.Module, source, qualname: str):
        self.module = module
        self.source = source
        self.qualname = qualname  # dotted path for naming graph attributes, e.g. "self.encoder.layer.0"
        note_class(type(module))  # (its forward, class attributes, names absent: guarded, class_guards.py)

    def python_type(self) -> type:
        return type(self.module)

    def truth(self, tx) -> bool:
        if isinstance(self.module, (torch.nn.ModuleList, torch.nn.Sequential, torch.nn.ModuleDict,
                                    torch.nn.ParameterList, torch.nn.ParameterDict)):
            self.guard_contents(tx)
            return len(self.module) > 0
        return True

    def _table_written(self, tx, table: str, name: str) -> Value | None:
        """The entry ``name`` of ``module.<table>`` where this trace has that dict as a value (read through
        ``self._buffers``: its stores are the program's), else None (the module's own dict is current)."""
        from kiln.capture.values.containers import DictValue

        tracked = tx.output.values_by_source.get(AttrSource(self.source, table).name()) if self.source else None
        if not isinstance(tracked, DictValue):
            return None
        if name not in tracked.entries:
            unsupported(f"{self.qualname}.{name} read after its entry of {table} was deleted in the compiled code")
        return tracked.entries[name]

    def _child(self, tx, name: str, sub: torch.nn.Module) -> "NNModuleValue":
        from kiln.capture.values.builder import wrap

        src = DictEntrySource(self.source, "_modules", name) if self.source is not None else None
        return wrap(tx, sub, src, qualname=f"{self.qualname}.{name}")

    def getattr(self, tx, name: str) -> Value:
        from kiln.capture.values.builder import wrap

        note_name(name)  # (a class attribute of that name added later shadows what is read: class_guards.py)
        pending = tx.output.side_effects.load_attr(self, name)
        if pending is not None:
            return pending
        m = self.module
        d = m.__dict__
        # Python reads the instance dict before nn.Module.__getattr__ reaches the tables below: an entry
        # there (`m.__dict__[name] = other`, now or later) shadows the parameter, buffer or submodule
        in_tables = name not in d and any(name in d.get(t, {}) for t in ("_parameters", "_buffers", "_modules"))
        if in_tables and self.source is not None:
            tx.output.guards.contains(AttrSource(self.source, "__dict__"), name, False)
        for table in ("_parameters", "_buffers"):
            if in_tables and name in d.get(table, {}):
                _refuse_shadowed(tx, type(m), name)
                written = self._table_written(tx, table, name)
                if written is not None:  # self._buffers["k"] = new earlier in this trace: what it holds now
                    return written
                t = d[table][name]
                if t is not None:
                    return table_tensor(tx, self, table, name, t)
                if self.source is not None:  # (None it must stay)
                    tx.output.guards.identity(DictEntrySource(self.source, table, name), t)
                return ConstantValue(None)
        if in_tables and name in d.get("_modules", {}):
            _refuse_shadowed(tx, type(m), name)
            sub = d["_modules"][name]
            return ConstantValue(None) if sub is None else self._child(tx, name, sub)
        if name == "__dict__" and self.source is not None:
            from kiln.capture.values.module_getattr import ModuleInstanceDict

            return ModuleInstanceDict(self)
        cls = type(m)
        class_attr = None
        for klass in cls.__mro__:
            pending = pending_class_attribute(tx, klass, name)  # a store to the class in this trace
            if pending is not None or name in vars(klass):
                class_attr = pending if pending is not None else vars(klass)[name]
                break
        if name in d and not (class_attr is not None and hasattr(type(class_attr), "__set__")):
            return wrap(tx, d[name], AttrSource(self.source, name) if self.source else None)
        if name == "__class__":
            return ClassValue(cls)
        if name in _TREE_METHODS and class_attr is getattr(torch.nn.Module, name):
            return ModuleTreeMethodValue(self, name)
        if name in _MEMBER_METHODS and class_attr is getattr(torch.nn.Module, name):
            return ModuleMembersMethodValue(self, name)
        if class_attr is not None:
            if self.source is not None and not hasattr(type(class_attr), "__set__"):
                # an instance attribute set later (m.max_len = 4) would shadow the class attribute
                tx.output.guards.contains(AttrSource(self.source, "__dict__"), name, False)
            return class_attribute(tx, cls, name, self)
        from kiln.capture.values.module_getattr import python_getattr_hook

        if python_getattr_hook(cls) is not None and self.source is not None:  # its own __getattr__, traced
            for table in ("__dict__", "_parameters", "_buffers", "_modules"):  # (found nowhere: guarded)
                tx.output.guards.contains(AttrSource(self.source, table), name, False)
            return class_attribute(tx, cls, "__getattr__", self).call(tx, [ConstantValue(name)], {})
        unsupported(f"{cls.__name__!r} module has no attribute {name!r}")

    def call(self, tx, args, kwargs) -> Value:
        m = self.module
        if m._backward_hooks or getattr(m, "_backward_pre_hooks", None) or _global_hooks_present():
            unsupported(f"module {self.qualname} ({type(m).__name__}) has backward or global hooks",
                        hint="modules with backward hooks or global module hooks are run eagerly for now")
        if type(m).__call__ is not torch.nn.Module.__call__:  # a class that defines its own __call__
            return class_attribute(tx, type(m), "__call__", self).call(tx, args, kwargs)
        return self.call_module(tx, args, kwargs)

    def call_module(self, tx, args, kwargs) -> Value:
        """What nn.Module.__call__ does (also reached as ``super().__call__(...)`` from a class's own
        ``__call__``, as transformers' GradientCheckpointingLayer's): hooks, then ``forward``."""
        m = self.module
        for name in ("forward", "_compiled_call_impl"):  # what nn.Module.__call__ reads from the instance
            if m.__dict__.get(name) is not None:
                unsupported(f"module {self.qualname} ({type(m).__name__}) has {name} set on the instance",
                            hint="set it on a subclass, or call it directly")
            if self.source is not None:
                tx.output.guards.contains(AttrSource(self.source, "__dict__"), name, False)
        forward = type(m).forward
        if forward is torch.nn.Module.forward:
            unsupported(f"module {type(m).__name__} has no forward()")
        # a hook added later (global, forward or backward) would not run in the compiled code: guarded
        tx.output.guards.no_global_module_hooks(_MODULE_INTERNALS)
        if m._forward_hooks or m._forward_pre_hooks:  # traced as _call_impl runs them (module_hooks.py)
            from kiln.capture.values.module_hooks import call_with_forward_hooks

            return call_with_forward_hooks(tx, self, class_attribute(tx, type(m), "forward", self), args, kwargs)
        if self.source is not None:
            tx.output.guards.no_module_hooks(self.source)
        return class_attribute(tx, type(m), "forward", self).call(tx, args, kwargs)

    def guard_children(self, tx) -> None:
        """Which submodules this module has (names, in order): iterating over them depends on it."""
        if self.source is not None:
            tx.output.guards.dict_keys(AttrSource(self.source, "_modules"), self.module._modules)

    def guard_contents(self, tx) -> None:
        """What a container module holds (ModuleList/Sequential/ModuleDict: its submodules' names in
        order; ParameterList/ParameterDict: its parameters'): its length, truth, iteration and integer
        indexing depend on it (an `append` after compiling must recompile)."""
        if self.source is None:
            return
        if isinstance(self.module, (torch.nn.ParameterList, torch.nn.ParameterDict)):
            tx.output.guards.dict_keys(AttrSource(self.source, "_parameters"), self.module._parameters)
        else:
            self.guard_children(tx)

    def pin_identity(self, tx) -> None:
        """Guard this module as the very object (a module guarded by class may not be): walks of the
        module tree yield a module held under two names once, which depends on which objects they are."""
        if self.source is not None:
            tx.output.guards.identity(self.source, self.module)

    def named_submodules(self, tx, prefix: str = "") -> list[tuple[str, "NNModuleValue"]]:
        """`named_modules()`: this module and every module below it, depth first, each once."""
        seen: set[int] = set()
        found: list[tuple[str, NNModuleValue]] = []

        def visit(value: NNModuleValue, path: str) -> None:
            if id(value.module) in seen:
                return
            seen.add(id(value.module))
            value.pin_identity(tx)
            found.append((path, value))
            value.guard_children(tx)
            for child_name, child in value.module._modules.items():
                if child is not None:
                    visit(value._child(tx, child_name, child), f"{path}.{child_name}" if path else child_name)

        visit(self, prefix)
        return found

    def call_method(self, tx, name, args, kwargs) -> Value:
        m = self.module
        if not args and not kwargs:
            if name in ("parameters", "buffers", "children", "modules"):
                if name == "parameters":
                    items = [tx.output.add_attr(p, f"{self.qualname}.{n}") for n, p in m.named_parameters()]
                elif name == "buffers":
                    items = [tx.output.add_attr(b, f"{self.qualname}.{n}") for n, b in m.named_buffers()]
                elif name == "children":
                    items = [self._child(tx, n, c) for n, c in m.named_children()]
                else:
                    unsupported("Module.modules()")
                from kiln.capture.values.containers import ListIteratorValue

                return ListIteratorValue(items)
            if name in ("named_children",):
                from kiln.capture.values.containers import ListIteratorValue, TupleValue

                return ListIteratorValue([TupleValue([ConstantValue(n), self._child(tx, n, c)])
                                          for n, c in m.named_children()])
        if isinstance(m, torch.nn.ModuleDict) and name in ("keys", "values", "items"):
            from kiln.capture.values.containers import ListIteratorValue, TupleValue

            keys = list(m.keys())
            if name == "keys":
                return ListIteratorValue([ConstantValue(k) for k in keys])
            if name == "values":
                return ListIteratorValue([self._child(tx, k, m[k]) for k in keys])
            return ListIteratorValue([TupleValue([ConstantValue(k), self._child(tx, k, m[k])]) for k in keys])
        if name == "__len__":
            self.guard_contents(tx)
            return ConstantValue(len(m))
        return super().call_method(tx, name, args, kwargs)

    def items(self, tx) -> list[Value]:
        m = self.module
        self.guard_contents(tx)
        if isinstance(m, (torch.nn.ModuleList, torch.nn.Sequential)):
            return [self._child(tx, k, c) for k, c in m._modules.items()]
        if isinstance(m, torch.nn.ModuleDict):
            return [ConstantValue(k) for k in m.keys()]
        if isinstance(m, torch.nn.ParameterList):
            return [tx.output.add_attr(p, f"{self.qualname}.{i}") for i, p in enumerate(m)]
        unsupported(f"iterating over module {type(m).__name__}")

    def getitem(self, tx, index: Value) -> Value:
        m = self.module
        if not index.is_constant():
            unsupported(f"indexing module {type(m).__name__} with {index}")
        idx = index.as_constant()
        if isinstance(m, (torch.nn.ModuleList, torch.nn.Sequential, torch.nn.ParameterList)):
            self.guard_contents(tx)  # (which child an int or a slice picks depends on the names in order)
        if isinstance(m, (torch.nn.ModuleList, torch.nn.Sequential)):
            keys = list(m._modules.keys())
            if isinstance(idx, slice):
                # a new container of the same child modules (children are guarded through the parent)
                return NNModuleValue(m[idx], None, f"{self.qualname}[{idx.start}:{idx.stop}:{idx.step}]")
            key = keys[idx]
            return self._child(tx, key, m._modules[key])
        if isinstance(m, torch.nn.ModuleDict):
            return self._child(tx, idx, m[idx])
        if isinstance(m, torch.nn.ParameterList):
            return tx.output.add_attr(m[idx], f"{self.qualname}.{idx}")
        if isinstance(m, torch.nn.ParameterDict):
            return tx.output.add_attr(m[idx], f"{self.qualname}.{idx}")
        unsupported(f"indexing module {type(m).__name__}")

    def __repr__(self) -> str:
        return f"Module({self.qualname}: {type(self.module).__name__})"


_TREE_METHODS = ("modules", "named_modules", "children", "named_children")


class ModuleTreeMethodValue(Value):
    """`module.modules` / `named_modules` / `children` / `named_children` (nn.Module's own methods):
    called, the submodules as a materialized iterator, with the keys of every `_modules` dict it walks
    guarded (a submodule added or removed later recompiles)."""

    def __init__(self, module_value: NNModuleValue, name: str):
        self.module_value = module_value
        self.name = name

    def call(self, tx, args, kwargs) -> Value:
        from kiln.capture.values.containers import ListIteratorValue, TupleValue

        if args or kwargs:
            unsupported(f"Module.{self.name}() with arguments")
        owner = self.module_value
        if self.name in ("modules", "named_modules"):
            pairs = owner.named_submodules(tx)
        else:
            owner.guard_children(tx)
            pairs = [(n, owner._child(tx, n, c)) for n, c in owner.module._modules.items() if c is not None]
            for _, v in pairs:
                v.pin_identity(tx)
            seen: set[int] = set()  # children() yields a module held under two names once
            pairs = [(n, v) for n, v in pairs if not (id(v.module) in seen or seen.add(id(v.module)))]
        if self.name.startswith("named_"):
            made = ListIteratorValue([TupleValue([ConstantValue(n), v]) for n, v in pairs], kind="generator")
        else:
            made = ListIteratorValue([v for _, v in pairs], kind="generator")
        made.remake = (self, [], {})  # not started: module.<name>() again is the same generator
        return made

    def reconstruct(self, cg) -> None:
        cg.reconstruct(self.module_value)
        cg.load_attr(self.name)

    def __repr__(self) -> str:
        return f"Method(Module.{self.name} of {self.module_value!r})"


_MEMBER_METHODS = ("parameters", "named_parameters", "buffers", "named_buffers")
_MEMBER_PARAMETERS = {"parameters": ("recurse",), "buffers": ("recurse",),
                      "named_parameters": ("prefix", "recurse", "remove_duplicate"),
                      "named_buffers": ("prefix", "recurse", "remove_duplicate")}


def table_tensor(tx, module_value, table: str, key: str, tensor: torch.Tensor) -> Value:
    """The parameter or buffer ``tensor`` at ``module.<table>[key]``: a graph input where it is a buffer the
    program assigns anew at each call (capture/dynamic.py ``buffer_is_input``), else held by the graph,
    guarded to be this very tensor (a reassigned parameter must recompile)."""
    from kiln.capture.values.builder import wrap

    place = DictEntrySource(module_value.source, table, key) if module_value.source is not None else None
    if table == "_buffers" and place is not None and tx.output.dynamic is not None \
            and tx.output.dynamic.buffer_is_input(place.name(), tensor):
        return wrap(tx, tensor, place)
    if place is not None:
        tx.output.guards.identity(place, tensor)
    return tx.output.add_attr(tensor, f"{module_value.qualname}.{key}")


def _identity(tx, item: Value):
    """Which tensor object ``item`` is: the caller's tensor or a parameter/buffer (by id), or a tensor the
    graph makes (by its value: assigned under two names, it is one object)."""
    real = tx.output.real_tensor_of(item)
    return ("tensor", id(real)) if real is not None else ("value", id(item))


class ModuleMembersMethodValue(Value):
    """`module.parameters` / `named_parameters` / `buffers` / `named_buffers` (nn.Module's own generator
    methods, in module.py, which kiln does not trace into): called, the tensors `Module._named_members`
    yields, in its order (modules depth first, each tensor once), as a materialized iterator of graph
    attributes; the keys of every `_modules` and `_parameters`/`_buffers` dict walked are guarded, and
    each tensor's identity, as for an attribute read."""

    def __init__(self, module_value: NNModuleValue, name: str):
        self.module_value = module_value
        self.name = name

    def _arguments(self, args, kwargs) -> dict:
        names = _MEMBER_PARAMETERS[self.name]
        if len(args) > len(names) or set(kwargs) - set(names):
            unsupported(f"Module.{self.name}() with arguments {args} {sorted(kwargs)}")
        bound = {"prefix": "", "recurse": True, "remove_duplicate": True}
        bound.update(zip(names, args))
        bound.update(kwargs)
        if any(isinstance(v, Value) and not v.is_constant() for v in bound.values()):
            unsupported(f"Module.{self.name}() with arguments that are not constants")
        return {k: v.as_constant() if isinstance(v, Value) else v for k, v in bound.items()}

    def call(self, tx, args, kwargs) -> Value:
        from kiln.capture.values.containers import ListIteratorValue, TupleValue

        bound = self._arguments(args, kwargs)
        if not bound["remove_duplicate"]:
            unsupported(f"Module.{self.name}(remove_duplicate=False)")
        owner, prefix = self.module_value, bound["prefix"]
        modules = owner.named_submodules(tx, prefix) if bound["recurse"] else [(prefix, owner)]
        table = "_parameters" if "parameters" in self.name else "_buffers"
        seen: set = set()  # the tensors yielded, by identity (remove_duplicate): see _identity
        found = []
        for module_prefix, value in modules:
            members = value.module.__dict__[table]
            if value.source is not None:
                tx.output.guards.dict_keys(AttrSource(value.source, table), members)
            for key, tensor in members.items():
                item = self._member(tx, value, table, key, tensor)
                identity = _identity(tx, item) if item is not None else None
                if item is None or identity in seen:
                    continue
                seen.add(identity)
                name = module_prefix + ("." if module_prefix else "") + key
                found.append(TupleValue([ConstantValue(name), item]) if self.name.startswith("named_") else item)
        made = ListIteratorValue(found, kind="generator")
        made.remake = (self, list(args), dict(kwargs))  # not started: the same call again
        return made

    def _member(self, tx, value, table: str, key: str, tensor) -> Value | None:
        """The value of ``module.<table>[key]`` (None: nothing to yield): the tensor assigned earlier in this
        trace (``self.k = new``), a buffer read as a graph input (capture/dynamic.py), or the held tensor."""
        from kiln.capture.values.tensors import TensorValue

        pending = tx.output.side_effects.load_attr(value, key)
        if pending is not None:
            if pending.is_constant() and pending.as_constant() is None:
                return None  # (self.k = None: the table keeps the name, the iteration skips it)
            if not isinstance(pending, TensorValue):
                unsupported(f"Module.{self.name}() after {value.qualname}.{key} was assigned a "
                            f"{pending.python_type().__name__}, not a tensor")
            return pending
        return None if tensor is None else table_tensor(tx, value, table, key, tensor)

    def reconstruct(self, cg) -> None:
        cg.reconstruct(self.module_value)
        cg.load_attr(self.name)

    def __repr__(self) -> str:
        return f"Method(Module.{self.name} of {self.module_value!r})"


def _refuse_shadowed(tx, cls: type, name: str) -> None:
    """A class attribute ``name`` (stored in this trace, or set on the class after the module registered
    its parameter, buffer or submodule ``name``) is what Python's lookup finds first: not modelled."""
    if any(name in vars(klass) for klass in cls.__mro__) or \
            (tx.output.side_effects.class_stores and class_has_pending(tx, cls, name)):
        unsupported(f"{cls.__name__}.{name}: a class attribute shadows the module's parameter, buffer or "
                    f"submodule {name!r}")
