"""Loop-IR handlers on hand-built buffers: the Evaluator (reference), the Printer, ReadsWrites, and the
masked / indirect-indexing ops."""
import pytest
import sympy
import torch

from kiln.loopir.handlers import Printer, ReadsWrites, evaluate_buffer, format_buffer, run_body
from kiln.loopir.nodes import ComputedBuffer, Pointwise, Reduction, contiguous_strides

cpu = torch.device("cpu")


def pointwise(name, size, dtype, body):
    size = tuple(size)
    return ComputedBuffer(name, dtype, cpu, size, contiguous_strides(size), data=Pointwise(size, body, dtype))


def test_evaluator_pointwise_with_broadcast_and_transpose():
    a = torch.arange(12.0).reshape(3, 4)
    b = torch.tensor([1.0, -1.0, 2.0])

    def body(ops, i):  # out[i0, i1] = a[i1, i0] * b[i1] + i0
        x = ops.load("a", i[1] * 4 + i[0])
        y = ops.load("b", i[1])
        return ops.add(ops.mul(x, y), ops.index_expr(i[0], torch.float32))

    buf = pointwise("out", (4, 3), torch.float32, body)
    flats = {"a": a.reshape(-1), "b": b, "out": torch.zeros(12)}
    evaluate_buffer(buf, flats)
    torch.testing.assert_close(flats["out"].reshape(4, 3), a.t() * b + torch.arange(4.0)[:, None])


@pytest.mark.parametrize("kind", ["sum", "max", "argmax", "argmin", "any"])
def test_evaluator_reduction_over_inner_axis(kind):
    x = torch.tensor([[1.0, 5.0, 5.0], [float("nan"), 2.0, 0.0]])
    dtype = torch.bool if kind == "any" else torch.float32
    out_dtype = torch.int64 if kind.startswith("arg") else dtype

    def body(ops, i, r):
        v = ops.load("x", i[0] * 3 + r[0])
        return ops.ne(v, ops.constant(0.0, torch.float32)) if kind == "any" else v

    buf = ComputedBuffer("out", out_dtype, cpu, (2,), (1,), data=Reduction((2,), (3,), body, kind, dtype, out_dtype))
    flats = {"x": x.reshape(-1), "out": torch.zeros(2, dtype=out_dtype)}
    evaluate_buffer(buf, flats)
    expected = {"sum": x.sum(1), "max": x.amax(1), "argmax": x.argmax(1), "argmin": x.argmin(1), "any": (x != 0).any(1)}
    torch.testing.assert_close(flats["out"], expected[kind], equal_nan=True)


def _pad_body(ops, i):
    # out[i] = x[i - 2] for 2 <= i < 5, else -1: the load is out of bounds where the mask is false
    j = ops.index_expr(i[0], torch.int64)
    inside = ops.logical_and(ops.ge(j, ops.constant(2, torch.int64)), ops.lt(j, ops.constant(5, torch.int64)))
    return ops.masked(inside, lambda: ops.load("x", i[0] - 2), -1.0)


def test_masked_evaluates_only_where_the_mask_holds():
    buf = pointwise("out", (7,), torch.float32, _pad_body)
    flats = {"x": torch.tensor([10.0, 20.0, 30.0]), "out": torch.zeros(7)}
    evaluate_buffer(buf, flats)
    torch.testing.assert_close(flats["out"], torch.tensor([-1.0, -1, 10, 20, 30, -1, -1]))


def test_masked_prints_and_records_its_reads():
    buf = pointwise("out", (7,), torch.float32, _pad_body)
    text = format_buffer(buf, {"x": torch.float32, "out": torch.float32})
    assert "masked tmp" in text and "load(x, x0 - 2)" in text and "-1.0" in text, text
    rw = ReadsWrites({"x": torch.float32, "out": torch.float32})
    run_body(buf, rw)
    assert rw.reads == [("x", sympy.Symbol("x0", integer=True, nonnegative=True) - 2)]
    assert [w for w, _ in rw.writes] == ["out"]


def _gather_body(ops, i):
    v = ops.load("idx", i[0])
    k = ops.indirect_indexing(v, 4)
    return ops.load("x", k * 2 + i[1])


def test_indirect_indexing_wraps_negative_and_checks_bounds():
    buf = pointwise("out", (3, 2), torch.float32, _gather_body)
    x = torch.arange(8.0)
    flats = {"x": x, "idx": torch.tensor([3, -1, 0]), "out": torch.zeros(6)}
    evaluate_buffer(buf, flats)
    torch.testing.assert_close(flats["out"].reshape(3, 2), x.reshape(4, 2)[[3, -1, 0]])
    flats["idx"] = torch.tensor([0, 4, 1])
    with pytest.raises(IndexError):
        evaluate_buffer(buf, flats)


def test_indirect_index_under_a_mask_is_checked_only_where_it_holds():
    def body(ops, i):
        v = ops.load("idx", i[0])
        ok = ops.ge(v, ops.constant(0, torch.int64))
        return ops.masked(ok, lambda: ops.load("x", ops.indirect_indexing(v, 3, False)), 0.5)

    buf = pointwise("out", (3,), torch.float32, body)
    flats = {"x": torch.tensor([1.0, 2.0, 3.0]), "idx": torch.tensor([2, -7, 0]), "out": torch.zeros(3)}
    evaluate_buffer(buf, flats)
    torch.testing.assert_close(flats["out"], torch.tensor([3.0, 0.5, 1.0]))


def test_printer_names_indirect_indices():
    p = Printer({"x": torch.float32, "idx": torch.int64, "out": torch.float32})
    run_body(pointwise("out", (3, 2), torch.float32, _gather_body), p)
    assert any(line.startswith("ind") and "indirect_indexing" in line for line in p.lines), p.lines
