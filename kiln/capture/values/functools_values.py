"""functools inside compiled code: reduce, partial, wraps/update_wrapper, lru_cache/cache, cmp_to_key.

- `functools.reduce(fn, iterable[, initial])`: the iterable is materialized and `fn` called on each
  item in order, exactly as the C loop does (an empty iterable without initial raises TypeError).
- `functools.partial(fn, *args, **kw)` made while tracing is a `PartialValue` (partials of exactly
  functools.partial are flattened as CPython does); calling it calls `fn` with the merged arguments;
  handed back it is rebuilt with functools.partial. One from the frame is read through `func`,
  `args` and `keywords` (its type guarded).
- `functools.wraps(f)` / `update_wrapper(wrapper, f)` on a function made while tracing copy the
  attributes (`__module__`, `__name__`, `__qualname__`, `__doc__`, `__dict__` items, `__wrapped__`)
  onto the symbolic function; rebuilt after the graph, it gets them again.
- `lru_cache`/`cache` functions: see `LruCacheFunctionValue`.
- `cmp_to_key(cmp)` as a sort key: Python's own sort runs over key objects whose comparisons trace
  `cmp`, so the comparisons happen in eager's order.
"""
from __future__ import annotations

import functools
import types

from kiln.capture.values.base import ConstantValue, Value, is_constant_literal, unsupported


# ---- reduce ---------------------------------------------------------------------------------------

def reduce_handler(tx, fn, iterable, *rest, **kwargs):
    if kwargs or len(rest) > 1:
        unsupported("functools.reduce() takes no keyword arguments and at most 3 arguments")
    items = list(tx.items(iterable))
    if rest:
        acc = rest[0]
    elif items:
        acc = items.pop(0)
    else:
        from kiln.capture.values.exceptions import raise_traced

        raise_traced(TypeError, "reduce() of empty iterable with no initial value")
    for item in items:
        acc = fn.call(tx, [acc, item], {})
    return acc


# ---- partial --------------------------------------------------------------------------------------

def make_partial(tx, args, kwargs) -> Value:
    """functools.partial(fn, *args, **kwargs) called while tracing."""
    from kiln.capture.values.functions import PartialValue

    if not args:
        unsupported("functools.partial() without a function", hint="CPython raises TypeError")
    fn, bound = args[0], list(args[1:])
    if isinstance(fn, PartialValue):  # CPython flattens partial(partial(f, a), b) into partial(f, a, b)
        return PartialValue(fn.fn, [*fn.args, *bound], {**fn.kwargs, **kwargs})
    if not _callable(tx, fn):
        unsupported(f"functools.partial() of {fn}, which is not callable", hint="CPython raises TypeError")
    return PartialValue(fn, bound, dict(kwargs))


def _callable(tx, fn) -> bool:
    from kiln.capture.values.builtins import BuiltinValue

    try:
        return BuiltinValue(callable).call(tx, [fn], {}).as_constant()
    except Exception:
        return True  # unknown: the call itself will say


def rebuild_partial(fn, args: tuple, keywords: dict):
    """The runtime half of PartialValue.reconstruct."""
    return functools.partial(fn, *args, **keywords)


# ---- wraps / update_wrapper -----------------------------------------------------------------------

def wraps_handler(tx, args, kwargs) -> Value:
    """functools.wraps(wrapped, assigned=..., updated=...) is partial(update_wrapper, wrapped=..., ...)."""
    from kiln.capture.values.functions import PartialValue

    names = ("wrapped", "assigned", "updated")
    bound = dict(zip(names, args))
    bound.update(kwargs)
    if "wrapped" not in bound or len(args) > 3 or set(bound) - set(names):
        unsupported("functools.wraps() with unexpected arguments")
    bound.setdefault("assigned", ConstantValue(functools.WRAPPER_ASSIGNMENTS))
    bound.setdefault("updated", ConstantValue(functools.WRAPPER_UPDATES))
    return PartialValue(UpdateWrapperValue(), [], bound)


