"""The symbolic bytecode interpreter: walks a frame's instructions over symbolic values.

A `Tracer` runs one code object: the frame kiln was offered (`RootTracer`) or a function it inlines
(`InliningTracer`). Tensor work is recorded into the shared `OutputGraph`; Python values are computed
at trace time; anything else raises `Unsupported`, and the frame then runs eagerly.
Opcode handlers live in `opcodes/`, grouped by family, as methods named after the opcode.
"""
from __future__ import annotations

import builtins
import dataclasses
import inspect
import os
import sys
import types
from typing import Any

import torch

from kiln.capture.class_guards import note_name
from kiln.capture.bytecode import decode
from kiln.capture.opcodes import OPCODE_HANDLERS
from kiln.capture.output_graph import OutputGraph
from kiln.capture.skipfiles import is_inlinable
from kiln.capture.sources import BuiltinSource, ClosureSource, GlobalSource, LocalSource
from kiln.capture.values.base import NULL, ConstantValue, Value, unsupported
from kiln.capture.values.builder import wrap
from kiln.capture.values.exceptions import TracedRaise
from kiln.capture.values.functions import CellValue, NestedFunctionValue, UserFunctionValue
from kiln.errors import Unsupported

_DECODED: dict[types.CodeType, list] = {}
_INDEXES: dict[types.CodeType, tuple] = {}  # code -> (its decoded instructions, {id(instruction): index})


def instructions_of(code: types.CodeType) -> list:
    found = _DECODED.get(code)
    if found is None:
        found = _DECODED[code] = decode(code)
    return found


class BreakSignal(Exception):
    """Tracing of the root frame stops before the instruction at `index` (a graph break)."""

    def __init__(self, index: int):
        self.index = index


class ReturnSignal(Exception):
    def __init__(self, value: Value):
        self.value = value


