"""Guards: the conditions under which a cache entry's transformed code is valid.

The interpreter records guards as it reads values from the frame. They are compiled into one Python
function per cache entry, `check(L, G, C, B)`, over the frame's arguments (L), globals (G), closure
cells (C) and builtins (B). `GuardSet.source_code()` prints it for a person.
"""
from __future__ import annotations

import bisect
import dataclasses
import enum
import operator
import re
from typing import Any, Callable

import torch

from kiln.capture.guard_values import inline_tuple_check, needs_exact_compare, same_constant, same_keys
from kiln.capture.sources import Source
from kiln.capture.storage_aliasing import aliasing_signature
from kiln.fake.autograd_kind import autograd_kind


# whether autocast is on for any device: one guard in place of one per device when it is off everywhere
_any_autocast = getattr(torch._C, "_is_any_autocast_enabled", None)
# the level of the innermost torch.func transform running (vmap, grad, jvp), None outside them
functorch_level = getattr(getattr(torch._C, "_functorch", None), "maybe_current_level", None)


class GuardKind(enum.Enum):
    TENSOR = "tensor"      # type, dtype, device, shape, stride, requires_grad
    DYNAMIC_TENSOR = "dynamic_tensor"  # type, dtype, device, requires_grad (sizes: the shape check)
    HELD_TENSOR = "held_tensor"  # dtype, device, shape, stride, requires_grad of a tensor the graph holds
    CONSTANT = "constant"  # type and value of a Python constant
    TYPE = "type"          # exact type
    IDENTITY = "identity"  # the very same object (modules, functions, classes)
    LENGTH = "length"      # type and length of a list/tuple
    DICT_KEYS = "dict_keys"  # type and keys (in order) of a dict
    NONE = "none"          # is None / is not None
    CONTAINS = "contains"  # a key is (or is not) in a dict
    HASATTR = "hasattr"    # an object has (or has not) an attribute
    IDENTITY_OF_SOURCE = "identity_of_source"  # two places hold the same object
    DISTINCT = "distinct"  # tensor inputs are distinct objects (set by compile())
    NOT_SAME = "not_same"  # two places hold different objects (an `is` decided False while tracing)
    NOT_OBJECT = "not_object"  # a place does not hold this object (a tensor input vs a tensor the graph holds)
    GLOBAL_STATE = "global_state"  # grad mode, default dtype, autocast
    STORAGE_ALIASING = "storage_aliasing"  # which tensor inputs share memory (graphs that write tensors)
    NO_MODULE_HOOKS = "no_module_hooks"  # an nn.Module's forward/backward hook dicts are all empty
    NO_GLOBAL_MODULE_HOOKS = "no_global_module_hooks"  # torch.nn.modules.module's global hook dicts: empty
    CLASS_STATE = "class_state"  # the classes the trace read through keep their MROs and dicts (class_guards.py)
    FUNCTION_CODES = "function_codes"  # the functions kiln inlined still have the code it inlined
    STORAGE_OFFSET = "storage_offset"  # a tensor input's storage offset (the trace read it as a number)


@dataclasses.dataclass(frozen=True)
class Guard:
    kind: GuardKind
    source: Source | None
    value: Any = dataclasses.field(compare=False, hash=False, default=None)

    def key(self) -> tuple:
        return (self.kind, self.source.name() if self.source else None)


def _type_name(t: type) -> str:
    return f"{t.__module__}.{t.__qualname__}"