class UpdateWrapperValue(Value):
    """functools.update_wrapper, applied to a function made while tracing."""

    def python_type(self) -> type:
        return types.FunctionType

    def call(self, tx, args, kwargs) -> Value:
        names = ("wrapper", "wrapped", "assigned", "updated")
        bound = dict(zip(names, args))
        bound.update(kwargs)
        if "wrapper" not in bound or "wrapped" not in bound or set(bound) - set(names):
            unsupported("functools.update_wrapper() with unexpected arguments")
        assigned = bound.get("assigned", ConstantValue(functools.WRAPPER_ASSIGNMENTS)).as_constant()
        updated = bound.get("updated", ConstantValue(functools.WRAPPER_UPDATES)).as_constant()
        return update_wrapper(tx, bound["wrapper"], bound["wrapped"], assigned, updated)

    def reconstruct(self, cg) -> None:
        cg.load_const(functools.update_wrapper)


def update_wrapper(tx, wrapper: Value, wrapped: Value, assigned, updated) -> Value:
    from kiln.capture.values.functions import NestedFunctionValue

    if not isinstance(wrapper, NestedFunctionValue):
        unsupported(f"functools.update_wrapper() on {wrapper}: kiln sets attributes only on functions "
                    f"made while tracing")
    for name in assigned:
        if name == "__dict__":
            continue
        value = function_attribute(tx, wrapped, name)
        if value is not None:
            wrapper.set_function_attr(name, value)
    for name in updated:
        if name != "__dict__":
            unsupported(f"functools.update_wrapper(updated=({name!r},))")
        for key, value in function_dict(tx, wrapped).items():
            wrapper.set_function_attr(key, value)
    wrapper.set_function_attr("__wrapped__", wrapped)
    return wrapper


def function_attribute(tx, fn: Value, name: str):
    """getattr(fn, name) for update_wrapper's copied attributes; None where fn has no such attribute."""
    from kiln.capture.values.functions import NestedFunctionValue, UserFunctionValue

    if isinstance(fn, NestedFunctionValue):
        return fn.function_attr(tx, name)
    if isinstance(fn, UserFunctionValue):
        if not hasattr(fn.fn, name):
            return None
        if name == "__annotations__" and fn.fn.__annotations__:
            unsupported(f"functools.wraps of {fn.fn.__qualname__}, which has annotations (kiln would copy "
                        f"the dict, Python shares it)")
        if name in ("__annotations__", "__type_params__"):
            from kiln.capture.values.containers import DictValue

            return DictValue({}) if name == "__annotations__" else ConstantValue(getattr(fn.fn, name))
        return tx.getattr(fn, name)
    unsupported(f"functools.wraps of {fn}: kiln copies attributes of Python functions only")


def function_dict(tx, fn: Value) -> dict:
    """The items of fn.__dict__ (update_wrapper's `updated`)."""
    from kiln.capture.values.functions import NestedFunctionValue, UserFunctionValue

    if isinstance(fn, NestedFunctionValue):
        return {k: v for k, v in fn.attrs.items() if not (k.startswith("__") and k.endswith("__"))
                or k == "__wrapped__"}
    if isinstance(fn, UserFunctionValue):
        return {k: tx.getattr(fn, k) for k in vars(fn.fn)}
    unsupported(f"functools.wraps of {fn}")


# ---- lru_cache / cache ----------------------------------------------------------------------------

