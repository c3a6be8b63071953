"""The per-call path of a compiled function: cache hits found by the C hook without calling the
compiler (its `_kiln_tables`), the C call wrapper (hook.HookedCall), and tensor guards read on the TensorImpl
by the run-time-built library (capture/tensor_guard_build.py)."""
from __future__ import annotations

import gc
import os
import weakref

import pytest
import torch

import kiln
from kiln.capture import hook, tensor_guard_build
from kiln.options import Options

pytestmark = pytest.mark.skipif(not hook.available(), reason="kiln.capture._eval_frame not built")


def _add_mul(x, y):
    return (x + y) * 2


def test_cache_hits_are_found_by_the_hook_and_counted():
    kiln.reset()
    f = kiln.compile(_add_mul, backend="aot_eager")
    x, y = torch.randn(3), torch.randn(3)
    f(x, y)
    hits, fast = kiln.stats.cache_hits, hook.fast_hits()
    for _ in range(5):
        torch.testing.assert_close(f(x, y), _add_mul(x, y))
    assert hook.fast_hits() - fast == 5
    assert kiln.stats.cache_hits - hits == 5
    # a guard that fails: the compiler is called and compiles a second entry, which the hook then finds
    z = torch.randn(4)
    torch.testing.assert_close(f(z, z), _add_mul(z, z))
    fast = hook.fast_hits()
    torch.testing.assert_close(f(z, z), _add_mul(z, z))
    assert hook.fast_hits() - fast == 1
    assert len(kiln.api.config_of(f).compiler.cache[_add_mul.__code__]) == 2


def test_reset_removes_the_hooks_tables():
    f = kiln.compile(_add_mul, backend="aot_eager")
    x = torch.randn(2)
    f(x, x)
    kiln.reset()
    fast, compiled = hook.fast_hits(), kiln.stats.frames_compiled
    torch.testing.assert_close(f(x, x), _add_mul(x, x))
    assert hook.fast_hits() == fast  # compiled again, not found in a stale table
    assert kiln.stats.frames_compiled == compiled + 1


def test_a_freed_compiled_function_frees_what_its_guards_hold():
    """The tables hang off the code objects, which outlive the compiled function: they must not keep
    its compiler, graphs or the modules its guards refer to alive."""
    kiln.reset()
    module = torch.nn.Linear(3, 3)
    compiled = kiln.compile(module, backend="aot_eager")
    with torch.no_grad():
        compiled(torch.randn(2, 3))
        compiled(torch.randn(2, 3))
    alive = weakref.ref(module)
    del module, compiled
    gc.collect()
    assert alive() is None


def test_a_module_holding_its_own_compiled_method_is_freed():
    """The guards hold the module, the module holds the compiled function, which holds the compiler and
    its tables: a cycle the garbage collector must see (the tables once hung off the code objects, where
    it could not, and kept all of it alive)."""
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(3, 3)
            self.fast = kiln.compile(self.body, backend="aot_eager")

        def body(self, x):
            return self.lin(x).relu()

    kiln.reset()
    net = Net()
    with torch.no_grad():
        net.fast(torch.randn(2, 3))
        net.fast(torch.randn(2, 3))
    alive = weakref.ref(net)
    del net
    gc.collect()
    assert alive() is None


def test_a_cached_function_called_inside_a_non_reentrant_checkpoint_runs_eagerly():
    """The hook's tables are not read while saved-tensor hooks are active: the compiler decides, and a
    non-reentrant checkpoint's forward runs eagerly (its backward recomputes it eagerly)."""
    from torch.utils.checkpoint import checkpoint

    def block(x, w):
        return torch.tanh(x @ w) * 2

    kiln.reset()
    compiled = kiln.compile(block, backend="aot_eager")
    x, w = torch.randn(4, 4), torch.randn(4, 4, requires_grad=True)
    compiled(x, w)  # cached
    fast = hook.fast_hits()
    out = checkpoint(compiled, x, w, use_reentrant=False)
    out.sum().backward()
    want_w = w.grad.clone()
    w.grad = None
    block(x, w).sum().backward()
    torch.testing.assert_close(want_w, w.grad)
    assert hook.fast_hits() == fast
    assert any("checkpoint" in reason for reason in kiln.stats.eager_fallbacks)