class GuardSet:
    """Guards collected while tracing one frame; deduplicated by (kind, source)."""

    def __init__(self) -> None:
        self._guards: dict[tuple, Guard] = {}
        self.shape_env = None  # the ShapeEnv of a frame with dynamic sizes (kiln.fake.symbolic)
        self._shape_call = ""  # the shape check's call text (it returns what failed, or None)
        self.dynamic_inputs: list[Source] = []  # its inputs with symbolic sizes, in the ShapeEnv's order
        self.classes: dict[int, type] = {}  # classes the trace read through (class_guards.note_class)
        # modules guarded by class, not identity (values/modules.guard_module): source name -> (source, module)
        self.stateless_modules: dict[str, tuple] = {}
        self.class_stores: set = set()  # (class, name) the trace stores into (the OutputGraph's side effects')
        self.class_names: set[str] = set()  # attribute names the trace looked up (class_guards.note_name)
        self.function_codes: dict[int, tuple] = {}  # id(fn) -> (fn, fn.__code__) of each function inlined

    def add(self, kind: GuardKind, source: Source | None, value: Any = None) -> None:
        if source is not None and not _guardable(source):
            return
        guard = Guard(kind, source, value)
        self._guards.setdefault(guard.key(), guard)

    def tensor(self, source: Source, t: torch.Tensor) -> None:
        self.add(GuardKind.TENSOR, source, t)

    def dynamic_tensor(self, source: Source, t: torch.Tensor) -> None:
        """A tensor input with symbolic sizes: its sizes and strides are checked by the ShapeEnv's function."""
        self.add(GuardKind.DYNAMIC_TENSOR, source, t)
        self.dynamic_inputs.append(source)

    def dynamic_int(self, source: Source, value: int) -> None:
        """An int argument traced as a symbol: its type here, its value by the ShapeEnv's function."""
        self.type(source, value)
        self.dynamic_inputs.append(source)

    def storage_offset(self, source: Source, offset: int) -> None:
        """The tensor at ``source`` keeps its storage offset: the trace read it as a number (a tensor
        guard checks sizes and strides, not where in its storage the tensor starts)."""
        self.add(GuardKind.STORAGE_OFFSET, source, offset)

    def held_tensor(self, label: str, t: torch.Tensor) -> None:
        """The metadata of a tensor the graph holds itself (a parameter or buffer): the compiled code
        assumes its dtype, device, size, strides and requires_grad, and ``p.data = ...`` (what
        ``Module.to``/``.half()``/``.to(memory_format=...)`` do) changes them on the same object."""
        from kiln.capture.sources import ConstantSource

        guard = Guard(GuardKind.HELD_TENSOR, ConstantSource(label, t), t)
        self._guards.setdefault(guard.key(), guard)

    def constant(self, source: Source, value: Any) -> None:
        if type(value) is set:  # compared with a copy: the guarded set itself may change later
            value = set(value)
        self.add(GuardKind.CONSTANT, source, value)

    def identity(self, source: Source, obj: Any) -> None:
        self.add(GuardKind.IDENTITY, source, obj)

    def type(self, source: Source, obj: Any) -> None:
        self.add(GuardKind.TYPE, source, type(obj))

    def length(self, source: Source, obj: Any) -> None:
        self.add(GuardKind.LENGTH, source, (type(obj), len(obj)))

    def contains(self, source: Source, key, present: bool) -> None:
        if not _guardable(source):
            return
        guard = Guard(GuardKind.CONTAINS, source, (key, present))
        self._guards.setdefault((GuardKind.CONTAINS, source.name(), repr(key)), guard)

    def hasattr(self, source: Source, attr: str, present: bool) -> None:
        if not _guardable(source):
            return
        guard = Guard(GuardKind.HASATTR, source, (attr, present))
        self._guards.setdefault((GuardKind.HASATTR, source.name(), attr), guard)

    def same(self, source: Source, other: Source) -> None:
        if not (_guardable(source) and _guardable(other)):
            return
        guard = Guard(GuardKind.IDENTITY_OF_SOURCE, source, other)
        self._guards.setdefault((GuardKind.IDENTITY_OF_SOURCE, source.name(), other.name()), guard)

    def not_same(self, source: Source, other: Source) -> None:
        if not (_guardable(source) and _guardable(other)):
            return
        guard = Guard(GuardKind.NOT_SAME, source, other)
        self._guards.setdefault((GuardKind.NOT_SAME, source.name(), other.name()), guard)

    def not_object(self, source: Source, obj: Any) -> None:
        if not _guardable(source):
            return
        guard = Guard(GuardKind.NOT_OBJECT, source, obj)
        self._guards.setdefault((GuardKind.NOT_OBJECT, source.name(), id(obj)), guard)

    def storage_aliasing(self, sources: list[Source], held, expected) -> None:
        """The tensors at ``sources`` share memory with each other and with the held tensors (``held``:
        a ``HeldRanges``) as they did while tracing: ``expected`` is their ``aliasing_signature``."""
        if sources and all(map(_guardable, sources)):
            guard = Guard(GuardKind.STORAGE_ALIASING, sources[0], (tuple(sources), held, expected))
            self._guards[(GuardKind.STORAGE_ALIASING, None)] = guard

    def no_module_hooks(self, source: Source) -> None:
        """The module at `source` has no forward, forward-pre, backward or backward-pre hooks (a hook added
        later must run: the entry no longer matches)."""
        self.add(GuardKind.NO_MODULE_HOOKS, source)

    def no_global_module_hooks(self, module_internals_source: Source) -> None:
        """torch.nn.modules.module's global hook dicts are empty. (Kiln holds that module itself, a
        ConstantSource, which ``add`` would skip as fixed: its dicts are what changes.)"""
        guard = Guard(GuardKind.NO_GLOBAL_MODULE_HOOKS, module_internals_source)
        self._guards.setdefault(guard.key(), guard)

    def dict_keys(self, source: Source, obj: dict) -> None:
        self.add(GuardKind.DICT_KEYS, source, (type(obj), list(obj.keys())))

    def __iter__(self):
        return iter(self._guards.values())

    def __len__(self) -> int:
        return len(self._guards)

    # ---- compilation -------------------------------------------------------------------------

    def _expressions(self, names: "_Namer", batch_held: bool = False, gated=()) -> list[tuple]:
        """(python expression, description[, the places it reads]) for each guard, global state first
        (``_check_function_source`` reads each shared place once). With ``batch_held``
        (and kiln's C extension built), the held tensors' metadata is one C call at the end. The guards
        in ``gated`` are left out (``compile`` puts theirs in the gated block)."""
        exprs = [
            (f"___grad_enabled() is {torch.is_grad_enabled()}", "grad mode"),
            (f"___default_dtype() is {names.ref(torch.get_default_dtype())}", "default dtype"),
        ]
        if _any_autocast is not None and not _any_autocast():  # (one call without arguments to parse)
            exprs.append(("___any_autocast() is False", "autocast off on every device"))
        else:
            for device in ("cpu", "cuda") if torch.cuda.is_available() else ("cpu",):
                enabled = torch.is_autocast_enabled(device)
                exprs.append((f"___autocast({device!r}) is {enabled}", f"autocast ({device})"))
                if enabled:  # (the graph's casts were traced to this dtype)
                    dtype = torch.get_autocast_dtype(device)
                    exprs.append((f"___autocast_dtype({device!r}) is {names.ref(dtype)}",
                                  f"autocast dtype ({device})"))
        exprs.append(("___torch_function_mode() is False", "no TorchFunctionMode active"))
        if functorch_level is not None:  # (inside vmap/grad the inputs are wrapped tensors)
            exprs.append(("___functorch_level() is None", "no torch.func transform (vmap, grad, ...) active"))
        ordered = _in_order(self._guards.values())
        match = _held_tensors_match() if batch_held else None
        held = [g for g in ordered if g.kind is GuardKind.HELD_TENSOR] if match is not None else []
        skip = {g.key() for g in gated}
        exprs += self._guard_texts([g for g in ordered if g.key() not in skip
                                    and not (held and g.kind is GuardKind.HELD_TENSOR)], names,
                                   _tensor_matches() if batch_held else None)
        tensor_sources = [g.source for g in ordered if g.kind in (GuardKind.TENSOR, GuardKind.DYNAMIC_TENSOR)]
        if len(tensor_sources) > 1:
            distinct = Guard(GuardKind.DISTINCT, tensor_sources[0], tensor_sources)
            exprs.extend(_read_through(distinct, _guard_exprs(distinct, names)))
        if self.shape_env is not None and self.dynamic_inputs:
            env = self.shape_env
            check = self._shape_check
            places = ", ".join(s.name() for s in self.dynamic_inputs)
            facts = "; ".join(str(g.fact) for g in env.guards) or "none"
            exprs.append((f"{names.ref(check)}({places}) is None",
                          f"sizes of {places} (symbols {env.ranges()}; guards: {facts})"[:300],
                          _chain_names(self.dynamic_inputs)))
            self._shape_call = f"{names.ref(check)}({places})"
        if held:
            tensors = tuple(g.value for g in held)
            expected = tuple((t.dtype, t.device, tuple(t.size()), tuple(t.stride()), t.requires_grad) for t in tensors)
            exprs.append((f"{names.ref(match)}({names.ref(tensors)}, {names.ref(expected)})",
                          f"the {len(held)} held tensors keep their dtype, device, size, strides, requires_grad"))
        return exprs

    def _guard_texts(self, guards: list[Guard], names: "_Namer", tensor_matches=None) -> list[tuple]:
        """(expression, description, places read) of ``guards``, in their order, less the type guards a
        constant guard on the same place implies (it checks the exact type too: `is` for None/True/...).
        ``tensor_matches``: the C check of an input tensor's metadata, one call per tensor guard."""
        typed = {g.source.name() for g in self._guards.values() if g.kind is GuardKind.CONSTANT}
        return [e for g in guards if not (g.kind is GuardKind.TYPE and g.source.name() in typed)
                for e in _read_through(g, _guard_exprs(g, names, tensor_matches))]

    def compile(self, frame: tuple | None = None) -> "CompiledGuards":
        """The check function. ``frame``: the values ``(L, G, C, B)`` of the call being compiled; with
        them, the guards that read only through an unchanged module tree are gated (guard_gate.py)."""
        from kiln.capture.guard_gate import gate_functions, plan_gate

        self._add_class_guard()
        self._add_function_codes_guard()
        names = _Namer()
        if self.shape_env is not None and self.dynamic_inputs:  # (made once: both texts below name it alike)
            self._shape_check = self.shape_env.check_function()
        for g in self._guards.values():
            for src in [g.source] + ([g.value] if isinstance(g.value, Source) else []):
                names.namespace.update(_held_objects(src))
        exprs = self._expressions(names)  # the texts now: they hold the metadata expected now
        plan = plan_gate(list(self._guards.values()), frame)
        gate = None
        if plan is not None:
            gate = (names.ref(plan.state), self._guard_texts(_in_order(plan.gated), names), plan.reached,
                    names.ref(plan.record))
            unchanged, _, _, snapshot = gate_functions()
            names.namespace["___gate_unchanged"], names.namespace["___gate_snapshot"] = unchanged, snapshot
        src = _check_function_source(self._expressions(names, batch_held=True, gated=plan.gated if plan else ()),
                                     self._shared_places(), gate)
        ns = dict(names.namespace)
        exec(compile(src, "<kiln guards>", "exec"), ns)
        guards = CompiledGuards(ns["check"], src, lambda: _one_checks(exprs, names))
        if self._shape_call:  # a failing shape check reports which size or fact failed
            fn_ns = dict(names.namespace)
            exec(compile(f"def why(L, G, C, B):\n    return {self._shape_call}\n", "<kiln shape reason>", "exec"), fn_ns)
            guards.shape_reason = (f"{self._shape_call} is None", fn_ns["why"])
        return guards

    def _add_class_guard(self) -> None:
        """The guard that the classes noted while tracing are unchanged (class_guards.py)."""
        from kiln.capture.class_guards import ClassGuard
        from kiln.capture.sources import ConstantSource

        if not self.classes or (GuardKind.CLASS_STATE, "classes") in self._guards:
            return
        guard = ClassGuard(list(self.classes.values()), self.class_stores, self.class_names)
        if len(guard):
            self._guards[(GuardKind.CLASS_STATE, "classes")] = Guard(GuardKind.CLASS_STATE,
                                                                     ConstantSource("classes", guard), guard)

    def note_function_code(self, fn) -> None:
        """A function whose body the trace inlined: its ``__code__`` must still be that body (it can be
        replaced in place: IPython's autoreload does, for every function of an edited module)."""
        self.function_codes.setdefault(id(fn), (fn, fn.__code__))

    def _add_function_codes_guard(self) -> None:
        """One guard for every inlined function's code, checked in one pass (``___same_codes``): a guard
        per function was a fifth of BERT's guards. The functions are the objects the trace held; which
        object a place holds is guarded by the places' own guards."""
        from kiln.capture.sources import ConstantSource

        if not self.function_codes:
            return
        fns, codes = zip(*self.function_codes.values())
        self._guards[(GuardKind.FUNCTION_CODES, "codes")] = Guard(
            GuardKind.FUNCTION_CODES, ConstantSource("function codes", fns), (tuple(fns), tuple(codes)))

    def _shared_places(self) -> set[str]:
        """Places (printed sources) that more than one guard reads through: read once, into a local."""
        counts: dict[str, int] = {}
        for g in self._guards.values():
            if g.kind in (GuardKind.TENSOR, GuardKind.HELD_TENSOR, GuardKind.DYNAMIC_TENSOR):  # read 4-6 times
                counts[g.source.name()] = counts.get(g.source.name(), 0) + 1
            node = g.source
            while node is not None:
                counts[node.name()] = counts.get(node.name(), 0) + 1
                node = getattr(node, "base", None)
        return {name for name, n in counts.items() if n >= 2}


