"""Which pointer arguments a user Triton kernel writes through, read from the kernel's Python source.

kiln never runs Triton's launcher while tracing; it reads the kernel's AST instead. A parameter is
*written* when it reaches the pointer argument of a ``tl.store`` or a ``tl.atomic_*`` call, directly or
through local variables (``ptrs = out_ptr + offs``: every name an assignment reads is followed). Where the
source says something this analysis does not model (a call into another ``@triton.jit`` function, block
pointers or tensor descriptors, pointers made from integers, inline assembly, a function it cannot
resolve), the answer is *unsure* and the caller treats every tensor argument as written: a few copies
too many, never a missed write.
"""
from __future__ import annotations

import ast
import builtins
import dataclasses
import inspect
import textwrap
import types

STORE_FUNCTIONS = frozenset({"store", "atomic_add", "atomic_and", "atomic_cas", "atomic_max", "atomic_min",
                             "atomic_or", "atomic_xchg", "atomic_xor"})
# triton.language functions whose pointers this analysis cannot follow
UNSURE_FUNCTIONS = frozenset({"make_block_ptr", "advance", "make_tensor_descriptor", "inline_asm_elementwise",
                              "pointer_type", "int_to_ptr", "tensormap_fenceproxy_acquire"})
_SAFE_BUILTINS = frozenset({"range", "min", "max", "len", "int", "float", "bool", "isinstance", "print",
                            "abs", "enumerate", "zip", "getattr", "hasattr", "tuple", "list"})


@dataclasses.dataclass(frozen=True)
class StoreAnalysis:
    written: frozenset  # parameter names the kernel may write through
    unsure: str | None  # why the analysis could not decide (then every tensor argument counts as written)


def python_function(kernel) -> types.FunctionType | None:
    """The Python function under a Triton kernel object (JITFunction, InterpretedFunction, Autotuner,
    Heuristics: each wrapper keeps the next one in ``.fn``)."""
    seen = 0
    while not isinstance(kernel, types.FunctionType) and seen < 8:
        kernel = getattr(kernel, "fn", None)
        seen += 1
    return kernel if isinstance(kernel, types.FunctionType) else None


def analyse_stores(fn: types.FunctionType) -> StoreAnalysis:
    """The parameters of the kernel function ``fn`` that it stores or atomically updates through."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
    except (OSError, TypeError, SyntaxError) as exc:
        return StoreAnalysis(frozenset(), f"the kernel's source cannot be read ({type(exc).__name__})")
    defs = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    if len(defs) != 1:
        return StoreAnalysis(frozenset(), "the kernel's source is not one function definition")
    func = defs[0]
    params = [a.arg for a in func.args.posonlyargs + func.args.args + func.args.kwonlyargs]
    walker = _Walker(fn.__globals__)
    for stmt in func.body:
        walker.visit(stmt)
    if walker.unsure:
        return StoreAnalysis(frozenset(params), walker.unsure)
    deps = _param_dependencies(walker.assigned, set(params))
    written = set()
    for pointer in walker.pointers:
        for name in _names(pointer):
            written |= deps.get(name, set())
    return StoreAnalysis(frozenset(written), None)


def _names(node) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _param_dependencies(assigned: dict, params: set) -> dict:
    """For every name: the parameters its value may come from (a fixed point over the assignments)."""
    deps = {p: {p} for p in params}
    changed = True
    while changed:
        changed = False
        for target, sources in assigned.items():
            found = set(deps.get(target, set()))
            for source in sources:
                found |= deps.get(source, set())
            if found != deps.get(target, set()):
                deps[target] = found
                changed = True
    return deps


class _Walker(ast.NodeVisitor):
    def __init__(self, f_globals: dict):
        self.globals = f_globals
        self.assigned: dict[str, set[str]] = {}  # local name -> names its assignments read
        self.pointers: list = []  # pointer expressions of stores
        self.unsure: str | None = None

    def _assign(self, targets, value) -> None:
        reads = _names(value) if value is not None else set()
        for target in targets:
            for name in _names(target):
                self.assigned.setdefault(name, set()).update(reads)

    def visit_Assign(self, node):
        self._assign(node.targets, node.value)
        self.generic_visit(node)

    def _visit_single_target(self, node):  # x: T = v, x += v, (x := v)
        self._assign([node.target], node.value)
        self.generic_visit(node)

    visit_AnnAssign = visit_AugAssign = visit_NamedExpr = _visit_single_target

    def visit_For(self, node):
        self._assign([node.target], node.iter)
        self.generic_visit(node)

    def visit_With(self, node):
        for item in node.items:
            if item.optional_vars is not None:
                self._assign([item.optional_vars], item.context_expr)
        self.generic_visit(node)

    def visit_Call(self, node):
        self._call(node)
        self.generic_visit(node)

    def _call(self, node) -> None:
        callee = node.func
        if isinstance(callee, ast.Attribute):
            base = callee.value
            module = self.globals.get(base.id) if isinstance(base, ast.Name) else None
            if isinstance(module, types.ModuleType) and module.__name__.startswith("triton"):
                self._triton_call(callee.attr, node)
            elif callee.attr in STORE_FUNCTIONS or callee.attr in UNSURE_FUNCTIONS:
                self._not_sure(f"a call of .{callee.attr}() on something other than triton.language")
            elif isinstance(module, types.ModuleType):
                self._not_sure(f"a call into module {module.__name__}")
            # other attribute calls are methods of values (x.to(...), ptr.dtype.element_ty ...)
            return
        if isinstance(callee, ast.Name):
            target = self.globals.get(callee.id, getattr(builtins, callee.id, None))
            if target is getattr(builtins, callee.id, object()) and callee.id in _SAFE_BUILTINS:
                return
            if (getattr(target, "__module__", None) or "").startswith("triton.language"):
                name = getattr(target, "__name__", callee.id)
                self._triton_call(name, node)
                return
            self._not_sure(f"a call of {callee.id}(), which may write through a pointer")
            return
        self._not_sure("a call this analysis cannot resolve")

    def _triton_call(self, name: str, node) -> None:
        if name in UNSURE_FUNCTIONS:
            self._not_sure(f"tl.{name}(), whose pointers this analysis does not follow")
        elif name in STORE_FUNCTIONS:
            pointer = node.args[0] if node.args else next((k.value for k in node.keywords if k.arg == "pointer"), None)
            if pointer is None:
                self._not_sure(f"tl.{name}() without a pointer argument")
            else:
                self.pointers.append(pointer)

    def _not_sure(self, why: str) -> None:
        self.unsure = self.unsure or why


def is_kernel_code(code: types.CodeType, f_globals: dict) -> bool:
    """Whether a frame about to run is the body of a Triton kernel (Triton's interpreter runs kernels as
    Python, also when a launch runs as Python at a graph break): such frames are never traced."""
    import sys

    interface = getattr(sys.modules.get("triton.runtime.jit"), "KernelInterface", None)
    obj = f_globals.get(code.co_name)
    if interface is None or obj is None or not isinstance(obj, interface):
        return False
    fn = python_function(obj)
    return fn is not None and fn.__code__.co_filename == code.co_filename
