"""Matmul templates on the GPU: compiled kernels, the measured choice against the library path, the
saved choice, and the max-autotune modes end to end (run on the GPU machine; skipped without one)."""
import json

import pytest
import torch

pytest.importorskip("triton")

import kiln  # noqa: E402
from kiln.codegen.triton import runtime  # noqa: E402
from kiln.codegen.triton.matmul import MatmulKernel  # noqa: E402
from kiln.options import default_options  # noqa: E402
from tests.codegen.triton.helpers import compile_and_check_cuda, cuda  # noqa: E402

pytestmark = [pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]

TOL = {torch.float32: dict(atol=1e-3, rtol=1e-3), torch.float16: dict(atol=2e-2, rtol=2e-2),
       torch.bfloat16: dict(atol=3e-2, rtol=3e-2)}


def run(fn, *args, tol, **changes):
    return compile_and_check_cuda(fn, *args, **tol, matmul_templates=True, **changes)


def template_of(cg) -> MatmulKernel:
    (k,) = [k for k in cg.kernels.values() if isinstance(k, MatmulKernel)]
    return k


def linear_gelu(x, w, b):
    return torch.nn.functional.gelu(torch.nn.functional.linear(x, w, b))


@pytest.fixture(autouse=True)
def no_tf32():
    old = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32 = old


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("choice", ["template", "library"])
def test_forced_paths_match_eager(dtype, choice):
    x, w, b = cuda(300, 520, dtype=dtype), cuda(770, 520, dtype=dtype), cuda(770, dtype=dtype)
    _, cg = run(linear_gelu, x, w, b, tol=TOL[dtype], matmul_choice=choice)
    assert template_of(cg).fn.picked.startswith(choice)


def test_autotune_times_both_paths_and_saves_the_choice(tmp_path):
    x, w, b = cuda(1024, 1024, dtype=torch.bfloat16), cuda(2048, 1024, dtype=torch.bfloat16), cuda(2048, dtype=torch.bfloat16)
    _, cg = run(linear_gelu, x, w, b, tol=TOL[torch.bfloat16], cache_dir=str(tmp_path))
    k = template_of(cg)
    assert "library" in k.fn.timings and len(k.fn.timings) >= 3, k.fn.timings
    assert not k.fn.picked.endswith("(saved)")
    assert "measured:" in cg.explain() and k.name in cg.explain()
    path = runtime.module_path(cg.source, default_options().replace(cache_dir=str(tmp_path))) + ".tune.json"
    saved = json.load(open(path))[k.name]
    assert saved["choice"] in ("template", "library") and saved["ms"] == k.fn.timings
    # a warm process: the module is executed afresh and the choice is read, nothing timed
    runtime._LOADED.clear()
    _, cg2 = run(linear_gelu, x, w, b, tol=TOL[torch.bfloat16], cache_dir=str(tmp_path))
    assert template_of(cg2).fn.picked.endswith("(saved)")


def test_transposed_operands_and_residual():
    a, b, r = cuda(512, 300), cuda(700, 512), cuda(300, 700)

    def f(a, b, r):
        return torch.relu(a.t() @ b.t() + r)

    _, cg = run(f, a, b, r, tol=TOL[torch.float32], matmul_choice="template")
    assert template_of(cg).template.epilogue is not None

    def g(a, b, r):  # nothing else reads the sum: one addmm, with the residual as its bias
        return a.t() @ b.t() + r

    _, cg = run(g, a, b, r, tol=TOL[torch.float32], matmul_choice="template")
    t = template_of(cg).template
    assert t.kind == "addmm" and t.epilogue is None


def test_bf16_addmm_stored_result_and_epilogue():
    bias, a, b = cuda(640, dtype=torch.bfloat16), cuda(257, 129, dtype=torch.bfloat16), cuda(129, 640, dtype=torch.bfloat16)

    def f(bias, a, b):
        y = torch.addmm(bias, a, b)
        return y, torch.relu(y) * 2

    _, cg = run(f, bias, a, b, tol=TOL[torch.bfloat16], matmul_choice="template")
    t = template_of(cg).template
    assert t.store_out and t.epilogue is not None


@pytest.mark.parametrize("mode", ["max-autotune", "max-autotune-no-cudagraphs"])
def test_max_autotune_mode_end_to_end(mode):
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.GELU(), torch.nn.Linear(512, 256)).cuda().eval()
    m = m.to(torch.bfloat16)
    x = cuda(64, 256, dtype=torch.bfloat16)
    compiled = kiln.compile(m, mode=mode)
    with torch.no_grad():
        want = m(x)
        for _ in range(3):  # warm-up/tune, recording, replay
            got = compiled(x)
            torch.testing.assert_close(got, want, **TOL[torch.bfloat16])
        text = str(kiln.explain(compiled)(x))
    assert "matmul template" in text and "choice: " in text, text


def test_a_second_graph_with_the_same_kernels_takes_the_first_ones_choices(tmp_path):
    """A model's repeated blocks compiled as graphs of their own (FSDP, per-block compile) time each
    kernel once in the process, not once per graph (the second graph's module is not the first's here:
    another cache directory, so no tune file can tell it)."""
    from kiln.codegen.triton import launch
    from kiln.debug.stats import stats

    def block(x, w, b, r):
        return linear_gelu(x, w, b), torch.sigmoid(r) * r  # a template and a tuned pointwise kernel

    x, w, b = cuda(1024, 1024, dtype=torch.bfloat16), cuda(2048, 1024, dtype=torch.bfloat16), cuda(2048, dtype=torch.bfloat16)
    r = cuda(2048, 1024)
    launch.SHARED_CHOICES.clear()
    stats.reset()
    _, cg = run(block, x, w, b, r, tol=TOL[torch.bfloat16], cache_dir=str(tmp_path / "a"))
    timed = stats.tuning["timed"]
    assert timed >= 2 and stats.tuning["shared"] == 0, stats.tuning
    _, cg2 = run(block, x, w, b, r, tol=TOL[torch.bfloat16], cache_dir=str(tmp_path / "b"))
    # nothing timed again; the template and the pointwise kernel shared (the library path's epilogue
    # kernel was timed with the library path, and runs again only where the library path won)
    assert stats.tuning["timed"] == timed and stats.tuning["shared"] >= 2, stats.tuning
    assert template_of(cg2).fn.picked == template_of(cg).fn.picked.split(" (")[0] + " (as timed in another graph)"
