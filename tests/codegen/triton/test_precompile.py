"""Compiling Triton kernels ahead of their first launch: identical kernels share one function, the
worker pool compiles into Triton's cache, and on a GPU a new graph's kernels come precompiled."""
import os

import pytest
import torch

pytest.importorskip("triton")

from kiln.codegen.triton import compile_worker, precompile  # noqa: E402
from kiln.debug.stats import stats  # noqa: E402
from tests.codegen.triton.helpers import check, compile_and_check_cuda, cuda  # noqa: E402
from tests.codegen.triton.test_offline import needs_ptxas  # noqa: E402


def test_identical_kernels_share_one_function():
    # two layers' worth of the same computation on buffers of the same shape: two kernels, one body
    def f(x, y):
        return torch.relu(torch.softmax(x, -1) * 2), torch.relu(torch.softmax(y, -1) * 2)

    cg = check(f, torch.randn(4, 16), torch.randn(4, 16))
    first, second = cg.kernels.values()
    assert first.name != second.name
    assert second.fn.fn is first.fn.fn and second.fn.leader is first.fn


def test_identical_kernels_of_different_graphs_share_one_kernel_file():
    # a backward compiled again with an absent gradient, or a model's forward compiled twice, repeats most
    # kernels of an earlier graph: each distinct body is one file named by its content, so Triton (which keys
    # binaries by a function's source, name and line) compiles it once
    from kiln.codegen.triton.build import _body_key, canonical_kernel

    def f(x):
        return torch.relu(torch.softmax(x, -1) * 2)

    def g(x, y):  # the same kernel, then one more
        return torch.relu(torch.softmax(x, -1) * 2), torch.sigmoid(y)

    (first,) = check(f, torch.randn(4, 16)).kernels.values()
    again, other = check(g, torch.randn(4, 16), torch.randn(4, 16)).kernels.values()
    assert again.fn.fn is first.fn.fn and other.fn.fn is not first.fn.fn
    name, source = canonical_kernel(first, _body_key(first))
    assert first.fn.fn.__name__ == name and name.startswith(first.name.rsplit("_", 1)[0] + "_")
    assert first.name not in source and f"def {name}(" in source
    assert not [line for line in source.splitlines()[2:] if line.lstrip().startswith("#")]  # (no comments)


def test_slowest_builds_are_kept_in_order():
    stats.reset()
    for seconds, name in [(0.5, "a"), (3.0, "b"), (1.0, "c")] + [(0.1, f"k{i}") for i in range(10)]:
        stats.note_slow_build(seconds, name, {"XBLOCK": 64, "num_warps": 4})
    builds = stats.triton_slowest_builds
    assert [b[1] for b in builds[:3]] == ["b", "c", "a"] and len(builds) == stats.SLOWEST_BUILDS_KEPT
    assert builds[0][2] == "XBLOCK=64,num_warps=4"


def test_different_kernels_keep_their_own_function():
    def f(x, y):
        return torch.softmax(x, -1), torch.relu(y) + 1

    cg = check(f, torch.randn(4, 16), torch.randn(4, 16))
    first, second = cg.kernels.values()
    assert second.fn.fn is not first.fn.fn and second.fn.leader is None


_KERNEL = """
@jit
def triton_add_one(in_ptr0, out_ptr0, XBLOCK: tl.constexpr):
    xindex = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)
    tl.store(out_ptr0 + xindex, tl.load(in_ptr0 + xindex) + 1.0, xindex < 100)

@jit
def triton_broken(in_ptr0, XBLOCK: tl.constexpr):
    tl.store(in_ptr0, undefined_name)
"""


