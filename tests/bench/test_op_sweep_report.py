"""The op sweep's report: Inductor's extern kernels sorted into library calls and fallbacks like kiln's,
and both compilers' "no fallback / with fallback / no graph" rows side by side."""
import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks"))
import op_sweep_inductor  # noqa: E402
import op_sweep_report as report  # noqa: E402


def _inductor_record(fn, *args):
    op_sweep_inductor.start_sample()
    torch._dynamo.reset()
    torch.compile(fn)(*args)
    return op_sweep_inductor.finish_sample()


def _result(record, status="pass"):
    graphs, breaks, externs = record
    return {"torch": status, "torch_externs": externs, "torch_no_graph": int(graphs == 0 or breaks > 0)}


@pytest.mark.filterwarnings("ignore")
def test_inductor_records_lowered_fallback_library_and_no_graph_ops():
    x = torch.randn(6, 6)
    lowered = _inductor_record(lambda t: t.sin() + 1, x)
    assert lowered[0] >= 1 and lowered[2] == []
    cumsum = _inductor_record(lambda t: t.cumsum(0) * 2, x)  # no CPU lowering in Inductor: FallbackKernel
    assert "aten.cumsum.default: FallbackKernel" in cumsum[2]
    inv = _inductor_record(lambda t: torch.linalg.inv(t @ t.T + 6 * torch.eye(6)), x)  # LAPACK and BLAS
    assert any(e.startswith("aten.linalg_inv_ex.") for e in inv[2])
    nonzero = _inductor_record(lambda t: t.nonzero(), x)  # dynamo breaks on the dynamic shape
    assert nonzero[0] == 0 or nonzero[1] > 0
    view = _inductor_record(lambda t: t.t(), x.clone().requires_grad_())  # a graph, though nothing to compute
    assert view[0] == 1 and view[2] == []
    done = {"sin": _result(lowered), "cumsum": _result(cumsum), "inv": _result(inv), "nonzero": _result(nonzero),
            "view": _result(view)}
    how = {k: report.how_inductor_ran(r) for k, r in done.items()}
    assert how == {"sin": report.HOW_RAN[0], "cumsum": report.HOW_RAN[1], "inv": report.HOW_RAN[0],
                   "nonzero": report.HOW_RAN[2], "view": report.HOW_RAN[0]}


def test_library_calls_sorted_by_one_rule_for_both_compilers():
    library = ["aten.mm.out: ExternKernelOut", "aten.mm.default: matmul (BLAS)", "aten.sort.stable: FallbackKernel",
               "aten.convolution.default: ExternKernelAlloc", "aten.randint.low_out: RandomSeeds",
               "aten.linalg_inv_ex.default: FallbackKernel", "aten._fft_r2c.default: no lowering",
               "aten._scaled_dot_product_flash_attention_backward.default: FallbackKernel",
               "mkldnn._convolution_pointwise.default: ExternKernelAlloc",
               "torch_nn._linear_cross_entropy_batch_chunked_no_reduction.default: FallbackKernel",
               "mylib.add.default: custom op mylib::add (the user's kernel)"]
    fallbacks = ["aten.cumsum.default: FallbackKernel", "aten.scatter_reduce_.two: ScatterFallback",
                 "aten.index_put_.default: IndexPutFallback", "aten.mmx.default: FallbackKernel",
                 "aten.max_pool2d_with_indices_backward.default: no lowering"]
    assert all(report.is_library_call(e) for e in library)
    assert not any(report.is_library_call(e) for e in fallbacks)


def test_extern_name_of_inductor_nodes():
    class FallbackKernel:
        op_overload = torch.ops.aten.cumsum.default

    class ExternKernelOut:
        op_overload = None
        python_kernel_name = "extern_kernels.bmm"

    class MultiOutput:
        pass

    assert op_sweep_inductor.extern_name(FallbackKernel()) == "aten.cumsum.default: FallbackKernel"
    assert op_sweep_inductor.extern_name(ExternKernelOut()) == "aten.bmm.out: ExternKernelOut"
    assert op_sweep_inductor.extern_name(MultiOutput()) == ""


