"""Matmul templates (``Options.matmul_templates``, the max-autotune modes): a tiled Triton matmul with the
consuming pointwise ops fused in, run by Triton's interpreter on CPU tensors and compared with eager.

``triton_max_block=16`` makes several tiles in M and N and several K steps out of tiny shapes."""
import pytest
import torch

from kiln.codegen.triton.matmul import MatmulKernel
from tests.codegen.triton.helpers import check, compile_fn

F32 = dict(atol=1e-4, rtol=1e-4)
BF16 = dict(atol=2e-2, rtol=2e-2)


def templates(cg) -> list[MatmulKernel]:
    return [k for k in cg.kernels.values() if isinstance(k, MatmulKernel)]


def only_template(cg) -> MatmulKernel:
    (k,) = templates(cg)
    return k


def mm_check(fn, *args, tol=F32, **changes):
    changes = {"matmul_templates": True, "triton_max_block": 16, **changes}
    return check(fn, *args, **tol, **changes)


def test_mm_alone_is_a_template_storing_its_result():
    cg = mm_check(lambda a, b: a @ b, torch.randn(20, 24), torch.randn(24, 18))
    k = only_template(cg)
    assert k.template.epilogue is None and k.template.store_out
    assert k.fn.picked.startswith("template 16x16x16")
    assert len(cg.kernels) == 1


def test_mm_bias_gelu_is_one_kernel_without_the_mm_buffer():
    def f(a, b, bias):
        return torch.nn.functional.gelu(a @ b + bias)

    cg = mm_check(f, torch.randn(37, 45), torch.randn(45, 29), torch.randn(29))
    k = only_template(cg)
    t = k.template
    assert t.epilogue is not None and not t.store_out
    assert "tl.erf" in k.source and "tl.dot" in k.source
    # the fused-away result is never allocated: the wrapper only makes the epilogue's output
    assert t.out not in cg.wrapper.source
    assert cg.wrapper.source.count("empty_strided(") == 1
    assert f"epilogue of {k.name}" in cg.explain()


def test_mm_residual_add():
    def f(a, b, r):
        return a @ b + r

    # nothing else reads the sum: the add folds back into addmm, whose template adds the residual
    cg = mm_check(f, torch.randn(33, 40), torch.randn(40, 35), torch.randn(33, 35))
    t = only_template(cg).template
    assert t.kind == "addmm" and t.epilogue is None and len(cg.kernels) == 1


def test_mm_residual_add_then_pointwise():
    def f(a, b, r):
        return torch.tanh(a @ b + r)

    cg = mm_check(f, torch.randn(33, 40), torch.randn(40, 35), torch.randn(33, 35))
    t = only_template(cg).template
    assert t.kind == "mm" and t.epilogue is not None and not t.store_out


@pytest.mark.parametrize("m,n,k", [(1, 7, 5), (17, 1, 33), (50, 31, 70), (16, 32, 48)])
def test_ragged_and_degenerate_shapes(m, n, k):
    def f(a, b):
        return torch.relu(a @ b) * 2

    mm_check(f, torch.randn(m, k), torch.randn(k, n))


def test_many_row_tiles_swizzled_in_groups():
    # 10 row tiles of 16 > GROUP_M = 8: the program -> tile mapping goes round two groups
    mm_check(lambda a, b: (a @ b).sigmoid(), torch.randn(150, 20), torch.randn(20, 40))


def test_transposed_and_offset_operands():
    a, b = torch.randn(30, 26), torch.randn(57, 21)

    def f(a, b):
        return a.t()[1:, 2:] @ b[1::2, :] + 1  # (25, 28) @ (28, 21)

    cg = mm_check(f, a, b)
    t = only_template(cg).template
    assert t.a.stride == (1, 26) and t.a.offset == 1 + 2 * 26
    assert t.b.stride == (42, 1) and t.b.offset == 21


def test_addmm_bfloat16_stays_fused_multiply_add_with_alpha_beta():
    a, b, bias = (torch.randn(*s).bfloat16() for s in ((19, 40), (40, 23), (23,)))

    def f(bias, a, b):
        return torch.tanh(torch.addmm(bias, a, b, beta=0.5, alpha=2.0))

    cg = mm_check(f, bias, a, b, tol=BF16)
    t = only_template(cg).template
    assert t.kind == "addmm" and t.bias is not None and t.epilogue is not None


