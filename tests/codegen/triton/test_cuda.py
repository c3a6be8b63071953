"""The Triton generator on CUDA tensors: compiled kernels (run on the GPU machine; skipped without one)."""
import pytest
import torch

import kiln

from kiln.aot.graph import format_graph
import torch.fx as fx

pytest.importorskip("triton")

from kiln.backends.kiln import kiln_backend  # noqa: E402
from kiln.options import default_options  # noqa: E402
from tests.codegen.triton.helpers import compile_and_check_cuda, cuda  # noqa: E402

pytestmark = [pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]


def run(fn, *args, kernels=None, atol=1e-5, rtol=1e-5, **changes):
    _, cg = compile_and_check_cuda(fn, *args, atol=atol, rtol=rtol, **changes)
    if kernels is not None:
        assert len(cg.kernels) == kernels, cg.source
    return cg


@pytest.mark.parametrize("n", [33, 1000, 4096, 20000])
def test_softmax_one_kernel(n):
    cg = run(lambda x: torch.softmax(x, -1), cuda(64, n), kernels=1)
    assert next(iter(cg.kernels.values())).style == ("looped" if n > 4096 else "persistent")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_layer_norm_dtypes(dtype):
    tol = dict(atol=2e-2, rtol=2e-2) if dtype != torch.float32 else dict(atol=1e-4, rtol=1e-4)
    x, w, b = cuda(128, 768, dtype=dtype), cuda(768, dtype=dtype), cuda(768, dtype=dtype)
    run(lambda x, w, b: torch.nn.functional.layer_norm(x, (768,), w, b), x, w, b, kernels=1, **tol)


@pytest.mark.parametrize("dim", [0, 1, None])
def test_reductions(dim):
    x = cuda(300, 517)
    x[3, 7] = float("nan")
    f = (lambda x: (x.sum(), x.amax(), x.argmax())) if dim is None else \
        (lambda x: (x.sum(dim), x.amax(dim), x.argmax(dim), x.argmin(dim)))
    run(f, x, atol=1e-3, rtol=1e-4)


def test_pointwise_math_and_ints():
    x, y = cuda(1000, 37), cuda(1000, 37) + 0.1
    i = torch.randint(-50, 50, (1000, 37), device="cuda")
    j = torch.randint(1, 9, (1000, 37), device="cuda")

    def f(x, y, i, j):
        return (torch.tanh(x) * torch.erf(y), x // y, torch.remainder(x, y), i // j, i % -j, torch.maximum(x, y),
                torch.sigmoid(x).to(torch.bfloat16), (x > y) & (i > 0), torch.pow(x.abs(), y))

    run(f, x, y, i, j, atol=1e-5, rtol=1e-5)


def test_transposed_inputs_and_big_pointwise():
    x = cuda(2048, 1024)
    run(lambda x, y: (x.t() + y).relu() * 2, x, cuda(1024, 2048), kernels=1)


def test_warm_process_compiles_nothing(tmp_path):
    from kiln.codegen.triton import runtime
    from kiln.debug.stats import stats

    f = lambda x: torch.softmax(x * 2, -1)  # noqa: E731
    run(f, cuda(8, 100), cache_dir=str(tmp_path))
    runtime._LOADED.clear()
    compiles = stats.kernel_compiles
    run(f, cuda(8, 100), cache_dir=str(tmp_path))
    assert stats.kernel_compiles == compiles


def test_fast_launch_is_bound_and_used():
    f = lambda x, y: torch.softmax(x * y, -1)  # noqa: E731
    x, y = cuda(64, 300), cuda(64, 300)
    cg = run(f, x, y, kernels=1)
    (k,) = cg.kernels.values()
    assert k.fn.fast is not None  # bound after the first launch
    compiled = kiln_backend(fx.symbolic_trace(f), [x, y], default_options())
    for _ in range(3):
        x2 = cuda(64, 300)
        torch.testing.assert_close(compiled(x2, y), f(x2, y))
    # a misaligned input takes Triton's path (another specialization) and is still right
    big = cuda(64 * 300 + 1)
    xm = big[1:].view(64, 300)
    torch.testing.assert_close(compiled(xm, y), f(xm, y))


