"""Shapes at the edges through generated C++: reductions over size-1 dims only, zero-size views."""
import pytest
import torch
import torch.fx as fx

from kiln.backends.kiln import kiln_backend


def _check(fn, *args):
    compiled = kiln_backend(fx.symbolic_trace(fn), list(args))
    assert compiled.compiled_graph is not None, compiled.kiln_explain()
    torch.testing.assert_close(compiled(*args), fn(*args))


def test_reduction_whose_reduced_dims_all_have_size_one():
    _check(lambda x: torch.softmax(x, 0), torch.randn(()))
    _check(lambda x: torch.log_softmax(x, 1), torch.randn(4, 1))


def test_views_of_zero_size_dims_generate_no_modulo_by_zero():
    _check(lambda x: x.tile((2, 0)) + 1, torch.randn(3, 2))
    _check(lambda x: x.repeat(0, 3, 1) * 2, torch.randn(3, 2))


def test_a_graph_making_tensors_on_another_device_runs_with_aten():
    meta_like = lambda x: (torch.ones_like(x, device="meta"), x + 1)  # noqa: E731
    x = torch.randn(3)
    compiled = kiln_backend(fx.symbolic_trace(meta_like), [x])
    assert compiled.compiled_graph is None and "while its kernels run on cpu" in compiled.kiln_explain()
    got, plus = compiled(x)
    assert got.device.type == "meta" and torch.equal(plus, x + 1)


def test_dropout_in_training_gets_generated_code_and_eager_random_numbers():
    def f(x):
        return torch.nn.functional.dropout(x * 2, 0.5, True) + 1

    x = torch.randn(64, 32)
    compiled = kiln_backend(fx.symbolic_trace(f), [x])
    assert compiled.compiled_graph is not None, compiled.kiln_explain()
    torch.manual_seed(3)
    want = f(x)
    after_eager = torch.rand(3)
    torch.manual_seed(3)
    got = compiled(x)
    after_kiln = torch.rand(3)
    torch.testing.assert_close(got, want)
    assert torch.equal(after_kiln, after_eager)  # the generator advanced as in eager


def test_a_graph_without_inputs_runs_on_the_device_of_the_tensors_it_makes():
    import kiln

    f = lambda: torch.ones(3, device="meta") * 2  # noqa: E731
    assert kiln.compile(f)().device.type == "meta"
    assert "meta tensors run through ATen kernels" in str(kiln.explain(f)())


def test_factories_without_dtype_make_default_dtype_tensors():
    f = lambda x: x + torch.arange(3) * 2 + torch.ones(3) + torch.zeros(3)  # noqa: E731
    _check(f, torch.arange(3))
    _check(lambda: torch.arange(10) * 2 + torch.ones(10))


def test_grouped_query_attention_on_cpu():
    """CPU's flash kernel takes k/v with fewer heads than q (Llama's grouped-query attention)."""
    f = lambda q, k, v: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)  # noqa: E731
    _check(f, torch.randn(2, 4, 8, 16), torch.randn(2, 2, 8, 16), torch.randn(2, 2, 8, 16))


def test_tracing_runs_atens_own_composite_kernels_not_python_ones(monkeypatch):
    """matmul (CompositeImplicit) traces through ATen's C++ kernel even when a Python kernel is
    registered for that key (torch._decomp registers its own once something imports it)."""
    from kiln.aot import aot_trace

    def python_kernel(*args, **kwargs):
        raise AssertionError("kiln ran a Python CompositeImplicitAutograd kernel")

    op = torch.ops.aten.matmul.default
    monkeypatch.setitem(op.py_kernels, torch._C.DispatchKey.CompositeImplicitAutograd, python_kernel)
    from kiln.decomp import attention, decomposition_table

    # attention's decomposition calls matmul under kiln's dispatch mode (decomposed, not ATen's CPU flash kernel)
    monkeypatch.setattr(attention, "keep_cpu_flash", lambda *args: False)
    gm = fx.symbolic_trace(lambda q, k, v: torch.nn.functional.scaled_dot_product_attention(q, k, v))
    ag = aot_trace(gm, [torch.randn(2, 4, 8, 16)] * 3, decompositions=decomposition_table())
    called = {str(n.target) for n in ag.gm.graph.nodes if n.op == "call_function"}
    assert called & {"aten.mm.default", "aten.bmm.default"}, called


@pytest.mark.parametrize("codegen", ["cpp", "triton"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_rounding_division_equals_eager(codegen, dtype):
    """Eager rounds every step of a bf16/f16 trunc/floor division to the dtype (a tensor divisor), or
    computes in float32 (a scalar divisor): bit-exact, near ties included."""
    import kiln
    from kiln.options import default_options

    torch.manual_seed(0)
    a, b = (torch.randn(512) * 20).to(dtype), torch.randn(512).to(dtype)
    b[:4] = 0
    options = default_options().replace(cpu_codegen=codegen)
    for mode in ("trunc", "floor"):
        for f in (lambda a, b: torch.div(a, b, rounding_mode=mode), lambda a, b: torch.div(a, b[9], rounding_mode=mode),
                  lambda a, b: torch.div(a, 0.7, rounding_mode=mode)):
            torch.testing.assert_close(kiln.compile(f, options=options)(a, b), f(a, b), atol=0, rtol=0, equal_nan=True)