def _in_order(guards) -> list[Guard]:
    """Guards by depth of their place, then by its text (roots' checks come before what is read through them)."""
    return sorted(guards, key=lambda g: (g.source.name().count("."), g.source.name()))


def _read_through(g: Guard, pairs: list[tuple[str, str]]) -> list[tuple[str, str, tuple[str, ...]]]:
    """``pairs`` (expression, description) of guard ``g`` with the places their texts read."""
    sources = [g.source]
    if isinstance(g.value, Source):
        sources.append(g.value)
    elif g.kind is GuardKind.DISTINCT:
        sources += g.value
    elif g.kind is GuardKind.STORAGE_ALIASING:
        sources += g.value[0]
    reads = _chain_names(sources)
    return [(expr, what, reads) for expr, what in pairs]


def _chain_names(sources) -> tuple[str, ...]:
    """The printed names of ``sources`` and of every source they are read through."""
    names = []
    for node in sources:
        while node is not None:
            names.append(node.name())
            key = getattr(node, "key", None)
            if isinstance(key, Source):
                names.append(key.name())
            node = getattr(node, "base", None)
    return tuple(names)


def _one_checks(exprs: list[tuple], names: "_Namer") -> list[tuple[str, str, Callable[..., bool]]]:
    """(expression, description, function) for each guard on its own, for ``first_failure``."""
    checks = []
    for expr, what, *_ in exprs:
        fn_ns = dict(names.namespace)
        exec(compile(f"def one(L, G, C, B):\n    return {expr}\n", "<kiln guard>", "exec"), fn_ns)
        checks.append((expr, what, fn_ns["one"]))
    return checks