class LruCacheFunctionValue(Value):
    """A function wrapped by functools.lru_cache / functools.cache.

    kiln traces the wrapped function and does not model the cache. That is exact when the function is
    pure in this sense (checked while tracing; otherwise the call breaks the graph and runs as Python):
    its arguments are hashable constants; its body records no side effect, no graph op and changes no
    value that existed before the call; it reads nothing that needs a guard (so nothing that can change
    between calls: no global number, container or object attribute; modules, classes and builtins are
    fine, and so are lru_cache functions, the function itself included (a recursive call reads its global
    name): their calls are checked by this same rule); and its result is an immutable constant (number,
    string, None, tuple of those), so a cached result and a recomputed one are indistinguishable (equal,
    and with no identity to tell apart).
    What differs is only the cache itself: `cache_info()` does not count the traced calls."""

    def __init__(self, wrapper, source=None):
        self.wrapper = wrapper
        self.source = source

    def python_type(self) -> type:
        return type(self.wrapper)

    def getattr(self, tx, name: str) -> Value:
        if name in ("__name__", "__qualname__", "__module__", "__doc__"):
            return ConstantValue(getattr(self.wrapper, name))
        if name == "__wrapped__":
            return self._wrapped(tx)
        unsupported(f"attribute {name!r} of an lru_cache function")

    def _wrapped(self, tx) -> Value:
        from kiln.capture.sources import AttrSource, ConstantSource
        from kiln.capture.values.builder import wrap

        fn = self.wrapper.__wrapped__
        source = AttrSource(self.source, "__wrapped__") if self.source is not None and \
            not isinstance(self.source, ConstantSource) else ConstantSource("__wrapped__", fn)
        return wrap(tx, fn, source)

    def call(self, tx, args, kwargs) -> Value:
        name = getattr(self.wrapper, "__qualname__", "function")
        arguments = [*args, *kwargs.values()]
        if not all(a.is_constant() and _hashable_literal(a.as_constant()) for a in arguments):
            unsupported(f"call to lru_cache function {name} with arguments that are not constants: the "
                        f"cache would return an earlier result object",
                        hint="kiln runs the call as Python")
        wrapped = self._wrapped(tx)
        result = _call_purely(tx, wrapped, args, kwargs, name)
        if not (result.is_constant() and _hashable_literal(result.as_constant())):
            unsupported(f"lru_cache function {name} returns {result}: the cache hands out the same "
                        f"object each call", hint="kiln runs the call as Python")
        return ConstantValue(result.as_constant())

    def reconstruct(self, cg) -> None:
        if self.source is not None:
            self.source.emit(cg)
            return
        cg.load_const(self.wrapper)


def _hashable_literal(value) -> bool:
    return is_constant_literal(value) and type(value) not in (slice,)


_ALLOWED_GUARDS = ("identity", "type")


def _call_purely(tx, fn: Value, args, kwargs, name: str) -> Value:
    """Trace fn(*args, **kwargs), refusing (unsupported) anything that makes the call impure."""
    from kiln.capture.guards import GuardKind

    output = tx.output
    effects_before = output.side_effects.write_count
    nodes_before = len(output.graph.nodes)
    floor = output.generator_floor
    output.generator_floor = ConstantValue(None).serial  # changing older values is refused
    guards = output.guards
    original_add = guards.add
    reads: list = []

    def watching_add(kind, source, value=None):
        unchanging = kind in (GuardKind.IDENTITY, GuardKind.TYPE) and _unchanging(value)
        if not unchanging and not _body_of_lru_function(output.values_by_source, source):
            reads.append((kind, source))
        return original_add(kind, source, value)

    guards.add = watching_add
    memo = output.values_by_source
    output.values_by_source = _RecordingMemo(memo)  # places read before the call are reads too
    try:
        result = fn.call(tx, list(args), dict(kwargs))
    finally:
        guards.add = original_add
        output.generator_floor = floor
        hits = output.values_by_source.hits
        memo.update(output.values_by_source)
        output.values_by_source = memo
    reads.extend((None, key) for key in hits if not (_unchanging_value(memo[key]) or _body_of_lru_function(memo, key)))
    if output.side_effects.write_count != effects_before or len(output.graph.nodes) != nodes_before:
        unsupported(f"lru_cache function {name} has side effects or computes tensors: kiln cannot tell "
                    f"whether eager would run it or return a cached result")
    if reads:
        kind, source = reads[0]
        place = source if isinstance(source, str) else source.name() if source is not None else "a value"
        unsupported(f"lru_cache function {name} reads {place}"
                    f"{f' ({kind.value} guard)' if kind is not None else ''}: its cached result may be stale "
                    f"in eager")
    return result