def test_reduce_overhead_records_and_replays_cuda_graphs():
    import kiln

    m = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 64),
                            torch.nn.LayerNorm(64)).cuda().eval()
    graphs = []

    def backend(gm, example_inputs):  # what mode="reduce-overhead" selects, keeping the compiled graphs
        fn = kiln_backend(gm, example_inputs, default_options().replace(cudagraphs=True))
        graphs.append(fn.compiled_graph)
        return fn

    kiln.reset()
    compiled = kiln.compile(m, backend=backend)
    outs = []
    with torch.no_grad():
        for _ in range(4):
            x = cuda(32, 64)
            got = compiled(x)
            outs.append(got)
            torch.testing.assert_close(got, m(x), atol=1e-4, rtol=1e-4)
    assert not torch.equal(outs[-1], outs[-2])  # results are copies, not the graph's static memory
    (cg,) = graphs
    # 4 calls: a plain warm-up run, the recording (which replays once to give its results), 2 replays
    assert cg.cudagraphs.recordings and cg.cudagraphs.replays == 3, cg.cudagraphs.explain()
    assert "1 kept of 1 recorded" in cg.explain() and "3 replays" in cg.explain()


def test_default_mode_races_cuda_graph_replay_and_keeps_results_exact():
    """Default mode: the speed race times the generated code, eager and CUDA-graph replay within the
    second call (backends/default_graphs.py); every call's result equals eager's whichever is chosen,
    and results are fresh tensors."""
    from kiln.debug.stats import stats

    m = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.GELU()) for _ in range(12)])
    m = m.cuda().eval()
    kiln.reset()
    stats.reset()
    opts = default_options().replace(choose_faster=True, warm_cache=False)
    compiled = kiln.compile(m, options=opts)
    outs = []
    with torch.no_grad():
        for i in range(6):
            x = cuda(8, 64)
            outs.append(compiled(x))
            torch.testing.assert_close(outs[-1], m(x), atol=1e-4, rtol=1e-4)
            if i == 1:
                assert sum(stats.speed_choices.values()) == 1, stats.speed_choices  # chosen within call 2
    assert not torch.equal(outs[-1], outs[-2])
    with torch.no_grad():
        report = "\n".join(kiln.explain(m, options=opts)(cuda(8, 64)).backend_reports)
    assert "speed choice:" in report
    # 12 tiny layers: launch-bound, so replay wins (printed for the record when it does not)
    print(dict(stats.speed_choices), report[-400:])


def test_default_mode_gives_no_graph_candidate_to_a_graph_that_mutates_its_input():
    from kiln.backends.default_graphs import graph_candidate

    class Rt:
        mutated = [0]

        class aten_graph:
            state = []

    assert graph_candidate(object(), Rt(), default_options()) is None
    Rt.mutated = []
    assert graph_candidate(object(), Rt(), default_options()) is not None
    assert graph_candidate(object(), Rt(), default_options().replace(default_cudagraphs=False)) is None


def test_big_full_reductions_split_in_two_stages():
    x = cuda(3000, 2999)
    cg = run(lambda x: (x.sum(), x.amax(), (x > 4).any(), x.to(torch.bfloat16).sum()), x, atol=1e-2, rtol=1e-4)
    assert "reduction sum over [] x [" in cg.lg.format() and "reduction sum over [1024] x [" in cg.lg.format()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_attention_runs_as_a_library_kernel(dtype):
    q, k, v = cuda(2, 4, 128, 64, dtype=dtype), cuda(2, 4, 128, 64, dtype=dtype), cuda(2, 4, 128, 64, dtype=dtype)
    f = lambda q, k, v: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True) * 2  # noqa: E731
    tol = dict(atol=2e-2, rtol=2e-2) if dtype == torch.bfloat16 else dict(atol=1e-3, rtol=1e-3)
    cg = run(f, q, k, v, **tol)
    assert "fused attention (library kernel)" in cg.explain() or "cudnn" in format_graph(cg.gm.graph)


def test_fast_launch_can_be_turned_off():
    cg = run(lambda x: x * 2 + 1, cuda(1000), triton_fast_launch=False)
    (k,) = cg.kernels.values()
    assert k.fn.fast is None


def _seeded(fn, *args):
    torch.manual_seed(7)
    out = fn(*args)
    return out, torch.rand(2, device="cuda")  # the generator's state after the call


def test_graph_without_inputs_makes_cuda_tensors_with_triton():
    import kiln

    f = lambda: torch.arange(10, device="cuda") * 2 + torch.ones(10, device="cuda")  # noqa: E731
    torch.testing.assert_close(kiln.compile(f)(), torch.arange(10, device="cuda") * 2 + 1.0)
    report = str(kiln.explain(f)())
    assert "ATen kernels" not in report and "triton" in report.lower(), report


def test_cuda_tensor_constant_is_held_by_the_wrapper():
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.c = torch.randn(8, device="cuda")

        def forward(self, x):
            return x * self.c + 1

    m = M()
    gm = fx.symbolic_trace(m)
    x = cuda(4, 8)
    compiled = kiln_backend(gm, [x])
    assert getattr(compiled, "compiled_graph", None) is not None, compiled.kiln_explain()
    torch.testing.assert_close(compiled(x), m(x))