_NOT_NAME_CHAR = re.compile(r"[^A-Za-z0-9_]")


class _PlaceIndex:
    """Finds the shared places (printed sources) a text reads, as ``re.search(place + r"(?![A-Za-z0-9_])")``
    would, without trying every place: a place starts where one of the places' first three characters
    are, ends where no name character follows, and is grown from a start one cut at a time while the
    text so far begins some place (``prefixes``: each place cut where no name character follows)."""

    def __init__(self, places: set[str]):
        self.places = places
        heads = sorted({re.escape(p[:3]) for p in places}) if all(len(p) >= 3 for p in places) else [""]
        self.starts = re.compile(f"(?=(?:{'|'.join(heads)}))")  # (a lookahead: overlapping starts too)
        self.prefixes = set(places)
        for p in places:
            self.prefixes.update(p[: m.start()] for m in _NOT_NAME_CHAR.finditer(p))

    def candidates(self, text: str) -> set[str]:
        found: set[str] = set()
        if not self.places:
            return found
        ends = [m.start() for m in _NOT_NAME_CHAR.finditer(text)] + [len(text)]
        for i in (m.start() for m in self.starts.finditer(text)):
            for j in ends[bisect.bisect_right(ends, i):]:
                piece = text[i:j]
                if piece not in self.prefixes:
                    break  # (no place goes on from here)
                if piece in self.places:
                    found.add(piece)
        return found

    @staticmethod
    def replace(text: str, place: str, name: str) -> str:
        """``re.sub(re.escape(place) + r"(?![A-Za-z0-9_])", name, text)``, without compiling a pattern."""
        out, k = [], 0
        while (i := text.find(place, k)) >= 0:
            j = i + len(place)
            if j < len(text) and _NOT_NAME_CHAR.match(text, j) is None:  # part of a longer name: go on
                out.append(text[k: i + 1])
                k = i + 1
                continue
            out += [text[k:i], name]
            k = j
        out.append(text[k:])
        return "".join(out)


