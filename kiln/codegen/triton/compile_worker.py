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


def compile_job(path, name, signature, constexprs, attrs, options, target, cache_dir=None) -> str | None:
    """Compile kernel ``name`` of the source file ``path`` into Triton's cache. None, or the error.

    ``cache_dir``: the parent's ``TRITON_CACHE_DIR`` when it sent the job (None: unset), where the
    parent's launch will look for the binary. The parent's environment can change after the workers
    started: torch.compile (Inductor) sets ``TRITON_CACHE_DIR`` in its process the first time it runs a
    kernel. Binaries compiled into another directory were never found, and the parent compiled every
    kernel again, one at a time (94 s of a Llama training graph's first step)."""
    if cache_dir is None:
        os.environ.pop("TRITON_CACHE_DIR", None)
    else:
        os.environ["TRITON_CACHE_DIR"] = cache_dir
    try:
        import triton
        from triton.compiler import ASTSource

        ns = _runtime().load_module_file(path, interpret=False)
        compiled = triton.compile(ASTSource(ns[name], signature, constexprs, attrs), target=target, options=options)
    except Exception as exc:  # noqa: BLE001 -- reported by the launch, which compiles it again
        return f"{type(exc).__name__}: {str(exc)[:300]}"
    build_launcher(compiled, target)
    return None


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
