"""Which code kiln looks inside: user code yes; the standard library, torch and kiln itself no.

torch.nn's module definitions are the exception: their forward() methods are inlined like user code,
so a model built from nn.Linear / nn.LayerNorm / ... becomes one graph.
"""
from __future__ import annotations

import os
import sysconfig
import types

import torch

_TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep
_KILN_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep
_KILN_POLYFILLS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "polyfills.py")
_STDLIB_DIRS = tuple(
    {os.path.abspath(p) + os.sep for p in (sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["platstdlib"])}
)
_INLINABLE_TORCH = (
    os.path.join(_TORCH_DIR, "nn", "modules") + os.sep,
    os.path.join(_TORCH_DIR, "testing", "_internal") + os.sep,  # test helpers: written like user code
    os.path.join(_TORCH_DIR, "testing", "_utils.py"),  # wrapper_set_seed, freeze_rng_state (OpInfo's helpers)
)
# the module machinery itself (__call__, hooks) is not traced: kiln calls forward() directly
_NOT_INLINABLE_TORCH = (os.path.join(_TORCH_DIR, "nn", "modules", "module.py"),)
_SKIPPED_PREFIXES = ("<frozen", "<eval_with_key", "<kiln")
_SKIPPED_NAMES = ("typing_extensions.py",)


def _package_dir(name: str) -> str | None:
    import importlib.util

    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return None
    return os.path.abspath(list(spec.submodule_search_locations)[0]) + os.sep


# libraries kiln does not trace into: a call into them breaks the graph at the call. numpy is C
# underneath; triton's launchers and interpreter move tensors between storages (untyped_storage(),
# set_(), data_ptr()) in ways a trace on fake tensors cannot follow (a user kernel launch traced into
# gave a wrong result)
_SKIPPED_PACKAGES = tuple(d for d in (_package_dir("numpy"), _package_dir("triton")) if d)
# pure-Python protocol mixins of the standard library that user containers inherit (Mapping.__contains__,
# Mapping.get, ...), and pure-Python number types (fractions.Fraction, numbers' mixins): traced like user code
_INLINABLE_STDLIB = ("<frozen _collections_abc>",) + tuple(
    os.path.join(d, name) for d in _STDLIB_DIRS for name in ("_collections_abc.py", "fractions.py", "numbers.py"))

_decisions: dict[str, bool] = {}


def _is_skipped_file(filename: str) -> bool:
    if filename in _INLINABLE_STDLIB:
        return False
    if filename.startswith(_SKIPPED_PREFIXES) or filename.endswith(_SKIPPED_NAMES):
        return True
    path = os.path.abspath(filename) if not filename.startswith("<") else filename
    if path == _KILN_POLYFILLS:  # kiln's Python versions of library functions, traced in their place
        return False
    if path.startswith(_KILN_DIR) or path.startswith(_SKIPPED_PACKAGES):
        return True
    if path.startswith(_TORCH_DIR):
        return not path.startswith(_INLINABLE_TORCH) or path.startswith(_NOT_INLINABLE_TORCH)
    site = "site-packages" in path or "dist-packages" in path
    if path in _INLINABLE_STDLIB:
        return False
    return path.startswith(_STDLIB_DIRS) and not site


def is_skipped_file(filename: str) -> bool:
    found = _decisions.get(filename)
    if found is None:
        found = _decisions[filename] = _is_skipped_file(filename)
    return found


def should_offer(code: types.CodeType) -> bool:
    """Whether a frame running `code` is analysed by kiln (False: it just runs)."""
    # the standard library's mixins are traced when user code calls them, never compiled on their own
    return not is_skipped_file(code.co_filename) and code.co_filename not in _INLINABLE_STDLIB


def is_torch_module_init(code: types.CodeType) -> bool:
    """The ``__init__`` of a torch.nn module class (``nn.CrossEntropyLoss()`` built inside a compiled
    function, as transformers builds its loss): run as it is when it runs as a frame of its own. Offered,
    it broke at once on ``Module.__init__`` (not traced into) and recompiled for every new object."""
    return code.co_name == "__init__" and is_skipped_file(code.co_filename) is False and \
        os.path.abspath(code.co_filename).startswith(_INLINABLE_TORCH[0])


def is_namedtuple_new(code: types.CodeType, f_globals: dict) -> bool:
    """collections.namedtuple's generated `__new__` (a lambda eval'ed from "<string>" in a namespace
    named namedtuple_<typename>): run as it is when called (kiln models namedtuple construction itself;
    offered, it was traced and gave up on `tuple.__new__`, a frame run eagerly on every rebuild)."""
    return code.co_filename == "<string>" and code.co_name == "<lambda>" and \
        str(f_globals.get("__name__", "")).startswith("namedtuple_")


def is_library_dataclass_method(code: types.CodeType, f_globals: dict) -> bool:
    """A method ``dataclasses`` generated (from "<string>", run in the class's module's globals) for a
    class of a skipped file: run as it is, as the rest of that library (FSDP2's hooks compare their
    FSDPMeshInfo dataclasses with the generated __eq__, which, offered, broke on its fields)."""
    return code.co_filename == "<string>" and "__create_fn__" in code.co_qualname and \
        is_skipped_file(str(f_globals.get("__file__", "")))


def _library_codes() -> frozenset:
    """Standard-library and torch functions traced like user code, though their files are skipped."""
    import collections
    import contextlib

    import torch.backends.mha
    import torch.nn.init

    null = contextlib.nullcontext  # `with cm if cond else nullcontext():` (transformers, many models)
    # TransformerEncoderLayer / MultiheadAttention ask it on every call: traced, it reads the module's
    # flag through a guarded place (torch.jit.is_scripting() is a compile-state query: False)
    fastpath = torch.backends.mha.get_fastpath_enabled
    # pure helpers of torch.nn.init that model code calls in forward (a gain from a nonlinearity's name)
    init_helpers = (torch.nn.init.calculate_gain,)
    return frozenset(f.__code__ for f in (null.__init__, null.__enter__, null.__exit__, fastpath, *init_helpers,
                                          *_class_functions(collections.ChainMap)))


def _class_functions(cls: type) -> list:
    """The Python functions a pure-Python standard-library class defines (its methods, classmethods,
    properties' accessors), traced like user code (collections.ChainMap: plain dict/list code)."""
    found = []
    for attr in vars(cls).values():
        attr = getattr(attr, "__func__", attr)  # classmethod, staticmethod
        if isinstance(attr, property):
            found += [f for f in (attr.fget, attr.fset, attr.fdel) if f is not None]
        elif isinstance(attr, types.FunctionType):
            found.append(getattr(attr, "__wrapped__", attr))  # (reprlib.recursive_repr's wrapper)
    return found


_INLINABLE_CODES = _library_codes()


def is_inlinable(code: types.CodeType) -> bool:
    """Whether a call to a function with this code may be traced into."""
    return code in _INLINABLE_CODES or not is_skipped_file(code.co_filename)