def _check_function_source(exprs: list[tuple], shared: set[str], gate=None) -> str:
    """The text of `check(L, G, C, B)`: guards in order, each shared place read once into a local.
    ``gate``: (the gate state's name, the gated guards' expressions, the places they reach, the
    recorder's name): those
    guards run, after the others, only when ``___gate_unchanged`` says what they read changed.

    Any exception (a missing attribute or key) means the frame is not the one the entry was made for.
    The places a text reads are found through ``_PlaceIndex`` (linear in the text, not in the number of
    places: a 12-layer model has thousands of both).
    """
    index = _PlaceIndex(shared)
    assigned: dict[str, str] = {}

    def substitute(text: str, places=None) -> str:
        found = [p for p in (index.candidates(text) if places is None else places) if p in assigned]
        for place in sorted(found, key=lambda p: (-len(p), int(assigned[p][1:]))):  # (v<n>: n-th assigned)
            text = index.replace(text, place, assigned[place])
        return text

    def emit(lines: list[str], exprs: list[tuple], indent: str = "") -> None:
        for expr, what, *reads in exprs:
            # (the places a guard's text reads: its sources' chains where known, else found in the text)
            places = {p for p in reads[0] if p in shared} if reads else index.candidates(expr)
            for place in sorted(places, key=lambda p: (len(p), p)):
                if place not in assigned:
                    rhs = substitute(place)
                    assigned[place] = f"v{len(assigned)}"
                    lines.append(f"{indent}{assigned[place]} = {rhs}")
            lines.append(f"{indent}if not ({substitute(expr, places)}):  # {what[:300]}")  # (a long expression stays whole)
            lines.append(f"{indent}    return False")

    lines: list[str] = []
    if gate is not None:  # (the tags are taken before any guard reads: the guards below may read a place
        # once for both blocks, and a change made after that read must not be in the tags recorded)
        state, gated, reached, record = gate
        lines.append(f"___gate_open = ___gate_unchanged({state})  # {len(gated)} guards read only through dicts "
                     f"and types unchanged since they last passed (guard_gate.py)")
        lines.append(f"___snap = None if ___gate_open else ___gate_snapshot({state})  # the tags before any read")
    emit(lines, exprs)
    if gate is not None:
        lines.append("if not ___gate_open:  # the gated guards")
        emit(lines, gated, "    ")
        reached_text = ", ".join(substitute(text) for text in reached)  # (one short text at a time: linear)
        lines.append(f"    {record}({state}, ({reached_text},), ___snap)  # the gate opens")
    body = "\n        ".join(lines + ["return True"])
    return (f"def check(L, G, C, B):\n    try:\n        {body}\n"
            f"    except Exception:\n        return False\n")


