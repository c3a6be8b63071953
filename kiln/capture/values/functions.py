"""User functions and closures (inlined), bound methods, functools.partial."""
from __future__ import annotations

import functools
import types

from kiln.capture.values.base import ConstantValue, Value, unsupported
from kiln.capture.values.containers import TupleValue


class UserFunctionValue(Value):
    """A Python function defined in user code; calls to it are inlined."""

    def truth(self, tx) -> bool:
        return True  # (functions and bound methods define no __bool__ or __len__)

    def __init__(self, fn: types.FunctionType, source=None):
        self.fn = fn
        self.source = source

    def python_type(self) -> type:
        return types.FunctionType

    def get_code(self):
        return self.fn.__code__

    def getattr(self, tx, name: str) -> Value:
        if name in ("__name__", "__qualname__", "__module__", "__doc__"):
            return ConstantValue(getattr(self.fn, name))
        if name == "__code__":
            return ConstantValue(self.fn.__code__)
        if name in getattr(self.fn, "__dict__", {}):
            from kiln.capture.values.builder import wrap
            from kiln.capture.sources import AttrSource

            return wrap(tx, self.fn.__dict__[name], AttrSource(self.source, name) if self.source else None)
        unsupported(f"attribute {name!r} of function {self.fn.__qualname__}")

    def call(self, tx, args, kwargs) -> Value:
        return tx.inline_user_function(self, args, kwargs)

    def reconstruct(self, cg) -> None:
        if self.source is not None:
            self.source.emit(cg)
        else:
            cg.load_const(self.fn)

    def bind_closure(self, tx) -> dict[str, Value]:
        """Values of the function's free variables, read through the closure cells."""
        from kiln.capture.values.builder import wrap
        from kiln.capture.sources import AttrSource, GetItemSource

        cells = {}
        code = self.fn.__code__
        for i, name in enumerate(code.co_freevars):
            cell = self.fn.__closure__[i]
            cell_src = GetItemSource(AttrSource(self.source, "__closure__"), i) if self.source is not None else None

            def read(cell=cell, name=name, cell_src=cell_src) -> Value:
                try:
                    contents = cell.cell_contents
                except ValueError:
                    unsupported(f"free variable {name!r} of {self.fn.__qualname__} is not set yet")
                return wrap(tx, contents, AttrSource(cell_src, "cell_contents") if cell_src is not None else None)

            cells[name] = existing_cell(tx, cell, cell_src, read)
        return cells

    guarded_by_code = False  # True: not guarded by identity (a nested function), see builder.wrap

    def defaults(self, tx) -> tuple[tuple, dict]:
        """The default values, read through ``fn.__defaults__`` / ``fn.__kwdefaults__`` so that they are
        guarded like any other place: a mutable default (a list, a dict, a Counter) is state kept
        between calls (a list appended to on every call), and either attribute may be reassigned. A
        function kiln holds directly (found through a class or another object) is the base of those
        reads. Called only when a call leaves a parameter to its default."""
        from kiln.capture.sources import AttrSource, ConstantSource
        from kiln.capture.values.builder import wrap

        fn = self.fn
        base = self.source if self.source is not None else ConstantSource("function", fn)
        positional: tuple = ()
        if fn.__defaults__ is not None:
            defaults = wrap(tx, fn.__defaults__, AttrSource(base, "__defaults__"))
            if isinstance(defaults, ConstantValue):  # a tuple of literals, guarded by value
                positional = tuple(ConstantValue(v) for v in defaults.value)
            else:
                positional = tuple(defaults.elements)
        keyword: dict = {}
        if fn.__kwdefaults__ is not None:
            keyword = dict(wrap(tx, fn.__kwdefaults__, AttrSource(base, "__kwdefaults__")).entries)
        return positional, keyword

    def __repr__(self) -> str:
        return f"Function({self.fn.__qualname__})"