@needs_ptxas
def test_worker_compiles_into_tritons_cache(tmp_path, monkeypatch):
    from triton.backends.compiler import GPUTarget

    from kiln.codegen.triton.runtime import MODULE_HEADER

    source = tmp_path / "kiln_test.py"
    source.write_text(MODULE_HEADER + _KERNEL)
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton-cache"))
    pool = precompile.WorkerPool(1)  # its own pool: the environment above is the workers'
    try:
        assert pool.submit("ready").get(timeout=120) is True
        sig = {"in_ptr0": "*fp32", "out_ptr0": "*fp32", "XBLOCK": "constexpr"}
        env = compile_worker.triton_environment()  # the parent's, sent with each job
        ok = pool.submit("compile_job", str(source), "triton_add_one", sig, {"XBLOCK": 128}, {},
                         {"num_warps": 4}, GPUTarget("cuda", 90, 32), env)
        broken = pool.submit("compile_job", str(source), "triton_broken", {"in_ptr0": "*fp32", "XBLOCK": "constexpr"},
                             {"XBLOCK": 128}, {}, {"num_warps": 4}, GPUTarget("cuda", 90, 32), env)
        built, error, seconds = ok.get(timeout=300)
        assert error is None and len(built) == 64
        assert seconds["compile"] > 0 and seconds["launcher"] >= 0  # (stats.triton_worker_seconds)
        built, error, _ = broken.get(timeout=300)
        assert built is None and "undefined_name" in error
    finally:
        for proc in pool.procs:
            proc.stdin.close()
            proc.wait(timeout=30)
    cached = [f for _, _, files in os.walk(tmp_path / "triton-cache") for f in files]
    assert any(f.endswith(".cubin") for f in cached), cached
    if torch.cuda.is_available():  # its C launcher too (built with libcuda: only where there is one)
        assert any(f.startswith("__triton_launcher") for f in cached), cached


@needs_ptxas
def test_worker_compiles_into_the_cache_dir_the_job_names(tmp_path, monkeypatch):
    # the parent's TRITON_CACHE_DIR changed after the workers started (torch.compile sets it the first
    # time it runs a kernel): the binary must land where the parent's launch looks, not in the
    # directory of the worker's own environment
    from triton.backends.compiler import GPUTarget

    from kiln.codegen.triton.runtime import MODULE_HEADER

    source = tmp_path / "kiln_test.py"
    source.write_text(MODULE_HEADER + _KERNEL)
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "at-start"))
    pool = precompile.WorkerPool(1)
    try:
        sig = {"in_ptr0": "*fp32", "out_ptr0": "*fp32", "XBLOCK": "constexpr"}
        job = pool.submit("compile_job", str(source), "triton_add_one", sig, {"XBLOCK": 64}, {}, {"num_warps": 4},
                          GPUTarget("cuda", 90, 32), {"TRITON_CACHE_DIR": str(tmp_path / "later")})
        assert job.get(timeout=300)[1] is None
    finally:
        for proc in pool.procs:
            proc.stdin.close()
            proc.wait(timeout=30)
    later = [f for _, _, files in os.walk(tmp_path / "later") for f in files]
    assert any(f.endswith(".cubin") for f in later), later
    assert not (tmp_path / "at-start").exists()


def test_jobs_carry_the_parents_triton_environment(monkeypatch):
    monkeypatch.setenv("TRITON_CACHE_DIR", "/somewhere/else")
    monkeypatch.setenv("TRITON_PTXAS_PATH", "/some/ptxas")  # torch.compile points Triton at torch's own ptxas
    monkeypatch.setenv("PATH_UNRELATED_TO_TRITON", "x")
    cg = check(lambda x: torch.relu(x) + 1, torch.randn(8))
    (k,) = cg.kernels.values()
    job = precompile.launch_job(k.fn.fn, "path.py", k.name, [torch.float32, torch.float32], k.fn.config.kwargs())
    if job is None:
        pytest.skip("this Triton's internals are not the ones launch_job was written for")
    env = job[-1]
    assert env["TRITON_CACHE_DIR"] == "/somewhere/else" and env["TRITON_PTXAS_PATH"] == "/some/ptxas"
    assert "PATH_UNRELATED_TO_TRITON" not in env


def test_worker_adopts_the_parents_triton_environment_exactly(monkeypatch):
    # (on a copy of this process's environment and ptxas memo: adopting removes every other Triton variable)
    monkeypatch.setattr(os, "environ", os.environ.copy())
    monkeypatch.setattr(compile_worker, "_PTXAS_PATH_SEEN", [])
    nvidia = pytest.importorskip("triton.backends.nvidia.compiler")
    monkeypatch.setattr(nvidia.get_ptxas_version, "cache_clear", lambda: None)
    monkeypatch.setenv("TRITON_ONLY_IN_WORKER", "1")
    monkeypatch.setenv("DISABLE_MMA_V5", "1")  # (in Triton's cache key, without its prefix)
    monkeypatch.setenv("TRITON_CACHE_DIR", "/old")
    monkeypatch.setenv("TRITON_PTXAS_PATH", "/before")  # (so that the test's end restores it)
    compile_worker.adopt_environment({"TRITON_CACHE_DIR": "/new", "TRITON_PTXAS_PATH": "/p"})
    assert os.environ["TRITON_CACHE_DIR"] == "/new" and os.environ["TRITON_PTXAS_PATH"] == "/p"
    assert "TRITON_ONLY_IN_WORKER" not in os.environ and "DISABLE_MMA_V5" not in os.environ