@dataclasses.dataclass
class CompiledGuards:
    check: Callable[..., bool]
    source_code: str
    make_checks: Callable[[], list[tuple[str, str, Callable[..., bool]]]]  # built when first needed
    _checks: list | None = None
    shape_reason: tuple | None = None  # (the shape check's expression, a function giving what failed)

    @property
    def checks(self) -> list[tuple[str, str, Callable[..., bool]]]:
        """(expression, description, function) per guard, each compiled on its own (for reports)."""
        if self._checks is None:
            self._checks = self.make_checks()
        return self._checks

    def first_failure(self, L, G, C, B) -> str | None:
        """The first guard that fails for these frame values, as text (for recompile reports)."""
        for expr, what, one in self.checks:
            try:
                ok = one(L, G, C, B)
            except Exception as exc:  # a guard that raises fails
                return f"{expr}  ({what}; raised {type(exc).__name__})"
            if not ok:
                if self.shape_reason is not None and expr == self.shape_reason[0]:
                    try:
                        return f"shape guard failed: {self.shape_reason[1](L, G, C, B)}"
                    except Exception:
                        pass
                return f"{expr}  ({what})"
        return None

    def __str__(self) -> str:
        return self.source_code


class _Namer:
    """Gives names to objects a guard refers to (types, modules, dtypes)."""

    def __init__(self) -> None:
        from kiln.capture.values.set_tensor_order import set_order_is
        from kiln.capture.values.symbolic_float import GUARD_NAMES

        self.namespace: dict[str, Any] = {
            "___grad_enabled": torch.is_grad_enabled,
            "___default_dtype": torch.get_default_dtype,
            "___autocast": torch.is_autocast_enabled,
            "___any_autocast": _any_autocast,
            "___autocast_dtype": torch.get_autocast_dtype,
            "___functorch_level": functorch_level,
            "___torch_function_mode": torch._C._is_torch_function_mode_enabled,
            "___type": type,
            "___len": len,
            "___list": list,
            "___getattr": getattr,
            "___hasattr": hasattr,
            "___object_getattr": object.__getattribute__,
            "___dict_getitem": dict.__getitem__,
            "___dict_contains": dict.__contains__,
            "___remaining": _iterator_remaining,
            "___autograd_kind": autograd_kind,
            "___same_constant": same_constant,
            "___same_keys": same_keys,
            "___same_codes": _same_codes,
            "___set_order_is": set_order_is,
            "id": id,
            **GUARD_NAMES,
        }
        self._by_id: dict[int, str] = {}

    def ref(self, obj: Any) -> str:
        found = self._by_id.get(id(obj))
        if found:
            return found
        label = f"___obj{len(self._by_id)}"
        self._by_id[id(obj)] = label
        self.namespace[label] = obj
        return label


def _describe_aliasing(sources, expected) -> str:
    firsts, in_held = expected if isinstance(expected[0], tuple) else (expected, ())
    parts = [f"{s.name()} shares memory with {sources[f].name()}" for i, (s, f) in enumerate(zip(sources, firsts))
             if f != i]
    parts += [f"{s.name()} is a held tensor's memory" for s, h in zip(sources, in_held) if h >= 0]
    return "; ".join(parts) or "no two share memory"


def class_assignable(obj) -> bool:
    """Whether ``obj.__class__ = ...`` may change the object's class: instances of classes defined in
    Python, and modules."""
    import types

    return bool(type(obj).__flags__ & (1 << 9)) or isinstance(obj, types.ModuleType)  # Py_TPFLAGS_HEAPTYPE


def _tensor_matches():
    """The C check of an input tensor's metadata (``_eval_frame.tensor_matches``), or None when the
    extension is older than it (the guards then check each field in Python)."""
    from kiln.capture import hook

    return getattr(hook._C, "tensor_matches", None)


