"""A compile worker process (see ``precompile.py``): run as a script, ``python compile_worker.py``.

It imports Triton and kiln's kernel-module loader (``runtime.py``, loaded by path) and nothing else of
kiln or torch, so it starts in well under a second. It reads length-prefixed pickled jobs
``(function name, args)`` from stdin and writes each result the same way to stdout, until stdin
closes (the parent exited).
"""
from __future__ import annotations

import importlib.util
import os
import pickle
import struct
import sys
import time


def read_exact(stream, n: int) -> bytes:
    data = stream.read(n)
    if len(data) != n:
        raise EOFError("the other end of the compile worker's pipe closed")
    return data


def write_message(stream, obj) -> None:
    data = pickle.dumps(obj)
    stream.write(struct.pack("<Q", len(data)) + data)
    stream.flush()


def read_message(stream):
    (n,) = struct.unpack("<Q", read_exact(stream, 8))
    return pickle.loads(read_exact(stream, n))


_RUNTIME = None


def _runtime():
    """kiln's ``runtime.py`` as a module of its own (importing the ``kiln`` package would import torch)."""
    global _RUNTIME
    if _RUNTIME is None:
        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "runtime.py")
        spec = importlib.util.spec_from_file_location("kiln_triton_runtime_worker", path)
        _RUNTIME = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(_RUNTIME)
    return _RUNTIME


def ready() -> bool:
    import triton.compiler  # noqa: F401

    _runtime()
    return True


def compile_job(path, name, signature, constexprs, attrs, options, target, environment=None, launcher=True):
    """Compile kernel ``name`` of the source file ``path`` into Triton's cache: ``(cache hash, None,
    seconds)``, or ``(None, error, seconds)``; ``seconds``: {"load": executing the module's source (once per
    module and worker), "compile": Triton's compiler, "launcher": the C launcher's build}.

    ``environment``: the parent's Triton environment when it sent the job (``triton_environment()``;
    None: leave this process's as it is). Everything in Triton's cache key must be the parent's, or the
    binary lands under a key the parent's launch never looks up, and the parent compiles every kernel
    again, one at a time (80 s of a Llama training graph's first step). The parent's environment can
    change after the workers started: torch.compile (Inductor) sets ``TRITON_CACHE_DIR`` and
    ``TRITON_PTXAS_PATH`` (its own ptxas, whose version is part of the key) the first time it runs."""
    if environment is not None:
        adopt_environment(environment)
    start = time.perf_counter()
    loaded = start
    try:
        import triton
        from triton.compiler import ASTSource

        ns = _module(path)
        loaded = time.perf_counter()
        compiled = triton.compile(ASTSource(ns[name], signature, constexprs, attrs), target=target, options=options)
    except Exception as exc:  # noqa: BLE001 -- reported by the launch, which compiles it again
        return None, f"{type(exc).__name__}: {str(exc)[:300]}", {"load": loaded - start,
                                                                 "compile": time.perf_counter() - loaded}
    built = time.perf_counter()
    if launcher:  # (False: another job of the batch builds the same launcher: launcher_key)
        build_launcher(compiled, target)
    return compiled.hash, None, {"load": loaded - start, "compile": built - loaded,
                                 "launcher": time.perf_counter() - built}


_MODULES: dict = {}  # source path -> its executed namespace (a module's jobs come to a worker one after another)


def _module(path: str) -> dict:
    ns = _MODULES.get(path)
    if ns is None:
        if len(_MODULES) > 64:
            _MODULES.clear()
        ns = _MODULES[path] = _runtime().load_module_file(path, interpret=False)
    return ns


# What Triton reads from the environment when it compiles (its knobs: TRITON_*, and older names such as
# DISABLE_MMA_V5 or ALLOW_LHS_TMEM_LAYOUT_CONVERSION that are in its cache key too).
TRITON_ENV_PREFIXES = ("TRITON_", "MLIR_", "LLVM_", "DISABLE_", "ALLOW_", "AMDGCN_", "NVPTX_")
TRITON_ENV_NAMES = frozenset({"PTXAS_OPTIONS", "USE_IR_LOC"})


