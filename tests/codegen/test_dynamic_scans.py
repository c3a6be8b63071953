"""Scans and sorts in size-generic C++ (symbolic sizes): one compile serves every size (test_dynamic_codegen.s
harness); under Triton a symbolic scan stays ATen's."""
import torch

from tests.codegen.test_dynamic_codegen import GraphBuilder, run_sizes

aten = torch.ops.aten


def test_scans_along_symbolic_and_static_dims():
    b = GraphBuilder()
    x = b.input(lambda n: torch.randn(n, 24))
    y = b.input(lambda n: torch.randn(5, n), dims=(1,))
    relu = b.op(aten.relu.default, x)
    along_n = b.op(aten.cumsum.default, relu, 0)  # symbolic scanned dim, static lanes
    along_24 = b.op(aten.exp.default, b.op(aten.cumsum.default, x, 1))  # static scanned dim, symbolic rows
    mx = b.op(aten.cummax.default, y, 1)  # symbolic scanned dim, last
    values = b.op(__import__("operator").getitem, mx, 0)
    indices = b.op(__import__("operator").getitem, mx, 1)
    lse = b.op(aten.logcumsumexp.default, y, 0)
    cg = run_sizes(b, b.module(along_n, along_24, values, indices, lse))
    assert not cg.lg.fallbacks, cg.lg.fallbacks
    assert "int64_t s0" in cg.source


def test_symbolic_scan_under_triton_stays_aten():
    b = GraphBuilder()
    x = b.input(lambda n: torch.randn(n, 6))
    c = b.op(aten.cumsum.default, b.op(aten.relu.default, x), 0)
    cg = run_sizes(b, b.module(c), target="triton-interpreted", sizes=(8, 5))
    assert "Triton scan kernels are not written" in str(cg.lg.fallbacks)


def test_sorts_with_symbolic_rows_and_row_length():
    b = GraphBuilder()
    x = b.input(lambda n: torch.randint(0, 4, (n, 12)).float())  # ties: ATen's order of equal elements
    y = b.input(lambda n: torch.randint(0, 3, (3, n)).float(), dims=(1,))
    get = __import__("operator").getitem
    s = b.op(aten.sort.stable, x, stable=True, dim=1, descending=True)
    t = b.op(aten.topk.default, y, 2, 1)  # k * 64 <= n decided at run time
    m = b.op(aten.median.dim, y, 1)
    mo = b.op(aten.mode.default, y, 1)
    outs = [b.op(get, v, i) for v in (s, t, m, mo) for i in (0, 1)]
    cg = run_sizes(b, b.module(*outs), sizes=(8, 5, 13, 200))
    assert not cg.lg.fallbacks and "extern" not in cg.sched.format(), cg.sched.format()
