"""nn.Module subclasses with a Python `__getattr__` (PEFT-style wrappers that forward unknown names to a
wrapped model, alias tables): the class's `__getattr__` is traced where object.__getattribute__ finds
nothing; `super().__getattr__(name)` / `nn.Module.__getattr__` is modelled (`_parameters`, `_buffers`,
`_modules`, in that order, else torch's AttributeError, the absence guarded), and `self.__dict__[key]`
reads the module's instance dict (each key guarded; writes and iteration break)."""
from __future__ import annotations

import torch

from kiln.capture.sources import AttrSource, GetItemSource
from kiln.capture.values.base import Value, unsupported


def python_getattr_hook(cls: type):
    """The class's own Python __getattr__ (not nn.Module's), else None."""
    from kiln.capture.values.objects import python_slot

    fn = python_slot(cls, "__getattr__")
    return None if fn is None or fn is torch.nn.Module.__getattr__ else fn


class ModuleGetattr(Value):
    """`nn.Module.__getattr__` bound to a module (reached through super() or the class)."""

    def __init__(self, module_value):
        self.module_value = module_value

    def call(self, tx, args, kwargs) -> Value:
        from kiln.capture.values.exceptions import raise_traced

        if len(args) != 1 or kwargs or not args[0].is_constant() or not isinstance(args[0].as_constant(), str):
            unsupported("nn.Module.__getattr__ with a name that is not a known str")
        name = args[0].as_constant()
        owner = self.module_value
        if owner.source is None:
            unsupported(f"nn.Module.__getattr__({name!r}) of a module kiln cannot name")
        d = owner.module.__dict__
        for table in ("_parameters", "_buffers", "_modules"):
            present = name in d.get(table, {})
            tx.output.guards.contains(AttrSource(owner.source, table), name, present)
            if present:
                return owner.getattr(tx, name)
        raise_traced(AttributeError, f"'{type(owner.module).__name__}' object has no attribute '{name}'")


class ModuleInstanceDict(Value):
    """`module.__dict__`: key reads of the module's instance dict, guarded."""

    def __init__(self, module_value):
        self.module_value = module_value
        self.source = AttrSource(module_value.source, "__dict__")

    def python_type(self) -> type:
        return dict

    def _lookup(self, tx, key: Value):
        from kiln.capture.values.builder import wrap

        if not key.is_constant() or not isinstance(key.as_constant(), str):
            unsupported(f"module.__dict__[{key}]")
        k = key.as_constant()
        if tx.output.side_effects.load_attr(self.module_value, k) is not None:
            unsupported(f"module.__dict__[{k!r}] after a store to that attribute in this trace")
        d = self.module_value.module.__dict__
        tx.output.guards.contains(self.source, k, k in d)
        return wrap(tx, d[k], GetItemSource(self.source, k)) if k in d else None

    def getattr(self, tx, name: str) -> Value:
        from kiln.capture.values.base import BoundMethodValue

        if name in ("get", "__getitem__", "__contains__"):
            return BoundMethodValue(self, name)
        unsupported(f"module.__dict__.{name}")

    def getitem(self, tx, key: Value) -> Value:
        return self.call_method(tx, "__getitem__", [key], {})

    def call_method(self, tx, name, args, kwargs) -> Value:
        if name not in ("get", "__getitem__", "__contains__") or not args or kwargs:
            unsupported(f"module.__dict__.{name}()")
        from kiln.capture.values.instance_dicts import answer_read

        return answer_read(name, self._lookup(tx, args[0]), args)


def module_getattr_handler(tx, args, kwargs) -> Value:
    """`nn.Module.__getattr__(self, name)` called (super().__getattr__ in a subclass's own)."""
    from kiln.capture.values.modules import NNModuleValue

    if not args or not isinstance(args[0], NNModuleValue):
        unsupported(f"nn.Module.__getattr__ of {args[0] if args else None}")
    return ModuleGetattr(args[0]).call(tx, list(args[1:]), kwargs)


LIBRARY_HANDLERS = {torch.nn.Module.__getattr__: module_getattr_handler}