class Tracer:
    def __init__(self, code: types.CodeType, f_globals: dict, f_builtins: dict, output: OutputGraph,
                 parent: "Tracer | None", options, function_name: str):
        self.code = code
        self.f_globals = f_globals
        self.f_builtins = f_builtins if isinstance(f_builtins, dict) else vars(f_builtins)
        self.output = output
        self.parent = parent
        self.options = options
        self.function_name = function_name
        self.instructions = instructions_of(code)
        indexed = _INDEXES.get(code)  # (made once per decoded instruction list)
        if indexed is None or indexed[0] is not self.instructions:
            indexed = _INDEXES[code] = (self.instructions, {id(inst): i for i, inst in enumerate(self.instructions)})
        self.index_of = indexed[1]
        self.stack: list[Value] = []
        self.locals: dict[str, Value] = {}
        self.cells: dict[str, CellValue] = {}
        self.ip = 0
        self.current = None
        self.kw_names: tuple[str, ...] = ()
        self.active_withs: list = []
        # BEFORE_WITH indexes of open @contextmanager and inference-mode blocks (a break inside moves there)
        self.open_generator_withs: list[int] = []
        self.handled_exceptions: list = []  # exceptions of the except blocks running (innermost last)
        # root frame: id(exception value) -> index of the root instruction that raised it, for exceptions
        # this frame's own handlers caught (see unwind)
        self.caught_at: dict[int, int] = {}
        self.depth = 0 if parent is None else parent.depth + 1
        self.lineno = code.co_firstlineno

    # ---- the loop ----------------------------------------------------------------------------

    break_at: int | None = None

    def run(self) -> Value:
        try:
            while True:
                if self.ip == self.break_at:
                    raise BreakSignal(self.ip)
                inst = self.instructions[self.ip]
                self.current = inst
                lineno = inst.lineno
                if lineno is not None:
                    self.lineno = lineno
                self.ip += 1
                # Instructions inside try/with blocks run as usual. An exception raised by traced code
                # (TracedRaise) jumps to its handler in an inlined frame (unwind); in the root frame,
                # and for anything else kiln cannot trace, the graph breaks or the frame runs eagerly.
                handler = OPCODE_HANDLERS.get(inst.opname)
                if handler is None:
                    unsupported(f"Python bytecode {inst.opname} is not supported yet")
                self.output.user_tx = self
                try:
                    handler(self, inst)
                except TracedRaise as exc:
                    if not self.unwind(exc, inst):
                        raise
        except ReturnSignal as ret:
            return ret.value
        except Unsupported as exc:
            if self.parent is None and getattr(exc, "whole_frame", False):
                exc.root_index = -1  # (_try_break: no break; the frame runs as Python)
            if self.parent is None and getattr(exc, "root_index", None) is None:
                exc.root_index = self.break_index_for(exc)
                if self.open_generator_withs:  # a half-run @contextmanager generator cannot be handed
                    exc.root_index = min(exc.root_index, self.open_generator_withs[0])  # on: break at its `with`
            raise exc.locate(self.code.co_filename, self.lineno)
        finally:
            if self.parent is None:
                self.output.user_tx = None  # no cycle tracer <-> output keeps the frame's objects alive

    def unwind(self, exc: TracedRaise, inst) -> bool:
        """Jump to the handler covering `inst` in this frame, as CPython does; False if none (the
        exception leaves the frame). The root frame remembers where it caught each exception: if one
        leaves it after all, the graph breaks before that instruction (break_index_for)."""
        entry = inst.exn_tab_entry
        if entry is None:
            return False
        if self.parent is None:
            self.caught_at.setdefault(id(exc.exc_value), self.ip - 1)
        if any(getattr(v, "loop_only", False) for v in self.stack[entry.depth:]):
            from kiln.capture.values.lazy_generators import drop_loop_iterators

            drop_loop_iterators(self, self.stack[entry.depth:][::-1])  # (closed as CPython pops them)
        del self.stack[entry.depth:]
        if entry.lasti:
            self.push(ConstantValue(inst.offset))
        self.push(exc.exc_value)
        self.ip = self.index_of[id(entry.target)]
        return True

    def break_index_for(self, exc: Unsupported) -> int:
        """The root instruction to break the graph before. Usually the one that was running; but when a
        traced exception leaves the frame after one of its handlers caught it (a bare `raise`, no
        matching except clause, a new exception raised in the handler), the instruction that first
        raised the exception handled outermost: a break inside a handler cannot carry the handler's
        state, so the whole try statement from there runs as Python and resumes as it would."""
        exc_value = getattr(exc, "exc_value", None)
        if exc_value is not None and id(exc_value) in self.caught_at:
            return self.caught_at[id(exc_value)]
        for handled in self.handled_exceptions:
            if id(handled) in self.caught_at:
                return self.caught_at[id(handled)]
        return self.ip - 1

    def user_stack(self) -> list[tuple[str, int, str]]:
        frames = []
        tx = self
        while tx is not None:
            frames.append((tx.code.co_filename, tx.lineno, tx.function_name))
            tx = tx.parent
        return frames[::-1]

    def jump(self, inst) -> None:
        self.ip = self.index_of[id(inst.target)]

    # ---- stack helpers -----------------------------------------------------------------------

    def push(self, v: Value) -> None:
        self.stack.append(v)

    def pop(self) -> Value:
        return self.stack.pop()

    def popn(self, n: int) -> list[Value]:
        if n == 0:
            return []
        out = self.stack[-n:]
        del self.stack[-n:]
        return out

    # ---- semantics shared by handlers ------------------------------------------------------

    def read_local(self, name: str) -> Value:
        return self.locals[name]

    def truth(self, v: Value) -> bool:
        return v.truth(self)

    def items(self, v: Value) -> list[Value]:
        from kiln.capture.values.iterators import user_iterator

        it = user_iterator(self, v)  # an object with a Python __iter__ (maybe its own iterator)
        return v.items(self) if it is None else it.items(self)

    def getattr(self, obj: Value, name: str) -> Value:
        note_name(name)  # (where it is found along a class's MRO, or that it is not, is guarded: class_guards.py)
        return obj.getattr(self, name)

    def setattr(self, obj: Value, name: str, value: Value) -> None:
        from kiln.capture.values.objects import NewObjectValue

        from kiln.capture.values.modules import NNModuleValue
        from kiln.capture.values.objects import UserObjectValue

        if isinstance(obj, NewObjectValue):
            from kiln.capture.values.objects import class_attribute

            if _python_setattr(obj.cls):  # e.g. ModelOutput.__setattr__: runs as written
                class_attribute(self, obj.cls, "__setattr__", obj).call(self, [ConstantValue(name), value], {})
                return
            obj.setattr(self, name, value)
            return
        from kiln.capture.values.namedtuples import NamedTupleValue
        from kiln.capture.values.exceptions import ExceptionValue

        if isinstance(obj, ExceptionValue):  # made while tracing: its attributes are all known
            obj.setattr(self, name, value)
            return
        if isinstance(obj, NamedTupleValue):  # a namedtuple subclass's instance dict
            if _python_setattr(obj.tuple_type):
                unsupported(f"assigning attribute {name!r} of a {obj.tuple_type.__name__}, which defines __setattr__")
            obj.setattr(self, name, value)
            return
        if isinstance(obj, (UserObjectValue, NNModuleValue)) and obj.source is not None:
            if isinstance(obj, UserObjectValue) and _python_setattr(type(obj.obj)):
                # a Python __setattr__ runs as written; object.__setattr__ reached from it is a recorded store
                from kiln.capture.values.objects import class_attribute

                class_attribute(self, type(obj.obj), "__setattr__", obj).call(self, [ConstantValue(name), value], {})
                return
            from kiln.capture.values.objects import has_generic_setattr, set_through_descriptor

            if isinstance(obj, UserObjectValue) and has_generic_setattr(type(obj.obj)) and \
                    set_through_descriptor(self, type(obj.obj), name, obj, value):
                return  # a property's Python setter ran
            if isinstance(obj, UserObjectValue) and not has_generic_setattr(type(obj.obj)):
                unsupported(f"assigning attribute {name!r} of a {type(obj.obj).__name__}, which defines __setattr__")
            if isinstance(obj, NNModuleValue):
                _check_module_setattr(self, obj, name, value)
            if isinstance(obj, UserObjectValue) and type(obj.obj).__dictoffset__ == 0:
                # no instance dict (__slots__) and no slot or settable descriptor of that name: eager's
                # AttributeError, raised here where the program can catch it (the store was replayed after)
                from kiln.capture.values.exceptions import raise_attribute_error

                raise_attribute_error(type(obj.obj), name)
            self.output.side_effects.store_attr(obj, name, value)
            return
        from kiln.capture.values.objects import ClassValue
        from kiln.capture.values.tensors import TensorValue

        if isinstance(obj, TensorValue) and name == "data":
            from kiln.capture.values.tensor_data_store import store_data

            store_data(self, obj, value)  # recorded, or a break (values/tensor_data_store.py)
            return
        if isinstance(obj, TensorValue) and name == "grad":
            from kiln.capture.values.tensor_grad import store_grad

            store_grad(self, obj, value)
            return
        if isinstance(obj, ClassValue):
            from kiln.capture.values.class_stores import store_class_attribute

            store_class_attribute(self, obj, name, value)  # recorded, or a break (values/class_stores.py)
            return
        unsupported(f"assigning attribute {name!r} of {obj}",
                    hint="attribute writes to objects that exist outside the compiled function "
                         "are supported in a later kiln version")

    def call(self, fn: Value, args: list[Value], kwargs: dict[str, Value]) -> Value:
        return fn.call(self, args, kwargs)

    def load_global(self, name: str) -> Value:
        if self.f_globals is self.root().f_globals:
            pending = self.output.side_effects.load_global(name)
            if pending is not None:
                return pending
        if name in self.f_globals:
            return wrap(self, self.f_globals[name], self.global_source(name))
        if name in self.f_builtins:
            return wrap(self, self.f_builtins[name], BuiltinSource(name) if self.parent is None and
                        self.f_globals is self.root().f_globals else None)
        unsupported(f"name {name!r} is not defined")

    def global_source(self, name: str):
        from kiln.capture.sources import ConstantSource

        if self.f_globals is self.root().f_globals:
            return GlobalSource(name)
        # globals of another module, reached through an inlined function: read (and guarded)
        # through that module's globals dict, which kiln holds
        from kiln.capture.sources import GetItemSource

        return GetItemSource(ConstantSource(f"{self.f_globals.get('__name__')}.globals", self.f_globals), name)

    def root(self) -> "Tracer":
        tx = self
        while tx.parent is not None:
            tx = tx.parent
        return tx

    def make_super(self, args: list[Value]) -> Value:
        from kiln.capture.values.super_values import SuperValue

        if args:
            cls, obj = args
            return SuperValue(cls.as_constant(), obj)
        if "__class__" not in self.cells or not self.code.co_varnames:
            unsupported("super() without arguments outside a method")
        cls_value = self.cells["__class__"].get()
        first = self.code.co_varnames[0]
        self_value = self.read_local(first) if first in self.locals else None
        if self_value is None and first in self.cells:
            self_value = self.cells[first].get()
        return SuperValue(cls_value.as_constant(), self_value)

    # ---- inlining ------------------------------------------------------------------------------

    def inline_user_function(self, fn_value, args: list[Value], kwargs: dict[str, Value]) -> Value:
        code = fn_value.get_code()
        if isinstance(fn_value, UserFunctionValue):
            fn = fn_value.fn
            from kiln.capture.values.contexts import DECORATE_CONTEXT_CODE, call_grad_mode_decorated

            if code is DECORATE_CONTEXT_CODE:  # a function decorated with @torch.no_grad()
                return call_grad_mode_decorated(self, fn_value, args, kwargs)
            if not is_inlinable(code):
                return _call_library_function(self, fn_value, args, kwargs)
            if not fn_value.guarded_by_code:
                # the body inlined is the one the function still has: fn.__code__ can be replaced in place
                # (IPython's autoreload does); one guard checks every such function (a nested function
                # is guarded by its code already: builder.py)
                self.output.guards.note_function_code(fn)
            f_globals = fn.__globals__
            name = fn.__qualname__
        else:
            f_globals = fn_value.f_globals
            name = fn_value.qualname
        if code.co_flags & 0x20 and code.co_name == "<genexpr>" and not code.co_flags & (0x80 | 0x100 | 0x200):
            # a generator expression: run lazily, one item per next() (values/iterators.py)
            child = GeneratorTracer(code, f_globals, self.f_builtins, self.output, self, self.options, name)
            child.bind_arguments(fn_value, args, kwargs)
            from kiln.capture.values.generator_expressions import GeneratorExpressionValue

            return GeneratorExpressionValue(child, fn_value, args)
        if code.co_flags & 0x20 and not code.co_flags & (0x80 | 0x100 | 0x200):
            return self._run_generator_function(code, f_globals, name, fn_value, args, kwargs)
        if code.co_flags & (0x80 | 0x100 | 0x200):
            unsupported(f"calling coroutine function {name}")
        if self.depth >= self.options.inline_depth:
            unsupported(f"inlining deeper than {self.options.inline_depth} calls (at {name})")
        child = InliningTracer(code, f_globals, self.f_builtins, self.output, self, self.options, name)
        child.bind_arguments(fn_value, args, kwargs)
        return child.run()

    def _run_generator_function(self, code, f_globals, name, fn_value, args, kwargs) -> Value:
        """A user generator function: a generator object whose body is traced one step at a time, when its
        consumer asks for an item (values/lazy_generators.py), as CPython runs it."""
        if self.depth >= self.options.inline_depth:
            unsupported(f"inlining deeper than {self.options.inline_depth} calls (at {name})")
        from kiln.capture.values.lazy_generators import SteppedGeneratorValue, refuse_if_called_as_python

        refuse_if_called_as_python(code, name)
        child = GeneratorTracer(code, f_globals, self.f_builtins, self.output, self, self.options, name)
        child.bind_arguments(fn_value, args, kwargs)
        return SteppedGeneratorValue(child, fn_value, args, kwargs)


