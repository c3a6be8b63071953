"""FastLaunch: after the first launch through Triton, kernels are launched through the compiled
kernel's C launcher directly (stand-ins for the compiled kernel here; the real one is cuda-tested)."""
import time
from types import SimpleNamespace

import pytest
import torch

pytest.importorskip("triton")

from kiln.codegen.triton.launch import (  # noqa: E402
    _HOOKS_ACTIVE, FastLaunch, LaunchConfig, Launcher, _aligned_in_python, _all_aligned_fn, refresh_launch_hooks)


def _compiled(calls, scratch=0):
    runner = SimpleNamespace(launch=lambda *a: calls.append(a), launch_cooperative_grid=False, launch_pdl=True,
                             global_scratch_size=scratch, profile_scratch_size=0)
    return SimpleNamespace(function=77, packed_metadata=(4, 1, 0), run=runner)


def _bind(calls, args, **kw):
    return FastLaunch.bind(_compiled(calls, **kw), (5,), (128, 64), args, device=0, get_stream=lambda d: 1000 + d)


@pytest.fixture(autouse=True)
def no_launch_hooks():
    refresh_launch_hooks(SimpleNamespace(launch_enter_hook=None, launch_exit_hook=None))
    yield
    _HOOKS_ACTIVE[0] = True


def test_fast_launch_passes_what_triton_passes():
    calls = []
    args = (torch.empty(8), torch.empty(8))
    fast = _bind(calls, args)
    assert fast(args)
    (call,) = calls
    assert call[:13] == (5, 1, 1, 1000, 77, False, True, None, None, (4, 1, 0), None, None, None)
    assert call[13:15] == args and call[15:] == (128, 64)


def test_fast_launch_declines_a_misaligned_pointer_and_hooks():
    calls = []
    base = torch.empty(64)
    fast = _bind(calls, (base, base))
    assert not fast((base[1:], base))  # Triton specialized the kernel for a 16-byte aligned pointer
    assert fast((base[4:], base))  # 16 bytes further: aligned again
    refresh_launch_hooks(SimpleNamespace(launch_enter_hook=SimpleNamespace(calls=[print]), launch_exit_hook=None))
    assert not fast((base, base))  # a profiler's hook: Triton's path calls it
    refresh_launch_hooks(SimpleNamespace(launch_enter_hook=SimpleNamespace(calls=[]), launch_exit_hook=None))
    assert fast((base, base))
    assert len(calls) == 2


def test_fast_launch_declines_until_a_wrapper_has_read_the_hooks():
    calls = []
    args = (torch.empty(8),)
    fast = _bind(calls, args)
    _HOOKS_ACTIVE[0] = True  # the state before any wrapper call
    assert not fast(args)
    refresh_launch_hooks(SimpleNamespace(launch_enter_hook=None, launch_exit_hook=None))
    assert fast(args)


@pytest.mark.parametrize("check", ["c", "python"])
def test_alignment_check(check):
    base = torch.empty(64)
    args = (base, base[1:], base[4:])
    fn = _aligned_in_python if check == "python" else _all_aligned_fn()
    assert fn(args, (0, 2)) and fn(args, ()) and not fn(args, (0, 1))


def test_no_fast_launch_for_the_interpreter_or_scratch_memory():
    assert FastLaunch.bind(None, (5,), (128,), (), device=0, get_stream=lambda d: 0) is None
    assert _bind([], (torch.empty(4),), scratch=128) is None


def test_launcher_takes_tritons_path_once_then_the_fast_one(monkeypatch):
    slow, fast_calls = [], []

    class Fn:
        def __getitem__(self, grid):
            def launch(*args, **meta):
                slow.append((grid, meta))
                return _compiled(fast_calls)
            return launch

    kernel = SimpleNamespace(xnumel=1000, style="pointwise", name="k")
    bind = FastLaunch.bind.__func__
    monkeypatch.setattr(FastLaunch, "bind", classmethod(
        lambda cls, *a: bind(cls, *a, device=0, get_stream=lambda d: 0)))
    launcher = Launcher(Fn(), kernel, [LaunchConfig(256, 0, 2)], None)
    x = torch.empty(1000)
    launcher(x, x)
    launcher(x, x)
    launcher(x, x)
    assert slow == [((4,), {"XBLOCK": 256, "num_warps": 2, "sanitize_overflow": False})]
    assert len(fast_calls) == 2 and fast_calls[0][:3] == (4, 1, 1) and fast_calls[0][-1] == 256


def test_autotuning_times_configs_on_copies_of_the_arguments():
    """A kernel that adds into a buffer (an atomic scatter) is timed many times: on copies, so the real
    buffer is added into once, by the real launch (it was added into every timing run: a wrong first
    result on the H100)."""
    from kiln.codegen.triton.launch import twin_args

    class Fn:
        def __getitem__(self, grid):
            def launch(out, src, **meta):
                out.add_(src)  # stands in for tl.atomic_add into `out`
                return None
            return launch

    from kiln.codegen.triton.bench import time_each

    kernel = SimpleNamespace(xnumel=8, style="pointwise", name="k", params=[("buf0", "out"), ("arg0", "in")])
    launcher = Launcher(Fn(), kernel, [LaunchConfig(4, 0, 1), LaunchConfig(8, 0, 1)], None)
    out, src = torch.zeros(8), torch.ones(8)
    seen = []
    launcher._time_configs(launcher.configs, lambda cfg: (1,), [out, src],
                           lambda fns, device: seen.extend(fns) or time_each(fns, device))
    assert len(seen) == 2
    assert torch.equal(out, torch.zeros(8))
    twins = twin_args([out, src], written=[0])
    assert twins[0].data_ptr() != out.data_ptr() and twins[1] is src  # what it only reads: not copied
    view = torch.arange(12.0)[2:10:2]
    twin = twin_args([view])[0]
    assert twin.data_ptr() != view.data_ptr() and twin.stride() == view.stride() and torch.equal(twin, view)


