"""embedding_bag in sum and mean mode (kiln/decomp/embedding_bag.py): all four outputs against ATen's
(the auxiliary ones exactly: autograd hands them to ATen's backward), end to end through the lowering,
and a training step whose gradients match eager's."""
import itertools

import pytest
import torch
import torch.fx as fx
import torch.nn.functional as F

import kiln
from kiln.backends.kiln import kiln_backend
from kiln.decomp import decomposition_table
from tests.lower.helpers import check

aten = torch.ops.aten
TABLE = decomposition_table()
OFFSETS = [[0, 2, 2, 5], [0, 2, 2, 5, 8], [0, 3, 8, 8], [0], [0, 8]]


def test_embedding_bag_matches_aten_all_outputs():
    g = torch.Generator().manual_seed(0)
    w = torch.randn(10, 3, generator=g)
    idx = torch.tensor([1, 2, 4, 5, 4, 3, 2, 9])
    psw = torch.rand(8, generator=g)
    for op, off, incl, mode, weights in itertools.product(
            (aten._embedding_bag.default, aten._embedding_bag_forward_only.default), OFFSETS, (False, True), (0, 1),
            (None, psw)):
        if weights is not None and mode != 0:
            continue
        offsets = torch.tensor(off)
        try:
            expected = op(w, idx, offsets, False, mode, False, weights, incl, -1)
        except RuntimeError:
            continue  # (ATen rejects the combination)
        got = TABLE[op](w, idx, offsets, False, mode, False, weights, incl, -1)
        if got is NotImplemented:
            assert incl and len(off) == 1  # no bags: ATen's kernel
            continue
        what = f"{op} offsets={off} include_last={incl} mode={mode} weights={weights is not None}"
        torch.testing.assert_close(got[0], expected[0], atol=1e-6, rtol=1e-6, msg=lambda m: f"{what}: {m}")
        for i in (1, 2, 3):
            assert got[i].dtype == expected[i].dtype and got[i].tolist() == expected[i].tolist(), (what, i, got[i], expected[i])
    assert TABLE[aten._embedding_bag.default](w, idx, torch.tensor([0, 4]), False, 0, False, None, False, 3) is NotImplemented


def test_embedding_bag_max_mode_nans_ties_and_empty_bags():
    g = torch.Generator().manual_seed(1)
    for trial in range(6):
        w = torch.randint(-2, 3, (7, 3), generator=g).float()  # ties
        w[torch.rand(7, 3, generator=g) < 0.2] = float("nan")
        w[trial % 7, 0] = float("-inf")
        idx = torch.randint(0, 7, (9,), generator=g)
        for off, incl in itertools.product(OFFSETS + [[0, 1, 1, 4, 9]], (False, True)):
            if len(off) == 1 and incl:
                continue
            for op in (aten._embedding_bag.default, aten._embedding_bag_forward_only.default):
                offsets = torch.tensor(off)
                expected = op(w, idx, offsets, False, 2, False, None, incl, -1)
                got = TABLE[op](w, idx, offsets, False, 2, False, None, incl, -1)
                what = f"{w.tolist()} {idx.tolist()} offsets={off} include_last={incl}"
                torch.testing.assert_close(got[0], expected[0], atol=0, rtol=0, equal_nan=True, msg=lambda m: f"{what}: {m}")
                for i in (1, 2, 3):
                    assert got[i].tolist() == expected[i].tolist(), (what, i, got[i], expected[i])


def test_embedding_bag_end_to_end():
    w = torch.randn(12, 4)
    idx = torch.tensor([[1, 2, 11], [4, 4, 0]])
    flat, offsets = torch.tensor([3, 1, 1, 7, 0, 5]), torch.tensor([0, 2, 2, 4])

    def fn(w, idx, flat, offsets):
        return [F.embedding_bag(idx, w * 2, mode="sum"), F.embedding_bag(idx, w, mode="mean"),
                F.embedding_bag(flat, w, offsets, mode="mean"), F.embedding_bag(flat, w, offsets, include_last_offset=True),
                F.embedding_bag(idx, w, mode="max"), F.embedding_bag(flat, w.sin(), offsets, mode="max")]

    check(fn, w, idx, flat, offsets)


def test_embedding_bag_training_gradients():
    """The forward is generated code; ATen's backward gets the auxiliary outputs eager would give it."""
    w0, idx = torch.randn(12, 4), torch.tensor([3, 1, 1, 7, 0, 5, 5, 2])
    offsets = torch.tensor([0, 3, 3, 6])

    def fn(w, idx, offsets):
        return ((F.embedding_bag(idx, w, offsets, mode="mean") * 3).tanh() + F.embedding_bag(idx, w, offsets)
                + F.embedding_bag(idx, w, offsets, mode="max"))

    graph = fx.Graph()
    ph = [graph.placeholder(f"t{i}") for i in range(3)]
    graph.output(graph.call_function(fn, tuple(ph)))
    compiled = kiln_backend(fx.GraphModule(torch.nn.Module(), graph), [w0.clone().requires_grad_(), idx, offsets])
    assert compiled.codegen_complete
    externs = [str(s.node.node.op) for cg in compiled.compiled_graphs for s in cg.sched.steps if not hasattr(s, "members")]
    assert not any("_embedding_bag.default" in e or "forward_only" in e for e in externs), externs
    results = []
    for f in (fn, compiled):
        w = w0.clone().requires_grad_()
        out = f(w, idx, offsets)
        out.backward(torch.linspace(-1, 1, out.numel()).view(out.shape))
        results.append((out.detach(), w.grad))
    torch.testing.assert_close(results[1], results[0], atol=1e-5, rtol=1e-5)