def triton_environment() -> dict:
    """This process's environment variables that Triton's compiler reads."""
    return {k: v for k, v in os.environ.items() if k.startswith(TRITON_ENV_PREFIXES) or k in TRITON_ENV_NAMES}


def adopt_environment(environment: dict) -> None:
    """Make this process's Triton environment exactly ``environment`` (variables it lacks are removed)."""
    for key in triton_environment():
        if key not in environment:
            del os.environ[key]
    os.environ.update(environment)
    refresh_ptxas_version()


_PTXAS_PATH_SEEN: list = []  # the TRITON_PTXAS_PATH that Triton's memoized ptxas version was read with


def refresh_ptxas_version() -> None:
    """Triton memoizes ptxas's version (part of every cache key) the first time a process compiles, and
    never looks again when ``TRITON_PTXAS_PATH`` changes. Forget it when the path is not the one last
    seen here (and the first time: it may have been read before), so parent and workers both key with
    the ptxas the environment names now. Other Triton versions: nothing to do."""
    path = os.environ.get("TRITON_PTXAS_PATH")
    if _PTXAS_PATH_SEEN and _PTXAS_PATH_SEEN[0] == path:
        return
    try:
        from triton.backends.nvidia.compiler import get_ptxas_version

        get_ptxas_version.cache_clear()
    except (ImportError, AttributeError):
        pass
    _PTXAS_PATH_SEEN[:] = [path]


def cache_hash(jit_fn, signature, constexprs, attrs, options, target) -> str | None:
    """The hash under which ``triton.compile`` caches (and looks up) this kernel in this process; None
    when this Triton computes it differently. The parent compares it with the worker's."""
    try:
        import hashlib

        from triton._C.libtriton import get_cache_invalidating_env_vars
        from triton.compiler import ASTSource, make_backend
        from triton.runtime.cache import get_cache_key

        src = ASTSource(jit_fn, signature, constexprs, attrs)
        backend = make_backend(target)
        parsed = backend.parse_options(dict(options, **src.parse_options()))
        key = get_cache_key(src, backend, parsed, env_vars=get_cache_invalidating_env_vars())
        return hashlib.sha256(key.encode("utf-8")).hexdigest()
    except Exception:  # noqa: BLE001 -- another Triton: no check
        return None


def launcher_key(signature: dict) -> tuple:
    """What Triton's C launcher of a kernel depends on: the kinds of its arguments in order (a pointer is
    a Python object whatever its dtype; constexprs are passed through). Kernels with equal keys share
    one launcher, built once."""
    if not isinstance(signature, dict):  # (another Triton: no sharing assumed)
        return (object(),)
    return tuple("*" if isinstance(ty, str) and ty.startswith("*") else repr(ty) for ty in signature.values())


def build_launcher(compiled, target) -> None:
    """Build the kernel's C launcher into Triton's cache too. Triton compiles one (a C file, by gcc: about
    0.1-0.3 s) for each kernel signature when the kernel is first loaded in a process: in the parent,
    one after another, on the first launches (2.3 s of a cold GPT-2 compile on the H200). The parent
    then finds it in the cache by its source's hash. Best effort: on any failure the parent builds it."""
    if getattr(target, "backend", None) != "cuda":
        return
    try:
        from triton.backends.nvidia.driver import CudaLauncher

        CudaLauncher(compiled.src, compiled.metadata)
    except Exception:  # noqa: BLE001 -- the parent builds it at the first launch as before
        pass


JOBS = {"ready": ready, "compile_job": compile_job}


def main() -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]  # its siblings are not modules
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # prints of the compiler must not corrupt the result stream
    while True:
        try:
            fn_name, args = read_message(stdin)
        except EOFError:
            return
        try:
            result = JOBS[fn_name](*args)
        except Exception as exc:  # noqa: BLE001 -- sent back as the result
            result = f"{type(exc).__name__}: {exc}"
        write_message(stdout, result)


if __name__ == "__main__":
    main()