class CellValue(Value):
    """A closure cell. Cells created during tracing are mutable; cells from the frame are read-only for now."""

    def __init__(self, contents: Value | None, created_here: bool = False, source=None):
        self.contents = contents
        self.created_here = created_here
        self.source = source  # where the cell object itself lives (a function's __closure__[i])

    def reconstruct(self, cg) -> None:
        if self.source is not None:
            self.source.emit(cg)
            return
        if not self.created_here:
            unsupported("handing back a closure cell kiln cannot locate")
        cg.prepare_call(types.CellType)
        if self.contents is not None:
            cg.reconstruct(self.contents)
        cg.call(1 if self.contents is not None else 0)

    def child_values(self) -> list[Value]:
        """What reconstruct rebuilds: the contents of a cell made while tracing (not one from outside)."""
        return [self.contents] if self.source is None and self.contents is not None else []

    def get(self) -> Value:
        if self.contents is None:
            unsupported("reading a free variable before it is assigned")
        return self.contents

    def python_type(self) -> type:
        return types.CellType

    def getattr(self, tx, name: str) -> Value:
        if name == "cell_contents":
            return self.get()
        unsupported(f"attribute {name!r} of a closure cell")

    def set(self, value: Value) -> None:
        if not self.created_here:
            unsupported("assigning to a nonlocal variable of a function outside the compiled one",
                        hint="kiln runs the assignment as Python; return the new value instead, or keep the "
                             "state in an object's attribute")
        self.contents = value


class ExistingCellValue(CellValue):
    """A closure cell that existed before the call, reached through a function's ``__closure__`` (its
    `source`). One value per real cell (existing_cell): a write through one function's closure is
    seen by every other function sharing the cell. Writes are side effects, replayed on the real cell
    (``cell.cell_contents = value``) after the graph."""

    def __init__(self, output, real, source, read):
        super().__init__(None, source=source)
        self.output, self.real, self._read = output, real, read

    def get(self) -> Value:
        if self.contents is None:
            self.contents = self._read()
        return self.contents

    def set(self, value: Value) -> None:
        if self.source is None:
            unsupported("assigning to a nonlocal variable of a function kiln cannot locate",
                        hint="kiln runs the assignment as Python")
        self.contents = value
        self.output.side_effects.store_cell(self, value)


def existing_cell(tx, real: types.CellType, source, read) -> CellValue:
    """The value for closure cell `real` found at `source` (None: not reachable from the frame). The
    same real cell gives the same value (the frame's own free variables included), with a guard that
    the two places still hold one cell; a new one is guarded to stay distinct from the cells seen so
    far (a write through one must not be seen through the other). `read()` wraps its contents."""
    from kiln.capture.guards import GuardKind

    out = tx.output
    found = out.cells_by_id.get(id(real))
    if found is None:
        root = tx.root()
        for i, c in enumerate(getattr(root, "closure", None) or ()):
            if c is real:
                found = (real, root.cells[root.code.co_freevars[i]])
                out.cells_by_id[id(real)] = found
                break
    if found is not None:
        value = found[1]
        if source is not None and value.source is not None and source != value.source:
            out.guards.add(GuardKind.IDENTITY_OF_SOURCE, source, value.source)
        return value
    value = ExistingCellValue(out, real, source, read)
    if source is not None:
        for _, other in out.cells_by_id.values():
            if other.source is not None:
                out.guards.not_same(source, other.source)
    out.cells_by_id[id(real)] = (real, value)
    return value


