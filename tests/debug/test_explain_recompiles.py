"""kiln.explain of a compiled function reports its recompiles so far (the guard each of the newest cache
entries failed) and the frames whose sizes stayed static, with why: a user whose function compiled
once per size saw only the last graph, its sizes concrete, and no reason."""
import torch
import torch.nn.functional as F

import kiln


def test_recompiles_and_static_sizes_are_reported():
    def f(x):
        return F.fold(x, (x.shape[-1] // 2 + 1, 3), 2)  # (col2im: static sizes, one graph per size)

    compiled = kiln.compile(f)
    for n in (5, 7, 9):
        compiled(torch.randn(1, 8, 2 * n))
    report = kiln.explain(compiled)(torch.randn(1, 8, 22))
    assert len(report.recompiles) == 2
    frame, failed = report.recompiles[-1]
    assert "test_explain_recompiles.py" in frame and len(failed) == 2
    text = str(report)
    assert "recompiles so far (2" in text and "size=(1, 8, 14)" in text and "size=(1, 8, 10)" in text
    assert any("col2im" in note for note in report.static_sizes) and "sizes kept static:" in text


def test_a_dynamic_function_reports_its_one_recompile_and_nothing_static():
    compiled = kiln.compile(lambda x: x * 2)
    for n in (5, 7, 9):
        compiled(torch.randn(n))
    report = kiln.explain(compiled)(torch.randn(11))
    assert len(report.recompiles) == 1 and not report.static_sizes
    assert "sizes kept static" not in str(report)