def test_compiled_function_wrapper_keeps_the_function_surface():
    def scaled(x, *, by=2.0):
        """doc of scaled"""
        return x * by

    kiln.reset()
    f = kiln.compile(scaled, backend="aot_eager")
    assert f.__name__ == "scaled" and f.__doc__ == "doc of scaled" and f.__wrapped__ is scaled
    assert isinstance(f, hook.HookedCall) and f.hooked_fn is scaled
    x = torch.randn(3)
    torch.testing.assert_close(f(x, by=3.0), x * 3.0)
    torch.testing.assert_close(f(x), x * 2.0)

    class Holder:
        method = kiln.compile(lambda self, x: x + 1, backend="aot_eager")

    torch.testing.assert_close(Holder().method(x), x + 1)


def test_the_callback_is_restored_when_the_compiled_function_raises():
    def bad(x):
        raise ValueError("from the user's code")

    f = kiln.compile(bad, backend="aot_eager")
    with pytest.raises(ValueError, match="from the user's code"):
        f(torch.randn(2))
    assert hook.get_callback() is None


def test_call_with_callback_sets_and_restores():
    seen = []

    def cb(code, *rest):
        seen.append(code.co_name)
        return None

    def inner(a, b=1):
        return a + b

    assert hook.call_with_callback(cb, inner, 1, b=2) == 3
    assert seen == ["inner"] and hook.get_callback() is None
    with pytest.raises(TypeError):
        hook.call_with_callback(42, inner, 1)


# ---- tensor guards read on the TensorImpl ---------------------------------------------------------


@pytest.fixture(scope="module")
def tensor_guard_library():
    tensor_guard_build.ensure(Options.from_any(None))
    if not tensor_guard_build.wait(300):
        pytest.skip(f"the tensor guard library is not available here: {tensor_guard_build.status()}")
    yield
    assert tensor_guard_build.status().startswith("loaded")


def _expected(t):
    return (type(t), t.dtype, t.device, tuple(t.size()), tuple(t.stride()), t.requires_grad)


def _both_ways(t, want):
    """tensor_matches through the library and through the attributes, with how many tensors the library
    decided."""
    reads = hook.tensor_guard_reads()
    fast = hook._C.tensor_matches(t, want)
    decided = hook.tensor_guard_reads() - reads
    capsule = tensor_guard_build.capsule()
    hook.set_tensor_guard(None)
    try:
        slow = hook._C.tensor_matches(t, want)
    finally:
        hook.set_tensor_guard(capsule)
    return fast, slow, decided


def test_tensor_guard_library_agrees_with_the_attributes(tensor_guard_library):
    base = torch.randn(4, 6)
    cases = [
        base, base.t(), base[:, ::2], base.double(), base.to(torch.int32), torch.randn(4, 6, requires_grad=True),
        torch.nn.Parameter(torch.randn(4, 6)), torch.empty(0, 3), torch.tensor(3.0), base.to("meta"),
        base.unsqueeze(0).expand(2, 4, 6), torch.randn(4, 6).to_sparse(),
    ]
    decided = 0
    for t in cases:
        for other in cases:
            if t.layout != torch.strided or other.layout != torch.strided:
                want = (type(other), other.dtype, other.device, tuple(other.size()), (1, 1), other.requires_grad)
            else:
                want = _expected(other)
            fast, slow, n = _both_ways(t, want)
            assert fast == slow, (t.shape, t.stride() if t.layout == torch.strided else "sparse", want)
            decided += n
    assert decided > 0
    # a difference in one field only
    t = torch.randn(2, 3)
    want = _expected(t)
    assert _both_ways(t, want)[:2] == (True, True)
    for i, changed in [(1, torch.float64), (2, torch.device("meta")), (3, (2, 4)), (4, (1, 2)), (5, True)]:
        other = want[:i] + (changed,) + want[i + 1:]
        assert _both_ways(t, other) == (False, False, 1), i


def test_tensor_guard_library_leaves_subclasses_to_the_attributes(tensor_guard_library):
    class Tagged(torch.Tensor):
        pass

    t = torch.randn(2, 2).as_subclass(Tagged)
    want = (torch.Tensor, t.dtype, t.device, (2, 2), (2, 1), False)
    assert _both_ways(t, want) == (False, False, 0)  # (its type differs: decided before the library)
    held = (t.dtype, t.device, (2, 2), (2, 1), False)
    reads = hook.tensor_guard_reads()
    assert hook._C.held_tensors_match((t,), (held,)) is True
    assert hook.tensor_guard_reads() == reads  # a subclass's attributes are read in Python


