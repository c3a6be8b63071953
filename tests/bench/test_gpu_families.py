"""benchmarks/gpu_families.py on the CPU: every case builds at the tiny size, kiln's compiled result
matches eager's, and the section's rows and summary print from timings."""
import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks"))
import gpu_families  # noqa: E402

import kiln  # noqa: E402


def _flat(out):
    return list(out) if isinstance(out, (tuple, list)) else [out]


def test_every_case_builds_on_cpu_in_both_dtypes():
    cases = gpu_families.family_cases("cpu", (torch.float32, torch.bfloat16), "tiny")
    assert {c[0] for c in cases} == set(gpu_families.FAMILIES)
    assert len(cases) == 2 * sum(len(b("cpu", torch.float32, "tiny")) for b in gpu_families.BUILDERS.values())
    for family, name, what, fn, args, nbytes in cases:
        out = _flat(fn(*args))
        produced = sum(o.numel() * o.element_size() for o in out)
        assert nbytes >= produced > 0, name  # at least the outputs are counted


@pytest.mark.parametrize("codegen", ["cpp", "triton"])
@pytest.mark.parametrize("family", gpu_families.FAMILIES)
def test_kiln_matches_eager_on_every_case(family, codegen):
    """C++ kernels, and the Triton kernels the GPU runs (Triton's interpreter on CPU tensors)."""
    for _, name, _, fn, args, _ in gpu_families.family_cases("cpu", (torch.float32,), "tiny", (family,)):
        kiln.reset()
        expected = _flat(fn(*args))
        got = _flat(kiln.compile(fn, options={"cpu_codegen": codegen})(*args))
        assert len(got) == len(expected), name
        for g, e in zip(got, expected):
            torch.testing.assert_close(g, e, atol=1e-5, rtol=1e-5, msg=lambda m: f"{name}: {m}")


def test_rows_and_summary_from_timings(capsys):
    def fake_bench(fn, args, backends, ref64=None, pipelined=False, gpu_time=False):
        # wall: kiln fastest; GPU time: kiln level with eager (within 1%) after torch.compile
        return {b: {"ms": ms, "gpu_ms": gpu, "matches_eager": True}
                for b, ms, gpu in zip(backends, (2.0, 1.0, 0.5), (0.4, 0.2, 0.402))}

    rows = gpu_families.run_families(fake_bench, ("eager", "torch.compile", "kiln"), 100.0, "tiny", ("scan",),
                                     (torch.float32,), device="cpu")
    assert [r["case"] for r in rows] == ["cumsum_rows f32", "cumsum_cols f32", "cumsum_fused f32", "cummax_rows f32"]
    kiln_row = rows[0]["results"]["kiln"]
    assert kiln_row["GBs"] == pytest.approx(rows[0]["bytes"] / 0.5 / 1e6)
    assert kiln_row["copy_share"] == pytest.approx(kiln_row["GBs"] / 100.0)
    printed = capsys.readouterr().out
    assert " 4.00x  2.00x" in printed
    assert "kiln slower than eager by more than 1% in wall time per call, host overhead included: none" in printed
    assert kiln_row["gpu_GBs"] == pytest.approx(rows[0]["bytes"] / 0.402 / 1e6)
    assert "GPU time per call (profiler: the kernels' own time)" in printed and " 1.00x  0.50x" in printed
    assert "kiln slower than eager by more than 1% in GPU time: none" in printed
    assert "level with eager within 1% in GPU time" in printed