def test_addmm_bias_per_row_and_float16():
    a, b, bias = (torch.randn(*s).half() for s in ((21, 17), (17, 19), (21, 1)))
    mm_check(lambda bias, a, b: torch.addmm(bias, a, b), bias, a, b, tol=BF16)


def test_bfloat16_linear_gelu_rounds_the_product_like_eager():
    x, w = torch.randn(24, 48).bfloat16(), torch.randn(40, 48).bfloat16()

    def f(x, w):
        return torch.nn.functional.gelu(x @ w.t())

    mm_check(f, x, w, tol=BF16)


def test_linear_on_3d_input_splits_rows():
    lin = torch.nn.Linear(16, 24)
    x = torch.randn(2, 9, 16)

    def f(x, w, b):
        return torch.nn.functional.silu(torch.nn.functional.linear(x, w, b))

    with torch.no_grad():
        cg = mm_check(f, x, lin.weight.detach(), lin.bias.detach())
    t = only_template(cg).template
    assert t.epilogue is not None and t.row_dims == 2


def test_result_also_read_elsewhere_is_stored():
    def f(a, b, c):
        y = a @ b
        return torch.relu(y), y @ c

    cg = mm_check(f, torch.randn(18, 20), torch.randn(20, 22), torch.randn(22, 17))
    first, second = sorted((k.template for k in templates(cg)), key=lambda t: t.index)
    assert first.epilogue is not None and first.store_out
    assert second.a.buffer.name == first.out and second.epilogue is None


def test_result_as_graph_output_is_stored():
    def f(a, b):
        y = a @ b
        return y, y * 3

    cg = mm_check(f, torch.randn(18, 20), torch.randn(20, 22))
    t = only_template(cg).template
    assert t.epilogue is not None and t.store_out


def test_transposed_reader_is_not_an_epilogue():
    def f(a, b, c):  # the sum is row-major (c's layout): it reads the product across its rows
        return c + (a @ b).t()

    cg = mm_check(f, torch.randn(18, 20), torch.randn(20, 22), torch.randn(22, 18))
    t = only_template(cg).template
    assert t.epilogue is None and t.store_out


def test_reader_in_the_products_memory_order_is_an_epilogue():
    def f(a, b, c):  # eager gives the sum the product's (transposed) layout; kiln computes it in memory order
        return (a @ b).t() + c

    cg = mm_check(f, torch.randn(18, 20), torch.randn(20, 22), torch.randn(22, 18))
    t = only_template(cg).template
    assert t.epilogue is not None and not t.store_out


def test_reduction_reader_is_not_an_epilogue():
    cg = mm_check(lambda a, b: torch.softmax(a @ b, -1), torch.randn(18, 20), torch.randn(20, 22))
    assert only_template(cg).template.epilogue is None


def test_two_matmuls_into_one_add():
    def f(a, b, c, d):
        return (a @ b + c @ d).relu()

    cg = mm_check(f, torch.randn(17, 20), torch.randn(20, 19), torch.randn(17, 24), torch.randn(24, 19))
    ts = sorted((k.template for k in templates(cg)), key=lambda t: t.index)
    assert len(ts) == 2
    assert ts[0].epilogue is None and ts[0].store_out  # read by the other template's epilogue
    assert ts[1].epilogue is not None


def test_library_path_forced():
    def f(a, b, bias):
        return torch.nn.functional.gelu(a @ b + bias)

    cg = mm_check(f, torch.randn(37, 45), torch.randn(45, 29), torch.randn(29), matmul_choice="library")
    k = only_template(cg)
    assert k.fn.picked == "library"
    assert k.epilogue_kernel in cg.kernels


def test_library_path_forced_addmm_storing_result():
    a, b, bias = (torch.randn(*s).bfloat16() for s in ((19, 40), (40, 23), (23,)))

    def f(bias, a, b):
        y = torch.addmm(bias, a, b, alpha=0.5)
        return y, y.float().exp()

    mm_check(f, bias, a, b, tol=BF16, matmul_choice="library")