def test_embedding_bag_auxiliary_outputs_take_cuda_layout_off_the_cpu():
    """Off the CPU the auxiliary outputs are shaped as ATen's CUDA kernels make them (their backward
    reads them): offset2bag per index in every mode, bag_size per offset, max_indices empty outside
    max mode (meta tensors: the shapes; the values are checked on a GPU below)."""
    w, idx = torch.empty(10, 3, device="meta"), torch.empty(8, dtype=torch.int64, device="meta")
    for mode, incl in itertools.product((0, 1, 2), (False, True)):
        offsets = torch.empty(4, dtype=torch.int64, device="meta")
        bags = 3 if incl else 4
        out, offset2bag, bag_size, max_indices = TABLE[aten._embedding_bag.default](
            w, idx, offsets, False, mode, False, None, incl, -1)
        assert out.shape == (bags, 3) and offset2bag.shape == (8,) and bag_size.shape == (4,), (mode, incl)
        assert max_indices.shape == ((bags, 3) if mode == 2 else (0,)), (mode, incl)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_embedding_bag_cuda_outputs_and_training_gradients():
    g = torch.Generator().manual_seed(2)
    w0 = torch.randn(12, 4, generator=g).cuda()
    w0[3, 1] = w0[5, 1]  # a tie in max mode
    idx = torch.tensor([3, 1, 1, 7, 0, 5, 5, 2], device="cuda")
    psw = torch.rand(8, generator=g).cuda()
    for off, incl, mode, weights in itertools.product(
            ([0, 3, 3, 6], [0, 2, 2, 8], [0, 3, 8, 8]), (False, True), (0, 1, 2), (None, psw)):
        if weights is not None and mode != 0:
            continue
        offsets = torch.tensor(off, device="cuda")
        bags = len(off) - 1 if incl else len(off)
        what = f"offsets={off} include_last={incl} mode={mode} weights={weights is not None}"
        expected = aten._embedding_bag.default(w0, idx, offsets, False, mode, False, weights, incl, -1)
        got = TABLE[aten._embedding_bag.default](w0, idx, offsets, False, mode, False, weights, incl, -1)
        torch.testing.assert_close(got[0], expected[0], atol=1e-6, rtol=1e-6, msg=lambda m: f"{what}: {m}")
        assert got[1].tolist() == expected[1].tolist(), (what, got[1], expected[1])
        assert got[2][:bags].tolist() == expected[2][:bags].tolist(), (what, got[2], expected[2])
        if mode == 2:
            assert got[3].tolist() == expected[3].tolist(), (what, got[3], expected[3])

        def fn(w, p):
            return F.embedding_bag(idx, w, offsets, mode=("sum", "mean", "max")[mode], per_sample_weights=p,
                                   include_last_offset=incl).sin()

        compiled = kiln.compile(fn)
        results = []
        for f in (fn, compiled):
            w = w0.clone().requires_grad_()
            p = weights.clone().requires_grad_() if weights is not None else None
            out = f(w, p)
            out.backward(torch.linspace(-1, 1, out.numel(), device="cuda").view(out.shape))
            results.append((out.detach(), w.grad, None if p is None else p.grad))
        torch.cuda.synchronize()
        torch.testing.assert_close(results[1], results[0], atol=1e-5, rtol=1e-5, msg=lambda m: f"{what}: {m}")


def test_embedding_bag_int32_indices_and_offsets_train():
    """ATen's auxiliary outputs take the promoted index dtype (int32 here) and its backward checks it:
    int64 ones made the compiled training step raise."""
    w0 = torch.randn(12, 4)
    for idx_dtype, off_dtype in ((torch.int32, torch.int32), (torch.int32, torch.int64)):
        idx = torch.tensor([3, 1, 1, 7, 0, 5, 5, 2], dtype=idx_dtype)
        offsets = torch.tensor([0, 3, 3, 6], dtype=off_dtype)
        for mode in ("sum", "mean", "max"):
            got = TABLE[aten._embedding_bag.default](w0, idx, offsets, False, ("sum", "mean", "max").index(mode),
                                                    False, None, False, -1)
            expected = aten._embedding_bag.default(w0, idx, offsets, False, ("sum", "mean", "max").index(mode),
                                                   False, None, False, -1)
            assert [t.dtype for t in got[1:]] == [t.dtype for t in expected[1:]], (idx_dtype, off_dtype, mode)

            def fn(w):
                return F.embedding_bag(idx, w, offsets, mode=mode).sin()

            results = []
            for f in (fn, kiln.compile(fn)):
                w = w0.clone().requires_grad_()
                out = f(w)
                out.backward(torch.linspace(-1, 1, out.numel()).view(out.shape))
                results.append((out.detach(), w.grad))
            torch.testing.assert_close(results[1], results[0], atol=1e-5, rtol=1e-5)