def _check_module_setattr(tx, module, name: str, value: Value) -> None:
    """nn.Module.__setattr__'s TypeError for a plain tensor assigned to a parameter's name, raised here where
    the program can catch it (the store itself is replayed after the graph, past its try/except)."""
    from kiln.capture.values.tensors import TensorValue

    if not isinstance(value, TensorValue) or issubclass(value.tensor_type, torch.nn.Parameter):
        return
    if name not in module.module.__dict__.get("_parameters", {}) or \
            tx.output.side_effects.load_attr(module, name) is not None:
        return  # (not a parameter, or a store in this trace changed what the name is)
    t = value.example
    typename = torch.typename(torch.empty(0, dtype=t.dtype))
    if t.device.type != "cpu":
        typename = typename.replace("torch.", f"torch.{t.device.type}.", 1)
    from kiln.capture.values.exceptions import raise_traced

    raise_traced(TypeError, f"cannot assign '{typename}' as parameter '{name}' (torch.nn.Parameter or None expected)")


def _python_setattr(cls: type) -> bool:
    """cls (or a base before object) defines __setattr__ in Python."""
    for klass in cls.__mro__:
        if "__setattr__" in vars(klass):
            return isinstance(vars(klass)["__setattr__"], types.FunctionType)
    return False


class InliningTracer(Tracer):
    def bind_arguments(self, fn_value, args: list[Value], kwargs: dict[str, Value]) -> None:
        code = self.code
        nargs = code.co_argcount
        nkw = code.co_kwonlyargcount
        names = code.co_varnames
        flags = code.co_flags
        bound: dict[str, Value] = {}
        positional = list(args)
        for i, name in enumerate(names[:nargs]):
            if i < len(positional):
                bound[name] = positional[i]
        extra = positional[nargs:]
        if extra and not flags & 0x04:
            unsupported(f"{self.function_name}() takes {nargs} positional arguments but {len(args)} were given")
        kwargs = dict(kwargs)
        posonly = code.co_posonlyargcount
        for name in names[posonly:nargs + nkw]:
            if name in kwargs:
                if name in bound:
                    unsupported(f"{self.function_name}() got multiple values for argument {name!r}")
                bound[name] = kwargs.pop(name)
        unbound = [name for name in names[:nargs + nkw] if name not in bound]
        defaults, kwdefaults = fn_value.defaults(self) if unbound else ((), {})  # (read, and guarded, when used)
        n_defaults = len(defaults)
        for i, name in enumerate(names[:nargs]):
            if name not in bound:
                j = i - (nargs - n_defaults)
                if j < 0:
                    unsupported(f"{self.function_name}() missing required argument {name!r}")
                bound[name] = _default_value(self, defaults[j])
        for name in names[nargs:nargs + nkw]:
            if name not in bound:
                if name not in kwdefaults:
                    unsupported(f"{self.function_name}() missing keyword-only argument {name!r}")
                bound[name] = _default_value(self, kwdefaults[name])
        index = nargs + nkw
        from kiln.capture.values.containers import DictValue, TupleValue

        if flags & 0x04:
            bound[names[index]] = TupleValue(extra)
            index += 1
        if flags & 0x08:
            bound[names[index]] = DictValue(kwargs)
            kwargs = {}
        if kwargs:
            unsupported(f"{self.function_name}() got unexpected keyword arguments {sorted(kwargs)}")
        self.locals = bound
        self.cells.update(fn_value.bind_closure(self))