def test_integer_and_batched_matmuls_stay_library_calls():
    def f(a, b, x, y):
        return a @ b, torch.bmm(x, y) + 1

    a, b = torch.randint(-3, 3, (4, 5)), torch.randint(-3, 3, (5, 6))
    cg = mm_check(f, a, b, torch.randn(2, 3, 4), torch.randn(2, 4, 5))
    assert templates(cg) == []


def test_off_without_the_option():
    _, cg = compile_fn(lambda a, b: (a @ b).relu(), [torch.randn(4, 5), torch.randn(5, 6)])
    assert templates(cg) == []


def test_saved_choice_is_loaded(tmp_path):
    import json

    from kiln.codegen.triton.matmul_launch import MatmulChoice, MatmulConfig, offline_configs

    def f(a, b, bias):
        return (a @ b + bias).relu()

    args = [torch.randn(20, 24), torch.randn(24, 18), torch.randn(18)]
    compiled, cg = compile_fn(f, args, matmul_templates=True)
    k = only_template(cg)
    configs = offline_configs(k)
    path = tmp_path / "kernels.py.tune.json"
    path.write_text(json.dumps({k.name: {"choice": "library", "config": None, "ms": {"library": 0.01}}}))
    choice = MatmulChoice(k.fn.fn, k, cg.kernels[k.epilogue_kernel], configs, str(path))
    assert choice.picked == "library (saved)"
    path.write_text(json.dumps({k.name: {"choice": "template", "config": list(configs[0].__dict__.values())}}))
    choice = MatmulChoice(k.fn.fn, k, cg.kernels[k.epilogue_kernel], configs, str(path))
    assert choice.picked == f"template {configs[0].label()} (saved)"
    assert isinstance(choice.run.config, MatmulConfig)
    out = call_kernel(choice, k, cg, dict(zip(["a", "b", "bias"], args)))  # the saved config, interpreted
    torch.testing.assert_close(out, f(*args), **F32)


@pytest.mark.parametrize("mode", ["max-autotune", "max-autotune-no-cudagraphs"])
def test_kiln_compile_modes_use_templates(mode):
    import kiln

    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(12, 20), torch.nn.GELU(), torch.nn.Linear(20, 6)).eval()
    x = torch.randn(3, 5, 12)
    compiled = kiln.compile(m, mode=mode, options={"cpu_codegen": "triton"})
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), m(x), **F32)
        text = str(kiln.explain(compiled)(x))
    assert text.count("matmul template") == 2 and "never allocated" in text, text


def test_identical_templates_share_one_choice():
    def f(x, w1, w2):
        return (x @ w1).relu(), (x @ w2).relu()  # two templates with the same code

    from kiln.codegen.triton.matmul_launch import MatmulChoice

    args = [torch.randn(12, 16), torch.randn(16, 20), torch.randn(16, 20)]
    compiled, cg = compile_fn(f, args, matmul_templates=True)
    first, second = sorted(templates(cg), key=lambda k: k.template.index)
    assert second.fn.leader is first.fn and second.fn.fn is first.fn.fn
    # as on the GPU (no interpreter shortcut): the follower takes the leader's choice instead of timing
    follower = MatmulChoice(first.fn.fn, second, cg.kernels[second.epilogue_kernel], first.fn.configs, None,
                            leader=first.fn)
    out = call_kernel(follower, second, cg, dict(zip(["x", "w1", "w2"], args)))
    torch.testing.assert_close(out, f(*args)[1], **F32)
    assert follower.picked == f"{first.fn.picked} (as {first.name})"


def call_kernel(fn, kernel, cg, inputs: dict):
    """Call a template's launcher by hand with ``inputs`` by buffer name; returns its (one) output."""
    buffers = cg.lg.buffers()
    args = []
    for name, kind in kernel.params:
        b = buffers[name]
        args.append(inputs[name] if kind == "in" else torch.empty_strided(b.size, b.stride, dtype=b.dtype))
    fn(*args)
    return args[-1]