def test_dropout_on_cuda_draws_eagers_random_numbers():
    f = lambda x: torch.nn.functional.dropout(x * 2, 0.3, True) + 1  # noqa: E731
    x = cuda(64, 33)
    compiled = kiln_backend(fx.symbolic_trace(f), [x])
    (got, after_kiln), (want, after_eager) = _seeded(compiled, x), _seeded(f, x)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(after_kiln, after_eager)


def test_attention_with_dropout_on_cuda_matches_eager():
    q, k, v = cuda(2, 2, 16, 8), cuda(2, 2, 16, 8), cuda(2, 2, 16, 8)
    f = lambda q, k, v: torch.nn.functional.scaled_dot_product_attention(q, k, v, dropout_p=0.5)  # noqa: E731
    compiled = kiln_backend(fx.symbolic_trace(f), [q, k, v])
    (got, _), (want, _) = _seeded(compiled, q, k, v), _seeded(f, q, k, v)
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("training", [True, False])
def test_batch_norm_and_instance_norm_on_cuda_match_eager(training):
    bn = torch.nn.BatchNorm2d(3).cuda().train(training)
    bn.running_mean.normal_()
    x = cuda(4, 3, 5, 5)
    f = lambda x, w, b, rm, rv: torch.ops.aten.native_batch_norm(x, w, b, rm, rv, training, 0.1, 1e-5)  # noqa: E731
    args = [x, bn.weight.detach(), bn.bias.detach(), bn.running_mean.clone(), bn.running_var.clone()]
    eager_args = [a.clone() for a in args]
    compiled = kiln_backend(fx.symbolic_trace(f), args)
    got, want = compiled(*args), f(*eager_args)
    if training:
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
    else:  # eval: CUDA's saved statistics are uninitialised memory of shape [C]
        torch.testing.assert_close(got[0], want[0], atol=1e-5, rtol=1e-5)
        assert [t.shape for t in got] == [t.shape for t in want]
    torch.testing.assert_close(args[3:], eager_args[3:])  # running statistics, updated in place
    g = lambda x, rm, rv: torch.nn.functional.instance_norm(x, rm, rv, use_input_stats=training)  # noqa: E731
    args = [x, bn.running_mean.clone(), bn.running_var.clone()]
    eager_args = [a.clone() for a in args]
    compiled = kiln_backend(fx.symbolic_trace(g), args)
    torch.testing.assert_close(compiled(*args), g(*eager_args), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(args[1:], eager_args[1:])


@pytest.mark.parametrize("mode", ["trunc", "floor"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_rounding_division_is_exact(dtype, mode):
    a, b = cuda(4096, dtype=dtype) * 20, cuda(4096, dtype=dtype)
    run(lambda a, b: torch.div(a, b, rounding_mode=mode), a, b, atol=0, rtol=0)
    run(lambda a, b: torch.div(a, b[7], rounding_mode=mode), a, b, atol=0, rtol=0)


def test_fx_graph_without_inputs_makes_cuda_tensors_with_triton():
    f = lambda: torch.full((4, 5), 2.0, device="cuda") * torch.arange(5, device="cuda")  # noqa: E731
    compiled = kiln_backend(fx.symbolic_trace(f), [])
    assert getattr(compiled, "compiled_graph", None) is not None and compiled.compiled_graph.target == "triton", \
        compiled.kiln_explain()
    torch.testing.assert_close(compiled(), f())


def test_out_of_range_index_is_a_device_side_assert():
    """As ATen's CUDA indexing kernels: an out-of-range loaded index stops the kernel with a device-side
    assert (kiln's message on stderr), never a clamped, wrong result. Run in a subprocess: the assert
    leaves the CUDA context unusable."""
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent("""
        import torch, torch.fx as fx
        from kiln.backends.kiln import kiln_backend
        from kiln.options import default_options
        def f(x, i):
            return torch.gather(x, 1, i) * 2
        x = torch.randn(64, 100, device="cuda")
        good = torch.randint(0, 100, (64, 7), device="cuda")
        compiled = kiln_backend(fx.symbolic_trace(f), [x, good], default_options())
        assert "kh.check_index(" in compiled.compiled_graph.source
        torch.testing.assert_close(compiled(x, good), f(x, good))
        bad = good.clone()
        bad[5, 3] = 100
        compiled(x, bad)
        torch.cuda.synchronize()
        print("NO ERROR")
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "NO ERROR" not in out, out
    assert "device-side assert" in out, out
    assert "kiln: an index tensor holds a value outside the dimension it indexes" in out, out