class GeneratorTracer(InliningTracer):
    """The tracer of a generator expression's or generator function's body. Its owner (a
    GeneratorExpressionValue, SteppedGeneratorValue or @contextmanager's SteppedGenerator) replaces
    `add_yielded`, which stops the trace at each `yield` until the consumer resumes it."""

    def add_yielded(self, value: Value) -> None:
        raise NotImplementedError("set by the generator value that owns this tracer")


def _default_value(tx, value) -> Value:
    if isinstance(value, Value):
        return value
    from kiln.capture.sources import ConstantSource

    return wrap(tx, value, ConstantSource("default", value))


def _call_library_function(tx, fn_value, args, kwargs) -> Value:
    """A function from a skipped file (stdlib, torch internals) that is not a torch op."""
    from kiln.capture.values.builtins import PURE_CONSTANT_FUNCTIONS

    from kiln.capture.values.stdlib import LIBRARY_CALLS  # functools.wraps, ... (values/stdlib.py)

    fn = fn_value.fn
    special = LIBRARY_CALLS.get(fn)
    if special is not None:
        return special(tx, args, kwargs)
    from kiln.capture.values.collectives import functional_collective_handler  # graph ops with their wait

    special = functional_collective_handler(fn)
    if special is not None:
        return special(tx, args, kwargs)
    from kiln.capture.values.stdlib import LIBRARY_CODES  # @contextlib.contextmanager's helper

    special = LIBRARY_CODES.get(fn.__code__)
    if special is not None:
        return special(tx, fn_value, args, kwargs)
    from kiln.capture.values.modules import NNModuleValue

    if fn in _MODULE_CALLS and args and isinstance(args[0], NNModuleValue):  # super().__call__(...)
        return args[0].call_module(tx, list(args[1:]), dict(kwargs))
    if fn in _DATACLASS_QUERIES and len(args) == 1 and not kwargs:
        return _dataclass_query(tx, fn, args[0])
    if fn is os._Environ.__getitem__ and len(args) == 2 and not kwargs:
        return _environ_item(tx, *args)
    from kiln.capture.values.copying import call_copy, is_copy_function

    if is_copy_function(fn):
        return call_copy(tx, fn, list(args), dict(kwargs))
    if fn is inspect.signature and len(args) == 1 and not kwargs:
        real = _real_callable(args[0])
        if real is not None:
            return SignatureValue(inspect.signature(real), args[0])
    if all(a.is_constant() for a in args) and all(v.is_constant() for v in kwargs.values()) and \
            fn.__module__ in ("math", "operator", "functools", "typing", "copy", "numbers", "inspect", "enum") + \
            ("torch.nn.modules.utils", "torch.nn.common_types", "torch.overrides", "torch._jit_internal"):
        from kiln.capture.values.builder import wrap_constant_result

        try:
            result = fn(*[a.as_constant() for a in args], **{k: v.as_constant() for k, v in kwargs.items()})
        except Exception as exc:
            unsupported(f"{fn.__qualname__}(...) raised {type(exc).__name__}: {exc}")
        return wrap_constant_result(result)
    wrapped = getattr(fn, "__wrapped__", None)
    if fn.__code__.co_name == "generator_context" and wrapped is not None:  # torch.utils._contextlib
        unsupported(f"generator function {wrapped.__qualname__} decorated with a context manager such as "
                    f"@torch.no_grad(): torch wraps it in a generator of its own (torch/utils/_contextlib.py), "
                    f"which kiln does not trace into",
                    hint="use `with torch.no_grad():` inside the generator instead of the decorator")
    unsupported(f"call to {fn.__module__}.{fn.__qualname__}, which kiln does not trace into",
                hint="kiln does not trace into the standard library or torch internals")


