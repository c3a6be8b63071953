"""Compiling a graph's Triton kernels before their first launch, in parallel worker processes.

Left alone, Triton compiles a ``@jit`` function at its first launch, one kernel after another, in the
calling process. Instead, once a graph's kernel module is loaded, kiln works out for every distinct
kernel and launch config what that launch will ask Triton for (signature, specializations,
constexprs, compile options: computed by the ``JITFunction``'s own binder on stand-in arguments of
the right dtypes, 16-byte aligned like the caching allocator's blocks) and hands these jobs to a
pool of worker processes. Each worker executes the same kernel source and runs Triton's compiler
with exactly those inputs, so the binaries land in Triton's on-disk cache under the key the launch
computes. Then each kernel is warmed here (``JITFunction.warmup``), which finds the binary on disk and
fills Triton's in-memory cache: the first real launch compiles nothing.

Everything here is an optimization: when a job fails or Triton's internals differ from what this
expects, the kernel is compiled at its first launch as before (a kernel that does not compile
reports its error there, with the launch's context).

    Options.compile_workers   # processes (KILN_COMPILE_WORKERS; 0: compile at first launch)
"""
from __future__ import annotations

import os
import pickle
import queue
import struct
import subprocess
import sys
import threading

from kiln.debug.stats import stats


class WorkerPool:
    """Worker processes started with ``python -c`` (not multiprocessing: spawning would re-run the
    user's script, forking a process with CUDA and threads is unsafe). Each reads pickled jobs from
    its stdin and writes pickled results to its stdout; a thread per worker feeds it from a queue.
    Workers exit when their stdin closes, so they end with this process."""

    def __init__(self, workers: int):
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
        cmd = [sys.executable, "-c", "from kiln.codegen.triton.precompile import worker_main; worker_main()"]
        self.procs = [subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
                      for _ in range(workers)]
        self.jobs: queue.Queue = queue.Queue()
        for proc in self.procs:
            threading.Thread(target=self._feed, args=(proc,), daemon=True).start()

    def submit(self, fn_name: str, *args) -> queue.Queue:
        """Run ``fn_name`` (a function of this module) on a worker; the result comes on the returned queue
        (an exception object when the worker failed)."""
        box: queue.Queue = queue.Queue(1)
        self.jobs.put((fn_name, args, box))
        return box

    def _feed(self, proc):
        while True:
            fn_name, args, box = self.jobs.get()
            try:
                data = pickle.dumps((fn_name, args))
                proc.stdin.write(struct.pack("<Q", len(data)) + data)
                proc.stdin.flush()
                (n,) = struct.unpack("<Q", _read_exact(proc.stdout, 8))
                box.put(pickle.loads(_read_exact(proc.stdout, n)))
            except Exception as exc:  # noqa: BLE001 -- a dead worker: this job and the rest fail here
                box.put(exc)
                return


def _read_exact(stream, n: int) -> bytes:
    data = stream.read(n)
    if len(data) != n:
        raise EOFError("compile worker exited")
    return data


def worker_main() -> None:
    """The loop of a worker process."""
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # prints of the compiler must not corrupt the result stream
    while True:
        head = stdin.read(8)
        if len(head) != 8:
            return
        fn_name, args = pickle.loads(_read_exact(stdin, struct.unpack("<Q", head)[0]))
        try:
            result = globals()[fn_name](*args)
        except Exception as exc:  # noqa: BLE001 -- sent back as the result
            result = f"{type(exc).__name__}: {exc}"
        data = pickle.dumps(result)
        stdout.write(struct.pack("<Q", len(data)) + data)
        stdout.flush()


_POOL: WorkerPool | None = None
_POOL_LOCK = threading.Lock()


def pool(workers: int) -> WorkerPool:
    """The process-wide pool (started on first use; its size is fixed then)."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = WorkerPool(workers)
        return _POOL


def warm_pool(workers: int) -> None:
    """Start the workers now (each imports Triton and kiln: a second or two), so that they are ready by
    the time the graph's kernels are generated."""
    if workers > 0:
        pool(workers)


def ready() -> bool:
    return True


def launch_job(jit_fn, path: str, name: str, dtypes, meta: dict):
    """What launching ``jit_fn`` (kernel ``name`` of the source file ``path``) on aligned tensors of
    ``dtypes`` with ``meta`` (constexprs, num_warps, ...) will compile: a picklable job, or None when
    Triton's internals are not the ones this was written for."""
    try:
        from triton import knobs
        from triton.runtime import driver
        from triton.runtime.jit import MockTensor

        kwargs = dict(meta)
        kwargs["debug"] = kwargs.get("debug", jit_fn.debug) or knobs.runtime.debug
        kwargs["instrumentation_mode"] = knobs.compilation.instrumentation_mode
        device = driver.active.get_current_device()
        _, _, target, backend, binder = jit_fn.device_caches[device]
        bound, specialization, options = binder(*[MockTensor(d) for d in dtypes], **kwargs)
        options, signature, constexprs, attrs = jit_fn._pack_args(backend, kwargs, bound, specialization, options)
    except Exception:  # noqa: BLE001 -- another Triton: the launch compiles it
        return None
    return (path, name, signature, constexprs, attrs, dict(options.__dict__), target)


def compile_job(path, name, signature, constexprs, attrs, options, target) -> str | None:
    """Run in a worker: compile one kernel into Triton's cache. None, or the compiler's error."""
    try:
        import triton
        from triton.compiler import ASTSource

        from kiln.codegen.triton.runtime import load_module_file

        ns = load_module_file(path, interpret=False)
        triton.compile(ASTSource(ns[name], signature, constexprs, attrs), target=target, options=options)
    except Exception as exc:  # noqa: BLE001 -- reported by the launch, which compiles it again
        return f"{type(exc).__name__}: {str(exc)[:300]}"
    return None


def precompile(launches, workers: int) -> int:
    """Compile ``launches`` -- (jit function, source path, kernel name, argument dtypes, meta) -- in the
    worker pool, then warm each in this process. Returns how many were compiled by workers."""
    jobs = []
    for fn, path, name, dtypes, meta in launches:
        job = launch_job(fn, path, name, dtypes, meta)
        if job is not None:
            jobs.append(((fn, dtypes, meta), job))
    if not jobs:
        return 0
    with stats.timed("triton compile (workers)"):
        boxes = [pool(workers).submit("compile_job", *job) for _, job in jobs]
        results = [box.get() for box in boxes]
    done = 0
    with stats.timed("triton load"):
        for ((fn, dtypes, meta), _), result in zip(jobs, results):
            if result is not None:  # the worker failed: the first launch compiles it and reports why
                continue
            try:
                fn.warmup(*dtypes, grid=(1,), **meta)
                done += 1
            except Exception:  # noqa: BLE001 -- likewise
                pass
    stats.triton_precompiled += done
    return done