def test_side_by_side_rows():
    done = {
        "a": {"kiln": "pass", "externs": [], "torch": "pass", "torch_externs": [], "torch_no_graph": 0},
        "b": {"kiln": "pass", "externs": ["aten.cumsum.default: no lowering"], "torch": "pass",
              "torch_externs": ["aten.cumsum.default: FallbackKernel"], "torch_no_graph": 0},
        "c": {"kiln": "fallback", "externs": [], "torch": "pass", "torch_externs": [], "torch_no_graph": 2},
        "d": {"kiln": "pass", "externs": ["aten.mm.default: matmul (BLAS)"], "torch": "error", "torch_externs": []},
        "e": {"kiln": "mismatch", "externs": [], "torch": "pass", "torch_externs": ["aten.mm.out: ExternKernelOut"],
              "torch_no_graph": 0},
    }
    lines = report.side_by_side(done)
    rows = {line[:54].strip(): line[54:].split() for line in lines[2:5]}
    assert rows == {report.HOW_RAN[0]: ["2", "2"], report.HOW_RAN[1]: ["1", "1"], report.HOW_RAN[2]: ["1", "1"]}
    assert any("aten.cumsum.default: FallbackKernel" in line for line in lines)
    # a file from before the Inductor records: kiln's column alone
    old = {k: {kk: v for kk, v in r.items() if not kk.startswith("torch_")} for k, r in done.items()}
    assert "no Inductor records" in report.side_by_side(old)[0]


def test_low_precision_reference_run_names_float64_where_the_sample_names_the_swept_dtype():
    """A bfloat16 sample ``cumsum(x, 1, dtype=torch.bfloat16)``: its float64 reference must not round
    to bfloat16 (it would equal eager's result, and a more accurate one would count as a mismatch)."""
    import types

    import op_sweep

    x = torch.randn(5, 7).bfloat16()
    op = types.SimpleNamespace(op=torch.cumsum)
    sample = types.SimpleNamespace(input=x, args=(1,), kwargs={"dtype": torch.bfloat16})
    ref = op_sweep._reference_fn(op, sample, "bfloat16", capture=False)(x.double())
    assert ref.dtype == torch.float64
    torch.testing.assert_close(ref, torch.cumsum(x.double(), 1))
    plain = types.SimpleNamespace(input=x, args=(0,), kwargs={})
    assert op_sweep._reference_fn(op, plain, "bfloat16", capture=True)(x.double()).dtype == torch.float64


def test_rng_state_outputs_compare_by_metadata_only():
    import op_sweep

    a = (torch.ones(2), torch.tensor(123), torch.tensor(7))
    b = (torch.ones(2), torch.tensor(456), torch.tensor(9))
    op_sweep._compare(op_sweep._mask_outputs(a, (1, 2)), op_sweep._mask_outputs(b, (1, 2)))
    with pytest.raises(AssertionError):
        op_sweep._compare(op_sweep._mask_outputs(a, (1,)), op_sweep._mask_outputs(b, (1,)))
    with pytest.raises(AssertionError):  # the size still counts
        op_sweep._compare(op_sweep._mask_outputs(a, (1, 2)), op_sweep._mask_outputs((b[0], torch.ones(3), b[2]), (1, 2)))


def test_rng_state_outputs_masked_in_forward_and_gradient_runs():
    """``--grad`` runs give (outputs, gradients): the op's outputs are masked, not the pair."""
    import argparse

    import op_sweep

    calls = [0]

    def fn(x):  # outputs 2 and 3 change on every call, as a random generator's position does
        calls[0] += 1
        return x * 2, x.sum(), torch.tensor(calls[0]), torch.tensor(calls[0] * 10)

    x = torch.randn(3, requires_grad=True)
    for grad in (False, True):
        args = argparse.Namespace(grad=grad, device="cpu", dtype="float32")
        status, message = op_sweep._run_sample(lambda f, ts: f, fn, [x], args, rng_outputs=(2, 3))
        assert status == "pass", (grad, message)