def _environ_item(tx, env: Value, key: Value) -> Value:
    """os.environ[key] (Mapping.get and `in` reach it): the variable's value, or a KeyError, guarded."""
    from kiln.capture.sources import GetItemSource
    from kiln.capture.values.exceptions import ExceptionValue, TracedRaise
    from kiln.capture.values.objects import UserObjectValue

    if not isinstance(env, UserObjectValue) or env.obj is not os.environ or env.source is None or \
            not key.is_constant() or not isinstance(key.as_constant(), str):
        unsupported("os.environ item read kiln cannot guard")
    name = key.as_constant()
    present = name in os.environ
    tx.output.guards.contains(env.source, name, present)
    if not present:
        raise TracedRaise(ExceptionValue(KeyError, [key]), repr(name))
    source = GetItemSource(env.source, name)
    tx.output.guards.constant(source, os.environ[name])
    return ConstantValue(os.environ[name], source)


_DATACLASS_QUERIES = {dataclasses.fields, dataclasses.is_dataclass}
_MODULE_CALLS = {torch.nn.Module.__call__, torch.nn.Module._call_impl}  # (__call__ is _wrapped_call_impl)


def _dataclass_query(tx, fn, arg: Value) -> Value:
    """dataclasses.fields(x) / is_dataclass(x) of an object (or class) whose class is known while tracing:
    answered from the class (guarded by type where the object comes from the frame)."""
    from kiln.capture.sources import ConstantSource
    from kiln.capture.values.containers import TupleValue
    from kiln.capture.values.objects import ClassValue

    cls = arg.cls if isinstance(arg, ClassValue) else arg.python_type()
    if fn is dataclasses.is_dataclass:
        return ConstantValue(dataclasses.is_dataclass(cls))
    if not dataclasses.is_dataclass(cls):
        unsupported(f"dataclasses.fields() of {cls.__name__}, which is not a dataclass")
    return TupleValue([wrap(tx, f, ConstantSource(f"{cls.__qualname__}.fields[{i}]", f))
                       for i, f in enumerate(dataclasses.fields(cls))])