class NestedFunctionValue(Value):
    """A function created by MAKE_FUNCTION while tracing (nested def, lambda, 3.11 comprehension)."""

    def truth(self, tx) -> bool:
        return True  # (functions and bound methods define no __bool__ or __len__)

    def __init__(self, code: types.CodeType, f_globals: dict, qualname: str, defaults: tuple, kwdefaults: dict,
                 closure: tuple[CellValue, ...] | None, annotations=None):
        self.code = code
        self.f_globals = f_globals
        self.qualname = qualname
        self.default_values = defaults
        self.kwdefault_values = kwdefaults
        self.closure = closure or ()
        self.source = None
        self.attrs: dict[str, Value] = {}  # attributes set while tracing (functools.wraps)
        self.attr_tuples: dict[str, Value] = {}  # what `__closure__` and `__defaults__` gave (one object each)

    def python_type(self) -> type:
        return types.FunctionType

    def get_code(self):
        return self.code

    def set_function_attr(self, name: str, value: Value) -> None:
        self.attrs[name] = value

    def function_attr(self, tx, name: str) -> Value | None:
        """getattr(fn, name) for the attributes functools.wraps copies (None: no such attribute)."""
        if name in self.attrs:
            return self.attrs[name]
        if name == "__doc__":  # what CPython's function constructor takes from the code's constants
            return ConstantValue(types.FunctionType(self.code, {}, None, None,
                                                    tuple(types.CellType() for _ in self.code.co_freevars)).__doc__)
        if name == "__annotations__":
            if self.has_annotations:
                unsupported(f"functools.wraps of {self.qualname}, which has annotations")
            from kiln.capture.values.containers import DictValue

            return DictValue({})
        if name == "__type_params__":
            return ConstantValue(())
        if name == "__dict__":
            return None
        return self.getattr(tx, name)

    has_annotations = False
    annotations = None  # MAKE_FUNCTION's annotations tuple (name, value, ...), set again when rebuilt

    def getattr(self, tx, name: str) -> Value:
        if name in self.attrs:
            return self.attrs[name]
        if name == "__doc__":
            return self.function_attr(tx, name)
        if name in ("__name__", "__qualname__"):
            return ConstantValue(self.code.co_name if name == "__name__" else self.qualname)
        if name == "__module__":
            return ConstantValue(self.f_globals.get("__name__"))
        if name == "__code__":
            return ConstantValue(self.code)
        if name in ("__closure__", "__defaults__"):  # None, else the function's own tuple (the same object)
            items = self.closure if name == "__closure__" else self.default_values
            if not items:
                return ConstantValue(None)
            if name not in self.attr_tuples:
                self.attr_tuples[name] = FunctionTupleValue(self, name, items)
            return self.attr_tuples[name]
        unsupported(f"attribute {name!r} of nested function {self.qualname}")

    def call(self, tx, args, kwargs) -> Value:
        return tx.inline_user_function(self, args, kwargs)

    def bind_closure(self, tx) -> dict[str, Value]:
        return dict(zip(self.code.co_freevars, self.closure))

    def defaults(self, tx):
        return self.default_values, self.kwdefault_values

    def reconstruct(self, cg) -> None:
        """Build the function for real: same code, globals, defaults and (rebuilt) closure cells."""
        from kiln.capture.values.containers import DictValue, TupleValue

        if self.attrs:  # attributes set while tracing (functools.wraps)
            cg.prepare_call(set_function_attrs)
        cg.prepare_call(make_function)
        cg.load_const(self.code)
        cg.load_const(self.f_globals)
        cg.load_const(self.qualname)
        cg.reconstruct(TupleValue(list(self.default_values)))
        cg.reconstruct(DictValue(dict(self.kwdefault_values)))
        for cell in self.closure:
            cg.reconstruct(cell)
        cg.build(tuple, len(self.closure))
        if self.annotations is not None:
            cg.reconstruct(self.annotations)
        cg.call(6 if self.annotations is None else 7)
        if self.attrs:
            cg.reconstruct(DictValue(dict(self.attrs)))
            cg.call(2)

    def child_values(self) -> list[Value]:
        """What reconstruct rebuilds: defaults, closure cells and attributes (a closure over a tensor
        made in the graph needs that tensor as a graph output)."""
        annotations = [self.annotations] if self.annotations is not None else []
        return [*self.default_values, *self.kwdefault_values.values(), *self.closure, *self.attrs.values(),
                *annotations]

    def __repr__(self) -> str:
        return f"NestedFunction({self.qualname})"