def test_a_corrupted_or_failing_library_falls_back(tmp_path):
    bad = tmp_path / "_tensor_guard_bad.so"
    bad.write_bytes(os.urandom(256))
    capsule = tensor_guard_build.capsule()
    assert tensor_guard_build._load(str(bad)) is False
    assert not bad.exists()  # removed: built again next time
    assert tensor_guard_build.capsule() is capsule  # what was loaded stays
    error = tensor_guard_build._build(str(tmp_path / "_tensor_guard_x.so"), "false")
    assert error is not None and "exited" in error
    assert (tmp_path / "_tensor_guard_x.so.failed").exists()


def test_a_cached_function_called_under_vmap_runs_eagerly():
    """Inside torch.vmap the arguments are batched tensors with no storage: an entry compiled outside
    must not be used (a guard on the transform level), and the frame runs eagerly under the transform."""
    def f(a):
        return (a.sin() * a).sum()

    kiln.reset()
    compiled = kiln.compile(f, backend="aot_eager")
    x = torch.randn(3, 4)
    compiled(x[0])
    torch.testing.assert_close(torch.vmap(compiled)(x), torch.vmap(f)(x))
    torch.testing.assert_close(torch.func.grad(compiled)(x[0]), torch.func.grad(f)(x[0]))
    assert any("torch.func" in reason for reason in kiln.stats.eager_fallbacks)
    torch.testing.assert_close(compiled(x[1]), f(x[1]))


def test_a_compiled_function_copies_as_functions_do_and_refuses_pickle():
    import copy
    import pickle

    f = kiln.compile(_add_mul, backend="aot_eager")
    assert copy.copy(f) is f and copy.deepcopy(f) is f
    with pytest.raises(TypeError, match="pickle the original function"):
        pickle.dumps(f)


def test_a_sparse_input_runs_eagerly_with_a_reason_and_no_warning():
    import warnings

    def f(x):
        return x * 2

    kiln.reset()
    for x in (torch.randn(3, 3).to_sparse(), torch.randn(3, 3).to_sparse_csr()):
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # (it was an "internal error in kiln" warning)
            got = kiln.compile(f)(x)
        torch.testing.assert_close(got.to_dense(), f(x).to_dense())
    assert any("strided tensors only" in reason for reason in kiln.stats.eager_fallbacks)


def test_a_sparse_module_buffer_breaks_the_graph_with_a_reason_and_no_warning():
    import warnings

    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("S", torch.eye(4).to_sparse())

        def forward(self, x):
            return torch.sparse.mm(self.S, x * 2) + 1

    kiln.reset()
    m = M()
    compiled = kiln.compile(m)
    for _ in range(2):
        x = torch.randn(4, 2)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # (it was an "internal error in kiln" warning)
            got = compiled(x)
        torch.testing.assert_close(got, m(x))
    assert any("S is a tensor with layout torch.sparse_coo" in reason for reason in kiln.stats.graph_breaks)


def test_a_child_forked_during_the_guard_build_starts_over():
    # the child has no build thread: it must not stay "building" (its wait() would never return)
    import kiln.capture.tensor_guard_build as tgb

    saved = (tgb._started, tgb._done, tgb._status)
    r, w = os.pipe()
    try:
        tgb._started, tgb._done, tgb._status = True, __import__("threading").Event(), "building"
        pid = os.fork()
        if pid == 0:  # the child reports its state and leaves at once
            os.write(w, f"{tgb._started}|{tgb.status()}|{tgb._done.is_set()}".encode())
            os._exit(0)
        os.waitpid(pid, 0)
        assert os.read(r, 100).decode() == "False|not started|False"
        assert tgb.status() == "building"  # (the parent's own build goes on)
    finally:
        tgb._started, tgb._done, tgb._status = saved
        os.close(r)
        os.close(w)


@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="reads /proc")
def test_a_guard_build_lock_whose_pid_was_taken_by_a_newer_process_is_stale(tmp_path):
    import subprocess
    import sys
    import time

    import kiln.capture.tensor_guard_build as tgb

    lock = tmp_path / "lib.so.lock"
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        lock.write_text(str(proc.pid))
        assert not tgb._stale(str(lock))  # its builder, alive
        old = time.time() - 30
        os.utime(lock, (old, old))  # written before that process started: its builder died, the pid moved on
        assert tgb._stale(str(lock))
    finally:
        proc.kill()
        proc.wait()