def _real_callable(value: Value):
    """The Python function (or bound method) a value stands for, if kiln knows it exactly."""
    from kiln.capture.values.functions import UserMethodValue
    from kiln.capture.values.modules import NNModuleValue

    if isinstance(value, UserFunctionValue):
        return value.fn
    if isinstance(value, UserMethodValue) and isinstance(value.fn, UserFunctionValue):
        owner = value.self_value
        obj = owner.module if isinstance(owner, NNModuleValue) else getattr(owner, "obj", None)
        if obj is not None:
            return types.MethodType(value.fn.fn, obj)
    return None


class SignatureValue(Value):
    """inspect.signature(fn) of a function kiln knows: its parameters are constants of the trace."""

    def __init__(self, signature: inspect.Signature, fn: Value):
        self.signature, self.fn = signature, fn

    def getattr(self, tx, name: str) -> Value:
        if name == "parameters":  # names: len(), `in`, iteration (values/signatures.py)
            from kiln.capture.values.signatures import SignatureParametersValue

            return SignatureParametersValue(self.fn, tuple(self.signature.parameters))
        unsupported(f"inspect.Signature.{name}")


class RootTracer(Tracer):
    """Traces the frame the hook offered: its arguments come from the real frame."""

    def __init__(self, code, f_locals: dict, f_globals, f_builtins, closure, options, break_at: int | None = None,
                 dynamic=None):
        output = OutputGraph(code.co_name)
        output.dynamic = dynamic  # which input dims are traced as symbols (capture/dynamic.py)
        self.break_at = break_at
        super().__init__(code, f_globals, f_builtins, output, None, options, code.co_qualname)
        self.frame_locals = f_locals
        self.closure = closure
        for name in code.co_varnames[:_arg_count(code)]:
            if name in f_locals:
                self.locals[name] = _LazyLocal(name)
        for i, name in enumerate(code.co_freevars):
            self.cells[name] = _LazyCell(self, i, name)

    def run(self) -> Value:
        from kiln.capture.class_guards import recording

        with recording(self.output.guards):  # (the classes read through are guarded: class_guards.py)
            result = super().run()
            from kiln.capture.values.lazy_generators import close_at_frame_end

            self.output.user_tx = self  # (the frame is current again while its locals are cleared)
            try:
                close_at_frame_end(self, result)
            finally:
                self.output.user_tx = None
            return result

    def read_local(self, name: str) -> Value:
        v = self.locals.get(name)
        if isinstance(v, _LazyLocal):
            v = wrap(self, self.frame_locals[name], LocalSource(name))
            self.locals[name] = v
        return v


