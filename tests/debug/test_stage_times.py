"""Stage times: ``kiln.stats.stages`` holds exclusive seconds per compile stage (they add up), and
``kiln.explain`` prints them."""
import torch

import kiln
from kiln.debug import stats as stats_module
from kiln.debug.stats import Stats


def test_nested_stages_are_exclusive(monkeypatch):
    clock = iter(range(100))
    monkeypatch.setattr(stats_module.time, "perf_counter", lambda: float(next(clock)))
    s = Stats()
    with s.timed("outer"):  # t=0
        with s.timed("inner"):  # t=1 .. 2
            pass
        with s.timed("outer"):  # t=3 .. 4: the same stage nested in itself
            pass
    # outer ends at t=5
    assert s.seconds == {"outer": 5.0, "inner": 1.0}  # inclusive, outer counted once
    assert s.stages == {"outer": 4.0, "inner": 1.0}  # exclusive: 5 - 1 (inner) + 1 (nested outer) - 1
    assert sum(s.stages.values()) == 5.0


def test_compile_records_each_stage(tmp_path):
    kiln.reset()
    kiln.stats.reset()

    def f(x, w):
        return torch.nn.functional.gelu(x @ w).sum(-1) + x.mean()

    x, w = torch.randn(4, 8), torch.randn(8, 8)
    opts = kiln.Options(cache_dir=str(tmp_path))
    out = kiln.compile(f, options=opts)(x, w)
    torch.testing.assert_close(out, f(x, w))
    stages = kiln.stats.snapshot()["stages"]
    for stage in ("capture", "guards", "aot", "lower", "schedule", "codegen", "kernel_load", "cpp_compile",
                  "first_run"):
        assert stages.get(stage, 0) > 0, (stage, stages)
    total = kiln.stats.seconds["capture"] + kiln.stats.seconds["first_run"]  # the two outermost stages
    assert abs(sum(kiln.stats.stages.values()) - total) < 1e-6


def test_explain_prints_stage_times(tmp_path):
    kiln.reset()
    report = kiln.explain(lambda x: (x * 2).relu(), options=kiln.Options(cache_dir=str(tmp_path)))(torch.randn(5))
    text = str(report)
    assert "time by stage" in text and "lower" in report.stages and "total" in text