def _held_tensors_match():
    """The C check of held tensors' metadata (``_eval_frame.held_tensors_match``), or None when the
    extension is missing or older than it (the guards then check each tensor in Python)."""
    from kiln.capture import hook

    return getattr(hook._C, "held_tensors_match", None)


def _iterator_remaining(it):
    from kiln.capture.sources import iterator_remaining

    return iterator_remaining(it)


def _same_codes(fns, codes) -> bool:
    return all(map(operator.is_, map(_CODE_OF, fns), codes))


_CODE_OF = operator.attrgetter("__code__")


def _names_of(fns) -> str:
    shown = ", ".join(getattr(f, "__qualname__", "?") for f in fns[:3])
    return shown + (f" and {len(fns) - 3} more" if len(fns) > 3 else "")


def _guardable(source: Source) -> bool:
    """A place kiln holds directly is fixed (nothing to check); what is read through it is not:
    `module_globals['flag']` of another module, an attribute of a held object."""
    from kiln.capture.sources import ConstantSource

    return not isinstance(source, ConstantSource)


def _held_objects(source: Source) -> dict[str, Any]:
    from kiln.capture.sources import ConstantSource

    found = {}
    node = source
    while node is not None:
        if isinstance(node, ConstantSource):
            found[node.name()] = node.value
        key = getattr(node, "key", None)
        if isinstance(key, ConstantSource):  # ObjectKeyItemSource: an object kiln holds as the key
            found[key.name()] = key.value
        node = getattr(node, "base", None)
    return found