def test_time_each_gives_each_candidate_its_median_and_drops_the_ones_that_raise():
    from kiln.codegen.triton.bench import time_each

    calls = []

    def fast():
        calls.append("fast")

    def slow():
        calls.append("slow")
        time.sleep(0.002)

    def broken():
        raise RuntimeError("out of registers")

    fast_ms, broken_ms, slow_ms = time_each([fast, broken, slow], rounds=3)
    assert broken_ms is None
    assert slow_ms >= 2.0 and fast_ms < slow_ms
    assert calls.count("fast") == calls.count("slow") == 4  # one untimed first run, then one per round


# tuning choices shared across graphs -----------------------------------------------------------------
def _tuned_launcher(share_key, tune_path, timed):
    """A static launcher with two candidates and a stand-in timing that records its calls."""
    kernel = SimpleNamespace(name="k0", xnumel=4096, ynumel=1, style="pointwise")
    configs = [LaunchConfig(128, 0, 4), LaunchConfig(1024, 0, 8)]
    fn = {(32,): None, (4,): None}  # fn[grid] is looked up when a config is bound
    launcher = Launcher(fn, kernel, configs, tune_path, fast_launch=False, share_key=share_key)
    launcher._time = lambda cfgs, grid_of, args: timed.append(share_key) or cfgs[1]
    return launcher


def test_a_choice_timed_in_one_graph_is_taken_by_the_same_code_in_another(tmp_path):
    from kiln.codegen.triton import launch
    from kiln.debug.stats import stats

    launch.SHARED_CHOICES.clear()
    stats.reset()
    timed = []
    # every launcher is built before any runs (a model's blocks as separate graphs)
    first, second = (_tuned_launcher("same code", str(tmp_path / f"m{i}.tune.json"), timed) for i in range(2))
    other = _tuned_launcher("other code", str(tmp_path / "m2.tune.json"), timed)
    assert first.config is None and second.config is None
    assert first._choose(()) == LaunchConfig(1024, 0, 8)
    assert second._choose(()) == LaunchConfig(1024, 0, 8)
    other._choose(())
    assert timed == ["same code", "other code"]  # (the stand-in timing counts nothing)
    assert stats.tuning == {"shared": 1}


def test_a_choice_saved_after_the_launcher_was_built_is_read_at_its_first_call(tmp_path):
    from kiln.codegen.triton import launch
    from kiln.debug.stats import stats

    launch.SHARED_CHOICES.clear()
    stats.reset()
    timed = []
    path = str(tmp_path / "m.tune.json")
    late = _tuned_launcher(None, path, timed)  # not shared in-process: only the file can tell it
    launch._save_choice(path, "k0", LaunchConfig(128, 0, 4))  # another graph of the same module timed it
    assert late._choose(()) == LaunchConfig(128, 0, 4)
    assert timed == [] and stats.tuning == {"saved": 1}


def test_size_generic_kernel_called_again_at_the_same_sizes_without_a_fast_launch():
    """A boolean-mask select (an unbacked row count: size-generic kernels) under the interpreter, which
    binds no fast launch: the second call at the same sizes took the cached bucket and crashed
    (UnboundLocalError) where the first call had bound nothing."""
    import kiln

    x = torch.randn(5, 6)
    f = kiln.compile(lambda x: x[x > 0] * 2, options={"cpu_codegen": "triton", "choose_faster": False})
    for _ in range(3):
        assert torch.equal(f(x), x[x > 0] * 2)


def _kernel_of(style, statements, xnumel, rnumel=0, ynumel=1, **more):
    source = "@jit\ndef k(in_ptr0, XBLOCK: tl.constexpr):\n" + "".join(f"    tmp{i} = tmp0 + 1\n"
                                                                           for i in range(statements))
    return SimpleNamespace(**{"style": style, "source": source, "xnumel": xnumel, "rnumel": rnumel,
                              "ynumel": ynumel, "row_tiles": False, "column": False, **more})


def test_large_kernels_build_with_fewer_elements_per_thread():
    # a 290-statement tiled kernel (GPT-2's residual-stream gradient through 12 layers) built for 29 s with
    # 64 elements per thread: every config it may launch fits the build budget, the heuristic's pick first
    from kiln.codegen.triton.launch import BUILD_BUDGET, build_cost, candidate_configs, per_thread

    big = _kernel_of("tiled", 290, xnumel=768, ynumel=4096, row_tiles=True)
    configs = candidate_configs(big)
    assert configs and all(per_thread(c) * build_cost(big) <= BUILD_BUDGET for c in configs)
    assert configs[0].YBLOCK and configs[0].XBLOCK >= 16 and configs[0].YBLOCK >= 1
    small = _kernel_of("tiled", 20, xnumel=768, ynumel=4096, row_tiles=True)  # small kernels: unchanged
    assert candidate_configs(small)[0] == LaunchConfig(1024, 0, 8, 2) and len(candidate_configs(small)) > 3
    row = _kernel_of("persistent", 400, xnumel=4096, rnumel=768)  # a persistent reduction keeps its whole row
    (first, *_) = candidate_configs(row)
    assert first.RBLOCK == 1024 and per_thread(first) * build_cost(row) <= BUILD_BUDGET
