"""User Triton kernels launched inside compiled code (Triton's interpreter, CPU tensors): one graph node per
launch that records what the kernel writes, functionalized into a copy-and-launch twin, launched by the
wrapper in order; what kiln cannot model exactly is a graph break with its reason."""
import re

import pytest
import torch

import kiln
from kiln.aot.trace import aot_trace
from kiln.capture.triton_launch import TRITON_LAUNCH, launch_spec, run_launch
from tests.user_kernels.helpers import CaptureBackend, check

pytest.importorskip("triton")
BACKENDS = ["eager", "aot_eager", "kiln"]


@pytest.fixture
def kernels(monkeypatch):
    """The kernels module, imported (and its kernels launched) with Triton's interpreter on."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    from tests.user_kernels import triton_kernels

    assert type(triton_kernels.add_kernel).__name__ == "InterpretedFunction"
    return triton_kernels


def _one(n=100):
    return lambda: (torch.randn(n),)


def _two(n=100):
    return lambda: (torch.randn(n), torch.randn(n))


@pytest.mark.parametrize("backend", BACKENDS)
def test_issue_example_is_one_graph(kernels, backend):
    check(kernels.add_then_relu, _two(), backend)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", ["add_into_input", "autotuned", "heuristic_block", "read_before_and_after",
                                  "through_a_helper", "calls_a_triton_op", "dtype_argument", "writes_a_row"])
def test_launches_match_eager(kernels, backend, name):
    if name == "calls_a_triton_op" and tuple(int(v) for v in torch.__version__.split(".")[:2]) < (2, 12):
        pytest.skip("torch 2.11's wrap_triton rejects kernels run by Triton's interpreter (eager fails too)")
    fn = getattr(kernels, name)
    check(fn, _two() if name in ("add_into_input", "calls_a_triton_op", "writes_a_row") else _one(), backend)


@pytest.mark.parametrize("backend", ["eager", "kiln"])
def test_atomic_writes(kernels, backend):
    check(kernels.atomic_counts, lambda: (torch.randint(0, 8, (50,), dtype=torch.int32),), backend)


def test_launch_with_an_input_that_requires_grad_breaks(kernels):
    x = torch.randn(100, requires_grad=True)
    out = kiln.compile(kernels.needs_grad)(x)
    torch.testing.assert_close(out, kernels.needs_grad(x.detach()))
    assert any("'x_ptr' requires grad, and autograd cannot see through a Triton kernel" in r
               for r in kiln.stats.snapshot()["graph_breaks"])


@pytest.mark.parametrize("backend", ["aot_eager", "kiln"])
def test_kernel_in_a_custom_op_with_autograd_trains(kernels, backend):
    x = torch.randn(100, requires_grad=True)
    xr = x.detach().clone().requires_grad_()
    before = kiln.stats.snapshot()
    out = kiln.compile(kernels.wrapped_in_custom_op, backend=backend)(x)
    after = kiln.stats.snapshot()
    out.sum().backward()
    kernels.wrapped_in_custom_op(xr).sum().backward()
    torch.testing.assert_close(x.grad, xr.grad)
    assert after["graphs"] - before["graphs"] == 1 and after["graph_breaks"] == before["graph_breaks"]


@pytest.mark.parametrize("name, make, reason", [
    ("not_dense", lambda: (torch.randn(4, 8),), "is not dense"),
    ("overlapping_views", lambda: (torch.randn(16),), "are different views of the same memory"),
    ("grid_over_a_tensor", _two(), "a Triton grid function"),
])
def test_what_is_not_modelled_breaks_with_a_reason(kernels, name, make, reason):
    fn = getattr(kernels, name)
    check(fn, make, "eager", graphs=2 if name != "grid_over_a_tensor" else 1, breaks=1)
    assert any(reason in r for r in kiln.stats.snapshot()["graph_breaks"]), kiln.stats.snapshot()["graph_breaks"]


def _launch_nodes(fn, *args):
    backend = CaptureBackend()
    kiln.compile(fn, backend=backend)(*[a.clone() for a in args])
    (gm,) = backend.graphs
    return gm, [n for n in gm.graph.nodes if n.target is TRITON_LAUNCH]


def test_capture_records_the_written_tensors(kernels):
    gm, (node,) = _launch_nodes(kernels.add_then_relu, torch.randn(10), torch.randn(10))
    launch_id, written, read = node.args
    assert [n.name for n in written] == ["empty_like"] and [n.name for n in read] == ["x", "y"]
    spec = launch_spec(launch_id)
    assert spec.written_names == ("out_ptr",) and spec.unsure is None
    assert spec.args == (("r", 0), ("r", 1), ("w", 0), ("c", 10)) and spec.kwargs == {"BLOCK": ("c", 64)}


def test_capture_counts_every_tensor_as_written_when_unsure(kernels):
    gm, (node,) = _launch_nodes(kernels.through_a_helper, torch.randn(10))
    spec = launch_spec(node.args[0])
    assert "_store_helper()" in spec.unsure and len(node.args[1]) == 2 and node.args[2] == []


def test_one_tensor_passed_twice_takes_one_written_slot(kernels):
    gm, (node,) = _launch_nodes(kernels.add_into_input, torch.randn(10), torch.randn(10))
    spec = launch_spec(node.args[0])
    assert spec.args[0] == spec.args[2] == ("w", 0) and spec.args[1] == ("r", 0)


def test_aot_graph_holds_the_functional_launch(kernels):
    x, y = torch.randn(10), torch.randn(10)
    gm, _ = _launch_nodes(kernels.add_into_input, x, y)
    ag = aot_trace(gm, [x, y])
    names = [str(n.target) for n in ag.call_nodes()]
    assert names.count("kiln_functional.kiln_user__triton_launch__default.default") == 1
    assert ag.mutated_inputs == [0]  # x is written back after the graph


def test_kiln_wrapper_launches_the_user_kernel(kernels):
    text = str(kiln.explain(kernels.read_before_and_after)(torch.randn(100)))
    assert "user Triton kernel add_kernel, writes out_ptr" in text
    # y = x + 1 is computed, read (y * 3), copied for the kernel to overwrite, then read again
    assert re.search(r"= aten_\d+\(\d+, \[buf\d+\], \[x\]\)  # user Triton kernel add_kernel", text), text


def test_kiln_wrapper_gives_an_empty_output_to_the_kernel_without_filling_or_copying_it(kernels):
    text = str(kiln.explain(kernels.add_then_relu)(torch.randn(100), torch.randn(100)))
    assert re.search(r"= aten_\d+\(\d+, \[None\], \[x, y\]\)  # user Triton kernel add_kernel, writes out_ptr; "
                     r"writes new tensors", text), text
    assert "empty" not in text.split("wrapper:")[1].split("guards")[0].replace("empty_strided", "")


def test_launch_hands_the_kernel_the_traced_layout(kernels):
    """A tensor arriving in another layout than at capture is copied into that layout for the kernel."""
    x = torch.randn(4, 6)
    gm, (node,) = _launch_nodes(lambda a, b: kernels.add_into_input(a, b), x.t().contiguous().t(), x.clone())
    written, read = [torch.randn(4, 6)], [torch.randn(4, 6)]  # row-major, the capture saw column-major
    expected = written[0].t().contiguous().t()  # eager: the kernel sees the column-major memory
    kernels.add_into_input(expected, read[0])
    flat_sum = written[0] + read[0]  # what the kernel would compute on the row-major memory
    run_launch(node.args[0], written, read)
    torch.testing.assert_close(written[0], expected)
    assert not torch.allclose(written[0], flat_sum)
