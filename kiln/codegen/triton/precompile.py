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

import contextlib
import os
import queue
import subprocess
import sys
import threading
import time

from kiln.codegen.triton import compile_worker
from kiln.codegen.triton.runtime import mark_built
from kiln.debug.stats import stats


class WorkerPool:
    """Worker processes running ``compile_worker.py`` as a script: they import Triton but neither torch
    nor kiln, so they start fast (not multiprocessing: spawning would re-run the user's script, and
    forking a process with CUDA and threads is unsafe). A thread per worker feeds it jobs from a
    queue over its stdin/stdout. Workers exit when their stdin closes, so they end with this process."""

    def __init__(self, workers: int):
        cmd = [sys.executable, compile_worker.__file__]
        self.procs = [subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE) for _ in range(workers)]
        self.jobs: queue.Queue = queue.Queue()
        for proc in self.procs:
            threading.Thread(target=self._feed, args=(proc,), daemon=True).start()

    def submit(self, fn_name: str, *args) -> queue.Queue:
        """Run ``compile_worker.JOBS[fn_name](*args)`` on a worker; the result comes on the returned queue
        (an exception object when the worker died)."""
        box: queue.Queue = queue.Queue(1)
        self.jobs.put((fn_name, args, box))
        return box

    def _feed(self, proc):
        dead: Exception | None = None
        while True:
            fn_name, args, box = self.jobs.get()
            if dead is not None and not self.alive():  # no worker left: every job fails at once
                box.put(dead)
                continue
            if dead is not None:  # leave the job to a live worker
                self.jobs.put((fn_name, args, box))
                return
            try:
                compile_worker.write_message(proc.stdin, (fn_name, args))
                box.put(compile_worker.read_message(proc.stdout))
            except Exception as exc:  # noqa: BLE001 -- this worker died: its job fails, the rest go on
                dead = exc
                box.put(exc)

    def alive(self) -> bool:
        return any(p.poll() is None for p in self.procs)


_POOL: WorkerPool | None = None
_POOL_STARTS = 0
MAX_POOL_STARTS = 3  # workers that keep dying (no Triton in the interpreter, say) are not restarted forever
_POOL_LOCK = threading.Lock()


def pool(workers: int) -> WorkerPool:
    """The process-wide pool (started on first use; its size is fixed then). A pool whose workers all
    died (killed, out of memory) is replaced, a few times at most: after that its jobs fail at once
    and every kernel compiles at its launch."""
    global _POOL, _POOL_STARTS
    with _POOL_LOCK:
        if _POOL is None or (not _POOL.alive() and _POOL_STARTS < MAX_POOL_STARTS):
            _POOL = WorkerPool(workers)
            _POOL_STARTS += 1
        return _POOL


def warm_pool(workers: int) -> None:
    """Start the workers now (each imports Triton: about half a second), so that they are ready by the
    time the graph's kernels are generated; and hash Triton's own files in a thread (below)."""
    if workers > 0:
        pool(workers)
    _warm_triton_key()


_KEY_THREAD: threading.Thread | None = None


def prewarm_for_gpu() -> None:
    """At ``kiln.compile`` on a machine with a GPU: start the prewarm thread (``_warm_triton_key``) while
    the first call's frame is captured. A warm start (kernels in the caches) otherwise paid for the
    driver and the hash on its first kernel load: about 0.4 s of a 1.5 s first call (GPT-2, H200)."""
    import importlib.util

    import torch

    if importlib.util.find_spec("triton") is not None and torch.cuda.is_available():
        _warm_triton_key()


def wait_for_prewarm(timeout: float = 10.0) -> None:
    """Before the first kernel is loaded: let the prewarm thread finish. Triton's ``triton_key`` is
    memoized without a lock, so a caller that does not wait computes the hash again, competing with
    the thread for the same files."""
    thread = _KEY_THREAD
    if thread is not None and thread.is_alive():
        thread.join(timeout)


def _warm_triton_key() -> None:
    """Triton's first kernel launch in a process makes its driver (its C utilities loaded) and hashes
    Triton's sources and its 100+ MB library for the cache key (``triton_key``, memoized): about 0.4 s
    on the H100 host, on the critical path of a warm start. Done here once per process, in a daemon
    thread, while the graph is captured, traced and lowered; hashing and reading release the GIL.
    Triton versions without it are left alone."""
    global _KEY_THREAD
    if _KEY_THREAD is not None:
        return

    def warm():  # (Triton is imported in the thread: at kiln.compile it may not be imported yet)
        try:
            from triton.runtime import driver
            from triton.runtime.cache import triton_key
        except ImportError:
            return
        try:
            driver.active  # noqa: B018 -- made on first use
        except Exception:  # noqa: BLE001 -- no GPU driver here: the first launch makes it and reports any error
            pass
        triton_key()

    _KEY_THREAD = threading.Thread(target=warm, name="kiln-triton-key", daemon=True)
    _KEY_THREAD.start()