def _arg_count(code) -> int:
    n = code.co_argcount + code.co_kwonlyargcount
    if code.co_flags & 0x04:
        n += 1
    if code.co_flags & 0x08:
        n += 1
    return n


class _LazyLocal(Value):
    """An argument of the root frame not read yet (wrapping it would add guards and inputs)."""

    def __init__(self, name: str):
        self.name = name

    def reconstruct(self, cg) -> None:
        cg.load_fast(self.name)  # untouched: still in the frame's own argument


class _LazyCell(CellValue):
    """A closure cell of the frame's function (free variable `name`); functions inlined whose closures
    hold the same cell share this value (values/functions.py: existing_cell)."""

    def __init__(self, tx: RootTracer, index: int, name: str):
        from kiln.capture.sources import ClosureCellSource

        super().__init__(None, source=ClosureCellSource(index, name))
        self.tx, self.index, self.name = tx, index, name
        self.var_name = name  # a write is replayed as STORE_DEREF of this name (codegen._apply)
        self.real = tx.closure[index]

    def reconstruct(self, cg) -> None:
        from kiln.capture import bytecode as bc

        cg.extend(bc.load_closure(self.name))  # the frame's own cell (the transformed code keeps free vars)

    def set(self, value: Value) -> None:
        self.contents = value
        self.tx.output.side_effects.store_cell(self, value)

    def get(self) -> Value:
        if self.contents is None:
            cell = self.tx.closure[self.index]
            try:
                value = cell.cell_contents
            except ValueError:
                unsupported(f"free variable {self.name!r} is not set yet")
            self.contents = wrap(self.tx, value, ClosureSource(self.index, self.name))
        return self.contents
