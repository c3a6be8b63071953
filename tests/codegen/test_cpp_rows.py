"""Row caches (codegen/cpp/rows.py): a costly value a reduction computes per row element and a later
member of the kernel needs again is stored in a per-thread row array and read back, not recomputed."""
import re

import torch

from tests.codegen.test_cpp_loops import run


def _kernel_body(source: str) -> str:
    return source[source.index('extern "C" void cpp_'):]


def test_softmax_computes_exp_once(tmp_path):
    x = torch.randn(6, 3, 40)
    x[1, 2, :] = float("-inf")
    x[2, 0, 5] = float("nan")
    n, src = run(lambda t: torch.softmax(t, -1), x, tmp_path=tmp_path)
    body = _kernel_body(src)
    assert n == 1
    assert body.count("std::exp(") == 1
    assert re.search(r"float row0\[40\];", body)
    assert re.search(r"row0\[r0\] = tmp\d+;", body) and re.search(r"= row0\[x2\];", body)


def test_two_dim_rows(tmp_path):
    def f(t):
        e = torch.exp(t - t.amax((1, 2), keepdim=True))
        return e / e.sum((1, 2), keepdim=True) + t
    x = torch.randn(5, 6, 7)
    _, src = run(f, x, tmp_path=tmp_path)
    body = _kernel_body(src)
    assert body.count("std::exp(") == 1
    assert "row0[r0*7 + r1] =" in body and "row0[x1*7 + x2]" in body


def test_cheap_and_other_row_values_are_recomputed(tmp_path):
    # layer_norm's x - mean is cheap (recomputed); a transposed read is another element (not cached)
    def f(t):
        e = torch.exp(t)
        return e / e.sum(-1, keepdim=True) + torch.exp(t.transpose(0, 1).reshape(t.shape))
    x = torch.randn(8, 8)
    _, src = run(f, x, tmp_path=tmp_path)
    body = _kernel_body(src)
    assert body.count("row0[") == 3 and "row1" not in body  # declared, stored, loaded
    assert body.count("std::exp(") == 2
    x = torch.randn(4, 30)
    _, src = run(lambda t: torch.nn.functional.layer_norm(t, (30,)), x, tmp_path=tmp_path / "ln")
    assert "row0" not in src