class FunctionTupleValue(TupleValue):
    """`fn.__closure__` (its cells) or `fn.__defaults__` of a function made while tracing, and after the graph
    the very tuple the rebuilt function holds (CPython hands out the function's own tuple:
    `f.__closure__ is f.__closure__`)."""

    has_identity = True

    def __init__(self, fn: NestedFunctionValue, attr: str, items):
        super().__init__(list(items))
        self.function, self.attr = fn, attr

    def reconstruct(self, cg) -> None:
        cg.reconstruct(self.function)
        cg.load_attr(self.attr)


def set_cell_contents(cell, value) -> None:
    """The runtime half of rebuilding a closure cell made while tracing (codegen._rebuild_cell)."""
    cell.cell_contents = value


def set_function_attrs(fn, attrs: dict):
    """The runtime half of attributes set while tracing (functools.wraps): set them, return fn."""
    for name, value in attrs.items():
        setattr(fn, name, value)
    return fn


def make_function(code, f_globals, qualname, defaults, kwdefaults, closure, annotations=None):
    """The runtime half of NestedFunctionValue.reconstruct (annotations: MAKE_FUNCTION's name/value tuple)."""
    fn = types.FunctionType(code, f_globals, code.co_name, defaults or None, closure or None)
    fn.__qualname__ = qualname
    if kwdefaults:
        fn.__kwdefaults__ = kwdefaults
    if annotations is not None:
        fn.__annotations__ = dict(zip(annotations[::2], annotations[1::2]))
    return fn


class UserMethodValue(Value):
    """A function bound to a self value."""

    def truth(self, tx) -> bool:
        return True  # (functions and bound methods define no __bool__ or __len__)

    def __init__(self, fn: Value, self_value: Value, source=None):
        self.fn = fn
        self.self_value = self_value
        self.source = source

    def python_type(self) -> type:
        return types.MethodType

    def getattr(self, tx, name: str) -> Value:
        if name == "__self__":
            return self.self_value
        if name == "__func__":
            return self.fn
        return self.fn.getattr(tx, name)

    def call(self, tx, args, kwargs) -> Value:
        return self.fn.call(tx, [self.self_value, *args], kwargs)

    def reconstruct(self, cg) -> None:
        if self.source is not None:
            self.source.emit(cg)
            return
        import types as _types

        cg.prepare_call(_types.MethodType)
        cg.reconstruct(self.fn)
        cg.reconstruct(self.self_value)
        cg.call(2)

    def __repr__(self) -> str:
        return f"Method({self.fn!r} of {self.self_value!r})"


class PartialValue(Value):
    """functools.partial(fn, *args, **kwargs): made while tracing (values/functools_values.py) or read from
    the frame through its func/args/keywords."""

    def __init__(self, fn: Value, args: list[Value], kwargs: dict[str, Value], source=None):
        self.fn, self.args, self.kwargs, self.source = fn, args, kwargs, source

    def child_values(self) -> list[Value]:
        return [self.fn, *self.args, *self.kwargs.values()]

    @property
    def has_identity(self) -> bool:
        return self.source is None  # one object however many places hold it (codegen.reconstruct)

    def reconstruct(self, cg) -> None:
        if self.source is not None:
            self.source.emit(cg)
            return
        from kiln.capture.values.containers import DictValue, TupleValue
        from kiln.capture.values.functools_values import rebuild_partial

        cg.prepare_call(rebuild_partial)
        cg.reconstruct(self.fn)
        cg.reconstruct(TupleValue(list(self.args)))
        cg.reconstruct(DictValue(dict(self.kwargs)))
        cg.call(3)

    def python_type(self) -> type:
        return functools.partial

    def getattr(self, tx, name: str) -> Value:
        from kiln.capture.values.containers import DictValue, TupleValue

        if name == "func":
            return self.fn
        if name == "args":
            return TupleValue(self.args)
        if name == "keywords":
            return DictValue(self.kwargs)
        unsupported(f"functools.partial attribute {name!r}")

    def call(self, tx, args, kwargs) -> Value:
        return self.fn.call(tx, [*self.args, *args], {**self.kwargs, **kwargs})