class _RecordingMemo(dict):
    """OutputGraph.values_by_source while a cached function is traced: records the places found in it
    (read earlier in the frame, so no new guard shows that the function depends on them)."""

    def __init__(self, memo: dict):
        super().__init__(memo)
        self.hits: list = []

    def __getitem__(self, key):
        self.hits.append(key)
        return super().__getitem__(key)


def _unchanging_value(value: Value) -> bool:
    from kiln.capture.values.base import KnownFunctionValue
    from kiln.capture.values.objects import ClassValue
    from kiln.capture.values.torch_functions import PythonModuleValue

    return isinstance(value, (PythonModuleValue, ClassValue, KnownFunctionValue, LruCacheFunctionValue))


def _body_of_lru_function(memo: dict, place) -> bool:
    """Whether `place` (a source, or its name) is `wrapper.__wrapped__` of an lru_cache function: a nested
    call reads it to find the body it traces (as the outermost call does before the reads are watched);
    what the body reads is checked."""
    name = place if isinstance(place, str) else place.name() if place is not None else ""
    suffix = ".__wrapped__"
    return name.endswith(suffix) and isinstance(dict.get(memo, name[:-len(suffix)]), LruCacheFunctionValue)


def _unchanging(value) -> bool:
    """Objects whose reading cannot go stale: modules, classes, builtins (identity/type guards on them),
    and lru_cache wrappers (a recursive helper reads its own global name): a call through one is checked
    by this same purity rule, so what it returns cannot depend on anything that changes between calls."""
    return isinstance(value, (types.ModuleType, type, types.BuiltinFunctionType, functools._lru_cache_wrapper))


# ---- cmp_to_key -----------------------------------------------------------------------------------

class CmpToKeyValue(Value):
    """functools.cmp_to_key(cmp): its key objects compare by calling `cmp`."""

    def __init__(self, cmp: Value):
        self.cmp = cmp

    def call(self, tx, args, kwargs) -> Value:
        if len(args) != 1 or kwargs:
            unsupported("a cmp_to_key key called with other than one argument")
        return _CmpKeyValue(tx, self.cmp, args[0])


class _CmpKeyValue(Value):
    """A key object of cmp_to_key while Python's sort compares it: a constant whose comparisons trace
    `cmp(a, b)` and read its (constant) result, as functools' K class does."""

    def __init__(self, tx, cmp: Value, obj: Value):
        self.key = _TracedKey(tx, cmp, obj)

    def is_constant(self) -> bool:
        return True

    def as_constant(self):
        return self.key


class _TracedKey:
    __slots__ = ("tx", "cmp", "obj")

    def __init__(self, tx, cmp, obj):
        self.tx, self.cmp, self.obj = tx, cmp, obj

    def _compare(self, other: "_TracedKey") -> int:
        result = self.cmp.call(self.tx, [self.obj, other.obj], {})
        if not result.is_constant():
            unsupported(f"cmp_to_key comparison returned {result}, not a number known while tracing")
        return result.as_constant()

    def __lt__(self, other):
        return self._compare(other) < 0

    def __gt__(self, other):
        return self._compare(other) > 0

    def __le__(self, other):
        return self._compare(other) <= 0

    def __ge__(self, other):
        return self._compare(other) >= 0

    def __eq__(self, other):
        return self._compare(other) == 0

    __hash__ = None


def cmp_to_key_handler(tx, cmp, **kwargs):
    if kwargs:
        unsupported("functools.cmp_to_key() with keyword arguments")
    return CmpToKeyValue(cmp)


BUILTIN_HANDLERS = {functools.reduce: reduce_handler, functools.cmp_to_key: cmp_to_key_handler}
LIBRARY_FUNCTION_HANDLERS = {functools.wraps: wraps_handler,
                             functools.update_wrapper: lambda tx, args, kwargs: UpdateWrapperValue().call(tx, args, kwargs)}