def test_memoized_ptxas_version_is_forgotten_when_the_ptxas_path_changes(monkeypatch):
    nvidia = pytest.importorskip("triton.backends.nvidia.compiler")
    calls = []
    monkeypatch.setattr(nvidia.get_ptxas_version, "cache_clear", lambda: calls.append(1))
    monkeypatch.setattr(compile_worker, "_PTXAS_PATH_SEEN", [])
    monkeypatch.delenv("TRITON_PTXAS_PATH", raising=False)
    compile_worker.refresh_ptxas_version()  # first time: it may have been read before
    compile_worker.refresh_ptxas_version()  # unchanged
    monkeypatch.setenv("TRITON_PTXAS_PATH", "/torch/bin/ptxas")
    compile_worker.refresh_ptxas_version()
    assert len(calls) == 2


@needs_ptxas
def test_parent_computes_the_workers_cache_hash(tmp_path, monkeypatch):
    # the check that tells a worker-built binary the parent will not find (stats.triton_key_mismatches)
    from triton.backends.compiler import GPUTarget

    from kiln.codegen.triton.runtime import MODULE_HEADER, load_module_file

    source = tmp_path / "kiln_test.py"
    source.write_text(MODULE_HEADER + _KERNEL)
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "cache"))
    fn = load_module_file(str(source), interpret=False)["triton_add_one"]
    sig = {"in_ptr0": "*fp32", "out_ptr0": "*fp32", "XBLOCK": "constexpr"}
    args = (sig, {"XBLOCK": 32}, {}, {"num_warps": 4}, GPUTarget("cuda", 90, 32))
    built, error, _ = compile_worker.compile_job(str(source), "triton_add_one", *args)
    assert error is None
    assert compile_worker.cache_hash(fn, *args) == built
    assert compile_worker.cache_hash(fn, sig, {"XBLOCK": 64}, *args[2:]) != built


def test_dead_workers_fail_jobs_instead_of_hanging():
    pool = precompile.WorkerPool(2)
    pool.procs[0].kill()
    pool.procs[0].wait()
    # the live worker takes the jobs; the dead one's feeder fails at most the job it held
    results = [pool.submit("ready").get(timeout=120) for _ in range(4)]
    assert sum(r is True for r in results) >= 3
    pool.procs[1].kill()
    pool.procs[1].wait()
    assert not pool.alive()
    results = [pool.submit("ready").get(timeout=60) for _ in range(3)]  # nobody left: all fail, none hangs
    assert all(isinstance(r, Exception) for r in results)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_new_cuda_graph_is_precompiled_by_workers(tmp_path):
    def f(x, y):
        return torch.softmax(x * y, -1), (x - y).abs().sum(0)

    before = stats.triton_precompiled
    compile_and_check_cuda(f, cuda(64, 300), cuda(64, 300), atol=1e-5, rtol=1e-5, cache_dir=str(tmp_path),
                           compile_workers=2)
    assert stats.triton_precompiled > before


def test_pool_is_restarted_a_few_times_at_most(monkeypatch):
    monkeypatch.setattr(precompile, "_POOL", None)
    monkeypatch.setattr(precompile, "_POOL_STARTS", 0)
    pools = []
    for _ in range(precompile.MAX_POOL_STARTS + 2):
        p = precompile.pool(1)
        for proc in p.procs:
            proc.kill()
            proc.wait()
        pools.append(p)
    assert len({id(p) for p in pools}) == precompile.MAX_POOL_STARTS
    assert isinstance(precompile.pool(1).submit("ready").get(timeout=60), Exception)


