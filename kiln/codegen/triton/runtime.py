"""Loading generated Triton kernels: a content-addressed source file per graph, executed once per
process and target.

The source of all kernels of a graph is written to ``<cache_dir>/triton/<hash>.py`` (the hash covers
the source and Triton's version) and executed with ``jit``, ``kh`` (kiln's device helpers) and
``libdevice`` bound for the target: compiled GPU code (``triton.jit``: Triton's own cache keeps the
binaries, so a warm process compiles nothing) or Triton's interpreter for CPU tensors. Executing the
file from disk keeps ``inspect.getsource`` working, which both need.
"""
from __future__ import annotations

import functools
import hashlib
import os
import tempfile
import types

MODULE_HEADER = (
    "# kiln: generated Triton kernels. Executed by kiln.codegen.triton.runtime with these names bound:\n"
    "#   tl (triton.language), jit (triton.jit, or the interpreter's), kh (kiln device helpers), libdevice\n"
)
_HELPERS_PATH = os.path.join(os.path.dirname(__file__), "device_helpers.py")


def triton_available() -> str | None:
    """None when Triton can be imported, else why not."""
    try:
        import triton  # noqa: F401
        import triton.language  # noqa: F401
    except Exception as exc:  # ImportError, or a broken install
        return f"triton is not importable ({type(exc).__name__}: {exc})"
    return None


@functools.lru_cache(maxsize=None)
def _patch_interpreter_index() -> None:
    """Triton's interpreter holds a scalar kernel argument as a 1-element array, whose ``__index__``
    fails with numpy 2 (``range(0, s0, RBLOCK)`` over a size argument): read its one element instead."""
    import triton.runtime.interpreter as interp

    if getattr(interp, "_kiln_index_patched", False):
        return
    original = interp._patch_lang_tensor

    def patched(tensor, scope):
        original(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.reshape(-1)[0]))

    interp._patch_lang_tensor = patched
    interp._kiln_index_patched = True


@functools.lru_cache(maxsize=None)
def _target_names(interpret: bool) -> dict:
    """The names a kernel file is executed with (``MODULE_HEADER``), made once per process and target:
    the device helpers module ``kh`` (about 30 jit functions, each of which Triton tokenizes its source
    file for when it is made) is shared by every kernel file. Made per file, it cost 13 ms a file: 3.2 s
    of a cold ResNet-50 training compile's 388 kernel files, and again when a warm process loads them."""
    import triton
    import triton.language as tl

    if interpret:
        from triton.runtime.interpreter import InterpretedFunction

        from kiln.codegen.triton import interp_libdevice as libdevice

        _patch_interpreter_index()

        def jit(fn=None, **options):  # (the interpreter takes no options: do_not_specialize is for the compiler)
            return InterpretedFunction(fn) if fn is not None else InterpretedFunction
    else:
        from triton.language.extra import libdevice

        jit = triton.jit
    names = {"tl": tl, "triton": triton, "jit": jit, "libdevice": libdevice}
    helpers = types.ModuleType("kiln_triton_helpers" + ("_interpreted" if interpret else ""))
    helpers.__file__ = _HELPERS_PATH
    helpers.__dict__.update(names)
    with open(_HELPERS_PATH) as f:
        exec(compile(f.read(), _HELPERS_PATH, "exec"), helpers.__dict__)
    if interpret:
        helpers.to_bfloat16 = libdevice.to_bfloat16
        helpers.dot_operand = libdevice.dot_operand
        helpers.check_index = libdevice.check_index
        helpers.take_index_error = libdevice.take_index_error
    names["kh"] = helpers
    return names


def module_path(source: str, options) -> str:
    import triton

    key = hashlib.sha256("\0".join([source, triton.__version__]).encode()).hexdigest()
    return os.path.join(options.cache_dir, "triton", key[:2], f"kiln_{key[:40]}.py")


_LOADED: dict[tuple[str, bool], dict] = {}


def load_module(source: str, options, interpret: bool) -> tuple[dict, str, bool]:
    """The namespace of the executed kernel source (cached per process), the source file's path, and
    whether its kernels still need building: this process had not loaded the module, and either it
    wrote the file (no process compiled these kernels before) or no process has finished building
    them (``mark_built``: another rank of a distributed job may have written the file a moment ago
    and still be compiling)."""
    path = module_path(source, options)
    ns = _LOADED.get((path, interpret))
    if ns is not None:
        return ns, path, False
    from kiln.debug.stats import stats  # imported here: compile workers load this file alone, without kiln

    written = not _holds(path, source)  # missing, or truncated/overwritten: written again
    if written:
        _write(path, source)
        stats.kernel_compiles += 1
    else:
        stats.kernel_cache_hits += 1
    ns = load_module_file(path, interpret)
    _LOADED[(path, interpret)] = ns
    return ns, path, written or not interpret and not _built(path)


BUILT_SUFFIX = ".built"  # beside a module whose kernels a process finished building (mark_built)


def mark_built(path: str) -> None:
    """Record that this module's kernels (every launch config its first calls use) were built into
    Triton's cache; a later process loading the module skips the worker pool. A marker that cannot be
    written only costs that process a pass through the pool (its jobs then hit Triton's cache)."""
    try:
        with open(path + BUILT_SUFFIX, "w") as f:
            f.write(_device_name())
    except OSError:
        pass


def _built(path: str) -> bool:
    try:
        with open(path + BUILT_SUFFIX) as f:
            return f.read() == _device_name()
    except OSError:
        return False


def _device_name() -> str:
    """Binaries are per GPU kind: a marker written on another GPU does not count here."""
    import torch

    return torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"


def load_module_file(path: str, interpret: bool) -> dict:
    """Execute the kernel source file at ``path`` for the target (also in compile workers)."""
    ns = dict(_target_names(interpret))
    ns["__name__"] = "kiln_triton_" + os.path.basename(path)[5:21] + ("_interpreted" if interpret else "")
    ns["__file__"] = path
    with open(path) as f:
        text = f.read()
    exec(compile(text, path, "exec"), ns)
    return ns


def _holds(path: str, source: str) -> bool:
    try:
        with open(path) as f:
            return f.read() == source
    except (OSError, UnicodeDecodeError):
        return False


def _write(path: str, source: str) -> None:
    directory = os.path.dirname(path)
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=".py", dir=directory)
    with os.fdopen(fd, "w") as f:
        f.write(source)
    os.replace(tmp, path)  # atomic: a concurrent process sees the whole file or none