JOB_TIMEOUT_S = 600  # a job that takes longer (a hung compiler) is left to the launch


def _result(box: queue.Queue):
    try:
        return box.get(timeout=JOB_TIMEOUT_S)
    except queue.Empty:
        return TimeoutError(f"no result from the compile worker in {JOB_TIMEOUT_S} s")


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
    environment = compile_worker.triton_environment()
    return (path, name, signature, constexprs, attrs, dict(options.__dict__), target, environment)


def _expected_cost(launch) -> tuple:
    """Longer kernel files with larger blocks compile longer: the pool takes them first, so that the
    last job to finish is a short one (a batch waits for its slowest job)."""
    _, path, _, _, meta = launch
    try:
        size = os.path.getsize(path)
    except OSError:
        size = 0
    blocks = 1
    for key, value in meta.items():
        if key.endswith("BLOCK") and isinstance(value, int):
            blocks *= value
    return size, blocks, meta.get("num_warps", 4)


SLOW_LOAD_S = 0.2  # loading a worker-built binary takes milliseconds; longer means it was compiled here


_BATCH = threading.local()  # .pending: finishers of the batch open on this thread (batched)


@contextlib.contextmanager
def batched():
    """Within the block, ``precompile`` submits its jobs and returns; the block's end waits for all of
    them. A training graph's backward is traced, lowered and generated while the workers build the
    forward's kernels, and both graphs wait for one slowest job instead of one each. Nested blocks
    belong to the outermost."""
    if getattr(_BATCH, "pending", None) is not None:
        yield
        return
    _BATCH.pending = []
    try:
        yield
    finally:
        pending, _BATCH.pending = _BATCH.pending, None
        for finish in pending:
            finish()


def precompile(launches, workers: int, built=()) -> None:
    """Compile ``launches`` -- (jit function, kernel file, function name, argument dtypes, meta) -- in
    the worker pool, then warm each in this process and mark the kernel files ``built`` as built
    (``runtime.mark_built``): now, or at the end of the enclosing ``batched`` block."""
    wait_for_prewarm()
    compile_worker.refresh_ptxas_version()  # key with the ptxas the environment names now, as the workers do
    jobs = []
    launchers = set()  # one job per launcher builds it (workers running at once built the same one each)
    for fn, path, name, dtypes, meta in sorted(launches, key=_expected_cost, reverse=True):
        job = launch_job(fn, path, name, dtypes, meta)
        if job is not None:
            key = compile_worker.launcher_key(job[2])
            jobs.append(((fn, dtypes, meta), job + (key not in launchers,)))
            launchers.add(key)
    boxes = [pool(workers).submit("compile_job", *job) for _, job in jobs] if jobs else []

    def finish():
        _finish(jobs, boxes)
        for path in built:
            mark_built(path)

    pending = getattr(_BATCH, "pending", None)
    if pending is not None:
        pending.append(finish)
    else:
        finish()


def _finish(jobs, boxes) -> None:
    """Wait for the jobs' results, then load each compiled kernel here (``JITFunction.warmup``)."""
    if not jobs:
        return
    with stats.timed("triton compile (workers)"):
        results = [_result(box) for box in boxes]
    done = 0
    with stats.timed("triton load"):
        for ((fn, dtypes, meta), job), result in zip(jobs, results):
            if isinstance(result, tuple) and len(result) > 2:
                seconds = result[2]
                stats.triton_worker_seconds.update(seconds)
                stats.triton_worker_seconds["jobs"] += 1
                stats.triton_worker_seconds["slowest"] = max(stats.triton_worker_seconds["slowest"],
                                                             sum(seconds.values()))
                stats.note_slow_build(sum(seconds.values()), job[1], meta)
            if not isinstance(result, tuple) or result[0] is None:
                continue  # the worker failed: the first launch compiles it and reports why
            expected = compile_worker.cache_hash(fn, *job[2:7])
            if expected is not None and expected != result[0]:
                # the worker's binary is not where this process looks: the warm-up below compiles it here
                stats.triton_key_mismatches.append(getattr(fn, "__name__", str(fn)))
            start = time.perf_counter()
            try:
                fn.warmup(*dtypes, grid=(1,), **meta)
                done += 1
            except Exception:  # noqa: BLE001 -- likewise
                pass
            took = time.perf_counter() - start
            if took > SLOW_LOAD_S:  # a load that compiled after all (Triton's cache missed the worker's binary)
                stats.triton_slow_loads.append((round(took, 3), getattr(fn, "__name__", str(fn))))
    stats.triton_precompiled += done