def test_triton_cache_key_is_hashed_in_a_thread():
    from triton.runtime.cache import triton_key

    from kiln.codegen.triton import precompile

    precompile.warm_pool(0)  # no workers; the key thread still starts, once per process
    thread = precompile._KEY_THREAD
    assert thread is not None and thread.daemon
    thread.join(timeout=60)
    assert triton_key.cache_info().currsize == 1  # memoized: the first launch does not hash again
    precompile.warm_pool(0)
    assert precompile._KEY_THREAD is thread


def test_kernels_whose_arguments_are_of_the_same_kinds_share_one_launcher():
    # Triton's C launcher passes every pointer as a Python object: it depends on the kinds of the
    # arguments only, and one job per kind builds it (workers running at once each built the same one)
    a = {"in_ptr0": "*fp32", "out_ptr0": "*bf16", "XBLOCK": "constexpr"}
    b = {"x": "*i64", "y": "*fp16", "XBLOCK": "constexpr"}
    c = {"in_ptr0": "*fp32", "out_ptr0": "*fp32", "ks0": "i32", "XBLOCK": "constexpr"}
    assert compile_worker.launcher_key(a) == compile_worker.launcher_key(b)
    assert compile_worker.launcher_key(a) != compile_worker.launcher_key(c)


def test_one_job_per_launcher_builds_it(monkeypatch):
    sent = []

    class Pool:
        def submit(self, fn_name, *job):
            sent.append(job)
            box = __import__("queue").Queue()
            box.put((None, "not compiled here", {"compile": 0.0}))
            return box

    sig = {"in_ptr0": "*fp32", "out_ptr0": "*fp32", "XBLOCK": "constexpr"}
    monkeypatch.setattr(precompile, "wait_for_prewarm", lambda: None)
    monkeypatch.setattr(precompile, "pool", lambda workers: Pool())
    monkeypatch.setattr(precompile, "launch_job", lambda fn, path, name, dtypes, meta: (path, name, dict(sig), meta,
                                                                                      {}, {}, None, {}))
    launches = [(None, "m.py", f"k{i}", (), {"XBLOCK": xb}) for i in range(2) for xb in (64, 128)]
    precompile.precompile(launches, workers=2)
    assert [job[-1] for job in sent] == [True, False, False, False]


def test_batched_precompiles_wait_at_the_end_of_the_block(monkeypatch):
    # a training graph's backward is generated while the workers build the forward's kernels
    import queue

    boxes, marked = [], []

    class Pool:
        def submit(self, fn_name, *job):
            boxes.append(queue.Queue(1))
            return boxes[-1]

    sig = {"in_ptr0": "*fp32", "XBLOCK": "constexpr"}
    monkeypatch.setattr(precompile, "wait_for_prewarm", lambda: None)
    monkeypatch.setattr(precompile, "pool", lambda workers: Pool())
    monkeypatch.setattr(precompile, "mark_built", marked.append)
    monkeypatch.setattr(precompile, "launch_job", lambda fn, path, name, dtypes, meta: (path, name, dict(sig), meta,
                                                                                      {}, {}, None, {}))
    with precompile.batched():
        precompile.precompile([(None, "fwd.py", "k", (), {"XBLOCK": 64})], workers=2, built=["fwd.py"])
        with precompile.batched():  # (nested: the outermost block waits)
            precompile.precompile([(None, "bwd.py", "k", (), {"XBLOCK": 64})], workers=2, built=["bwd.py"])
        assert len(boxes) == 2 and marked == []  # submitted, nothing waited for
        for box in boxes:
            box.put((None, "not compiled here", {"compile": 0.0}))
    assert marked == ["fwd.py", "bwd.py"]


def test_kernel_files_share_one_helpers_module(tmp_path):
    """The device helpers (``kh``: some 30 jit functions, each tokenizing its source file when made) are
    made once per process and target, not once per kernel file (13 ms a file, 3 s for a ResNet-50
    training graph's 388 files); a helper's source is the same either way, and so is Triton's key."""
    from kiln.codegen.triton.runtime import MODULE_HEADER, load_module_file

    paths = []
    for i in range(2):
        source = tmp_path / f"kiln_test{i}.py"
        source.write_text(MODULE_HEADER + _KERNEL)
        paths.append(str(source))
    first, second = (load_module_file(p, interpret=False) for p in paths)
    assert first["kh"] is second["kh"] and first["triton_add_one"] is not second["triton_add_one"]
    assert load_module_file(paths[0], interpret=True)["kh"] is not first["kh"]  # (per target)
