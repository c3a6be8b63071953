"""torch.nn modules built inside the traced code: ``nn.CrossEntropyLoss(weight=w)(logits, labels)``.

HF models and training loops often build a loss or a shape module per call. Graph-breaking there cut the
graph in two, and the module (a new object per call) was then guarded by identity in the resumed frame:
a recompile every call. Here the module is built while tracing, for real, from its arguments, and
traced like any other module; what the trace relies on is exactly what its arguments determine:

- the class is one of torch.nn's own (``torch.nn.modules.*``; their ``__init__`` stores settings and
  registers what it is given); a user's subclass still breaks (its ``__init__`` is user code);
- arguments are constants (guarded as usual; a size computed from a symbolic size is specialized) or
  tensors. A tensor argument is handed to ``__init__`` as a stand-in that refuses every use but being
  stored: a constructor that reads it (its shape, its values) is refused, since the module's settings
  would then depend on data the trace does not guard;
- the built module holds no parameters or submodules and no tensors but the stand-ins (so building it
  drew no random numbers and copied nothing). Its attributes read as the constants they are; a buffer
  that is a stand-in reads as the tensor argument it stands for;
- it is not changed while tracing (a store to it is refused: graph break).

Where the module outlives the graph (returned, stored, live at a graph break), the transformed code
builds it again after the graph with the same arguments (``cls(*args, **kwargs)``): an equal new object,
as the original code made one.
"""
from __future__ import annotations

import torch

from kiln.capture.values.base import Value, unsupported
from kiln.capture.values.modules import NNModuleValue


def is_torch_module_class(cls) -> bool:
    return isinstance(cls, type) and issubclass(cls, torch.nn.Module) and \
        cls.__module__.startswith("torch.nn.modules.")


class _StandInUsed(Exception):
    pass


class _StandIn(torch.Tensor):
    """What ``__init__`` gets for a tensor argument: storable, but any use of it raises."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        raise _StandInUsed(getattr(func, "__name__", str(func)))


def construct_torch_module(tx, cls: type, args: list[Value], kwargs: dict[str, Value]) -> Value:
    """``cls(*args, **kwargs)`` for a torch.nn module class (see the module docstring), or a refusal."""
    from kiln.capture.values.tensors import TensorValue

    name = f"nn.{cls.__name__}"
    stand_ins: dict[int, TensorValue] = {}

    def real(value: Value):
        if isinstance(value, TensorValue):
            stand_in = torch.Tensor._make_subclass(_StandIn, torch.empty(0, device="meta"))
            stand_ins[id(stand_in)] = value
            return stand_in
        if not value.is_constant():
            unsupported(f"building {name} from {value} inside the compiled code",
                        hint="build the module once outside the compiled function, or pass constants and tensors")
        return value.as_constant()

    real_args = [real(a) for a in args]
    real_kwargs = {k: real(v) for k, v in kwargs.items()}
    rng = torch.random.get_rng_state()
    try:
        with torch.device("meta"):  # (a module that made tensors is refused below: none reach real memory)
            module = cls(*real_args, **real_kwargs)
    except _StandInUsed as exc:
        unsupported(f"building {name}: its __init__ uses a tensor argument ({exc}), not only stores it",
                    hint="build the module once outside the compiled function")
    except Exception as exc:  # the user's error (bad arguments): Python raises it when the code runs
        unsupported(f"building {name} raised {type(exc).__name__}: {exc}")
    finally:
        torch.random.set_rng_state(rng)
    _check_built(module, name, stand_ins)
    tensors = {k: stand_ins[id(t)] for k, t in module._buffers.items() if t is not None}
    tensors.update((k, stand_ins[id(t)]) for k, t in vars(module).items() if isinstance(t, torch.Tensor))
    return ConstructedModuleValue(module, cls, args, kwargs, tensors)


def _check_built(module: torch.nn.Module, name: str, stand_ins: dict) -> None:
    if module._parameters or module._modules:
        unsupported(f"building {name} inside the compiled code: it makes parameters or submodules",
                    hint="build the module once outside the compiled function (its weights are drawn at random)")
    for key, value in list(module._buffers.items()) + list(vars(module).items()):
        if isinstance(value, torch.Tensor) and id(value) not in stand_ins:
            unsupported(f"building {name} inside the compiled code: it makes a tensor ({key})",
                        hint="build the module once outside the compiled function")


class ConstructedModuleValue(NNModuleValue):
    """A torch.nn module built while tracing (module docstring): no source, no guards on the object."""

    has_identity = True  # one object, however many places hold it (capture/codegen.py)

    def __init__(self, module, cls, args, kwargs, tensors: dict[str, Value]):
        super().__init__(module, None, f"<new {cls.__name__}>")
        self.cls = cls
        self.args = list(args)
        self.kwargs = dict(kwargs)
        self.tensors = tensors  # attribute (a buffer, or in the instance dict) -> the tensor argument it is

    def getattr(self, tx, name: str) -> Value:
        if name in self.tensors:
            return self.tensors[name]
        if name in ("_buffers", "__dict__", "state_dict", "named_buffers", "buffers", "_apply", "to"):
            unsupported(f"{name!r} of a {self.cls.__name__} built in the compiled code")
        return super().getattr(tx, name)

    def child_values(self) -> list[Value]:
        return self.args + list(self.kwargs.values())

    def reconstruct(self, cg) -> None:
        """Built again after the graph, from the same arguments."""
        names = tuple(self.kwargs)
        cg.prepare_call(build_module)
        cg.load_const(self.cls)
        cg.load_const(names)
        for value in self.args + [self.kwargs[k] for k in names]:
            cg.reconstruct(value)
        cg.call(2 + len(self.args) + len(names))

    def __repr__(self) -> str:
        return f"ConstructedModule({self.cls.__name__})"


def build_module(cls, names, *values):
    """``cls(*positional, **dict(zip(names, keyword values)))``: the transformed code's module build."""
    positional = len(values) - len(names)
    return cls(*values[:positional], **dict(zip(names, values[positional:])))