def _guard_exprs(g: Guard, names: _Namer, tensor_matches=None) -> list[tuple[str, str]]:
    x = g.source.name()
    k = g.kind
    if k is GuardKind.TENSOR:
        t = g.value
        what = (f"tensor {x}: {type(t).__name__} {t.dtype} {t.device} size={tuple(t.size())} "
                f"stride={tuple(t.stride())} requires_grad={t.requires_grad}")
        if tensor_matches is not None:
            expected = (type(t), t.dtype, t.device, tuple(t.size()), tuple(t.stride()), t.requires_grad)
            return [(f"{names.ref(tensor_matches)}({x}, {names.ref(expected)})", what)]
        return [(f"___type({x}) is {names.ref(type(t))} and {x}.dtype is {names.ref(t.dtype)} "
                 f"and {x}.device == {names.ref(t.device)} and {x}.size() == {tuple(t.size())!r} "
                 f"and {x}.stride() == {tuple(t.stride())!r} and {x}.requires_grad is {t.requires_grad}", what)]
    if k is GuardKind.DYNAMIC_TENSOR:
        t = g.value
        return [(f"___type({x}) is {names.ref(type(t))} and {x}.dtype is {names.ref(t.dtype)} "
                 f"and {x}.device == {names.ref(t.device)} and {x}.requires_grad is {t.requires_grad}",
                 f"tensor {x}: {type(t).__name__} {t.dtype} {t.device} requires_grad={t.requires_grad} "
                 f"(dynamic sizes)")]
    if k is GuardKind.HELD_TENSOR:
        t = g.value
        return [
            (
                f"{x}.dtype is {names.ref(t.dtype)} and {x}.device == {names.ref(t.device)} "
                f"and {x}.size() == {tuple(t.size())!r} and {x}.stride() == {tuple(t.stride())!r} "
                f"and {x}.requires_grad is {t.requires_grad}",
                f"{g.source.label}: {t.dtype} {t.device} size={tuple(t.size())} stride={tuple(t.stride())} "
                f"requires_grad={t.requires_grad} (changed in place: p.data = ..., Module.to())",
            )
        ]
    if k is GuardKind.CONSTANT:
        v = g.value
        if v is None or v is True or v is False or v is Ellipsis:
            return [(f"{x} is {v!r}", f"{x} is {v!r}")]
        if isinstance(v, (torch.dtype, torch.device, torch.layout, torch.memory_format)):
            return [(f"___type({x}) is {names.ref(type(v))} and {x} == {names.ref(v)}", f"{x} == {v}")]
        if isinstance(v, float) and v != v:  # NaN
            return [(f"___type({x}) is float and {x} != {x}", f"{x} is nan")]
        if needs_exact_compare(v):  # containers, +-0.0, ...: `==` is not exact there (guard_values.py)
            inline = inline_tuple_check(x, v, names.ref) if type(v) is tuple else None
            return [(inline or f"___same_constant({x}, {names.ref(v)})", f"{x} is exactly {v!r}")]
        return [(f"___type({x}) is {names.ref(type(v))} and {x} == {names.ref(v)}", f"{x} == {v!r}")]
    if k is GuardKind.TYPE:
        return [(f"___type({x}) is {names.ref(g.value)}", f"type({x}) is {_type_name(g.value)}")]
    if k is GuardKind.IDENTITY:
        if class_assignable(g.value):  # `obj.__class__ = Other` keeps the identity, not the methods
            return [(f"{x} is {names.ref(g.value)} and ___type({x}) is {names.ref(type(g.value))}",
                     f"{x} is the same {type(g.value).__name__} object, of the same class")]
        return [(f"{x} is {names.ref(g.value)}", f"{x} is the same {type(g.value).__name__} object")]
    if k is GuardKind.LENGTH:
        t, n = g.value
        return [(f"___type({x}) is {names.ref(t)} and ___len({x}) == {n}", f"len({x}) == {n}")]
    if k is GuardKind.DICT_KEYS:
        t, keys = g.value
        shown = [f"<{type(k).__name__} at {id(k):#x}>" if isinstance(k, torch.Tensor) else k for k in keys]
        return [(f"___type({x}) is {names.ref(t)} and ___same_keys({x}, {names.ref(tuple(keys))})",
                 f"keys of {x} are exactly {shown!r}" + (" (tensors by identity)" if shown != keys else ""))]
    if k is GuardKind.IDENTITY_OF_SOURCE:
        return [(f"{x} is {g.value.name()}", f"{x} is the same object as {g.value.name()}")]
    if k is GuardKind.NOT_SAME:
        return [(f"{x} is not {g.value.name()}", f"{x} is not the same object as {g.value.name()}")]
    if k is GuardKind.NOT_OBJECT:
        return [(f"{x} is not {names.ref(g.value)}", f"{x} is not the {type(g.value).__name__} the graph holds")]
    if k is GuardKind.DISTINCT:
        names = ", ".join(s.name() for s in g.value)
        if len(g.value) <= 5:  # pairwise identity: cheaper than a set of ids for a few
            pairs = [f"{a.name()} is not {b.name()}" for i, a in enumerate(g.value) for b in g.value[i + 1:]]
            return [(" and ".join(pairs), f"tensor inputs {names} are distinct objects")]
        return [(f"___len({{id(v) for v in ({names},)}}) == {len(g.value)}",
                 f"tensor inputs {names} are distinct objects")]
    if k is GuardKind.STORAGE_ALIASING:
        sources, held, expected = g.value
        places = ", ".join(s.name() for s in sources)
        return [(f"{names.ref(aliasing_signature)}(({places},), {names.ref(held)}) == {expected!r}",
                 f"tensors {places} share memory as while tracing ({_describe_aliasing(sources, expected)})")]
    if k is GuardKind.CONTAINS:
        from kiln.capture.values.base import is_constant_literal

        key, present = g.value
        text = repr(key) if is_constant_literal(key) else names.ref(key)  # (a class key: by reference)
        return [(f"({text} in {x}) is {present}", f"{key!r} {'in' if present else 'not in'} {x}")]
    if k is GuardKind.HASATTR:
        attr, present = g.value
        return [(f"___hasattr({x}, {attr!r}) is {present}", f"{x} {'has' if present else 'has no'} attribute {attr!r}")]
    if k is GuardKind.NONE:
        return [(f"({x} is None) is {g.value}", f"{x} is {'None' if g.value else 'not None'}")]
    if k is GuardKind.STORAGE_OFFSET:
        return [(f"{x}.storage_offset() == {int(g.value)}",
                 f"{x} starts at offset {int(g.value)} of its storage (the program reads the offset)")]
    if k is GuardKind.NO_MODULE_HOOKS:
        return [(f"not ({x}._forward_hooks or {x}._forward_pre_hooks or {x}._backward_hooks or "
                 f"{x}._backward_pre_hooks)", f"module {x} has no hooks")]
    if k is GuardKind.CLASS_STATE:
        from kiln.capture.class_guards import class_guard_exprs

        return class_guard_exprs(g.value, names.ref)
    if k is GuardKind.FUNCTION_CODES:
        fns, codes = g.value
        return [(f"___same_codes({names.ref(fns)}, {names.ref(codes)})",
                 f"the {len(fns)} functions inlined keep their code ({_names_of(fns)})")]
    if k is GuardKind.NO_GLOBAL_MODULE_HOOKS:
        return [(f"not ({x}._global_forward_hooks or {x}._global_forward_pre_hooks or {x}._global_backward_hooks "
                 f"or {x}._global_backward_pre_hooks or {x}._global_forward_hooks_always_called)",
                 "no global nn.Module hooks")]
    raise AssertionError(k)
