"""Reductions in both styles (persistent: the row in one block; looped: block accumulators), over
each axis and all axes, with NaN and tie semantics as in eager."""
import pytest
import torch

from tests.codegen.triton.helpers import check

LOOPED = dict(triton_persistent_max=8, triton_max_block=8)
STYLES = {"persistent": {}, "looped": LOOPED}


@pytest.mark.parametrize("style", STYLES)
@pytest.mark.parametrize("dim", [0, 1, None])
def test_sum_max_min(style, dim):
    x = torch.randn(6, 21)

    def f(x):
        if dim is None:
            return x.sum(), x.amax(), x.amin()
        return x.sum(dim), x.amax(dim), x.amin(dim, keepdim=True)

    check(f, x, atol=1e-4, **STYLES[style])


@pytest.mark.parametrize("style", STYLES)
def test_reduction_over_middle_dim_and_two_dims(style):
    x = torch.randn(3, 10, 4)

    def f(x):
        return x.sum(1), x.amax((0, 2)), x.prod(2)

    check(f, x, atol=1e-4, **STYLES[style])


@pytest.mark.parametrize("style", STYLES)
def test_max_propagates_nan(style):
    x = torch.randn(4, 13)
    x[1, 5] = float("nan")
    x[3, 12] = float("nan")
    check(lambda x: (x.amax(1), x.amin(1), x.sum(1)), x, **STYLES[style])


@pytest.mark.parametrize("style", STYLES)
def test_argmax_first_index_of_ties_and_nan(style):
    x = torch.tensor([[1.0, 3.0, 3.0, 0.0, 3.0, 2.0, 1.0, 3.0, 0.0, 1.0, 3.0],
                      [float("nan"), 1.0, float("nan"), 5.0, 5.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
                      [-1.0, -1.0, -2.0, -2.0, -1.0, -2.0, -2.0, -2.0, -2.0, -1.0, -2.0],
                      [float("-inf")] * 11])
    check(lambda x: (x.argmax(1), x.argmin(1)), x, **STYLES[style])
    check(lambda x: (x.argmax(0), x.argmin(0)), x, **STYLES[style])


def test_argmax_ties_across_chunks():
    x = torch.zeros(2, 40)
    x[0, 30] = x[0, 3] = 1.0
    x[1, 17] = x[1, 39] = -1.0
    check(lambda x: (x.argmax(1), x.argmin(1)), x, **LOOPED)


def test_argmax_int():
    x = torch.randint(-3, 3, (5, 12), dtype=torch.int32)
    check(lambda x: (x.argmax(1), x.argmin(0)), x)


@pytest.mark.parametrize("style", STYLES)
def test_any_all_and_integer_sums(style):
    b = torch.rand(5, 11) > 0.7
    i = torch.randint(-100, 100, (5, 11), dtype=torch.int64)
    check(lambda b, i: (b.any(1), b.all(0), i.sum(1), i.amax(0), i.amin(1), b.sum(1)), b, i, **STYLES[style])


def test_sum_then_pointwise_epilogue_and_reuse():
    def f(x):
        m = x.mean(1, keepdim=True)
        return (x - m) * 2, m

    check(f, torch.randn(9, 14), kernels=1, atol=1e-5)


@pytest.fixture
def split_on_cpu(monkeypatch):
    import kiln.lower.reduction as red

    monkeypatch.setattr(red, "SPLIT_DEVICES", ("cuda", "cpu"))
    monkeypatch.setattr(red, "SPLIT_MIN", 64)
    monkeypatch.setattr(red, "SPLIT_MIN_CHUNK", 16)
    monkeypatch.setattr(red, "SPLIT_MAX_PARTS", 7)


@pytest.mark.parametrize("shape,chunk", [((13, 11, 3), 62), ((16, 7), 16)])  # 429 = 6 * 62 + 57; 112 = 7 * 16
def test_split_full_reductions(split_on_cpu, shape, chunk):
    x = torch.randn(*shape)
    x.view(-1)[5] = float("nan")
    i = torch.randint(-3, 4, shape)

    def f(x, i):
        y = torch.nan_to_num(x)
        return (y.sum(), x.amax(), y.amin(), (y > 2).any(), (y > -9).all(), y.to(torch.bfloat16).sum(), y.mean(),
                i.sum(), (i.abs() + 1).prod(), y.argmax())

    cg = check(f, x, i, atol=1e-4, rtol=1e-4)
    text = cg.lg.format()
    assert f"reduction sum over [7] x [{chunk}]" in text and "reduction sum over [] x [7]" in text
    assert f"reduction argmax over [] x [{', '.join(map(str, shape))}]" in text  # argmax stays whole
    assert ("masked" in text) == (chunk == 62)


@pytest.fixture
def split_rows_on_cpu(split_on_cpu, monkeypatch):
    import kiln.lower.reduction as red

    monkeypatch.setattr(red, "SPLIT_ROWS_MIN", 64)
    monkeypatch.setattr(red, "SPLIT_ROWS_MIN_WORK", 256)
    monkeypatch.setattr(red, "SPLIT_ROWS_MIN_CHUNK", 16)
    monkeypatch.setattr(red, "SPLIT_ROWS_TARGET", 20)


@pytest.mark.parametrize("channels_last", [False, True])
def test_split_reductions_to_few_outputs(split_rows_on_cpu, channels_last):
    # batch norm's statistics in training: one output per channel over N*H*W; 4 channels over
    # 3*7*9 = 189 elements: 5 chunks (20 // 4) of 38 (the last one masked), partials laid out [5, 4]
    x = torch.randn(3, 4, 7, 9)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    x[1, 2, 3, 4] = float("nan")

    def f(x):
        y = torch.nan_to_num(x)
        return (y.sum((0, 2, 3)), y.mean((0, 2, 3), keepdim=True), x.amax((0, 2, 3)), (y > 2).any(3).any(2).any(0),
                y.to(torch.bfloat16).sum((0, 2, 3), dtype=torch.float32), y.sum(3),  # y.sum(3): rows too short
                y.sum((1, 2, 3)))  # per-sample rows are never split (softmax, layer norm: fused with their users)

    cg = check(f, x, atol=1e-4, rtol=1e-4)
    text = cg.lg.format()
    assert "reduction sum over [5, 4] x [38]" in text and "reduction sum over [4] x [5]" in text
    assert "reduction sum over [3, 4, 7] x [9]" in text
    assert "reduction sum over [3] x [4, 7, 9]" in text


def test_split_column_sums_take_many_columns_per_program(split_rows_on_cpu):
    # a layer norm's weight gradient: one output per feature over all rows of a row-major [rows, features]
    # tensor; the partial kernel reads along its outputs (columns), so it gets wide x blocks
    from kiln.codegen.triton.launch import candidate_configs

    g, xhat = torch.randn(300, 6), torch.randn(300, 6)
    cg = check(lambda g, xhat: ((g * xhat).sum(0), g.sum(0), g.sum(1)), g, xhat, atol=1e-4, rtol=1e-4)
    text = cg.lg.format()
    assert "reduction sum over [4, 6] x [75]" in text  # 20 // 6 + 1 = 4 chunks of 75 rows
    partial = [k for k in cg.kernels.values() if k.xnumel == 24]
    assert partial and all(k.column for k in partial)
    assert all(k.column for k in cg.kernels.values() if k.xnumel == 6)  # the final sums: columns of [4, 6]
    assert all(not k.column for k in cg.kernels.values() if k.xnumel == 300)  # g.sum(1) reads rows
    cfg = candidate_configs(partial[0])[0]
    assert cfg.XBLOCK == 32  # every partial row (24) in one block of a persistent kernel: 32 x 128


def test_full_reduction_not_split_on_cpu_by_default():
    x = torch.randn(300, 300)
    cg = check(lambda x: x.sum(), x, atol=1e-3, rtol=1e-4)
    assert "reduction sum over [] x [300, 300]" in cg.lg.format()


def test_looped_loops_that_reread_a_row_get_cache_hints():
    # layer_norm in a looped kernel reads x in three loops (mean, variance, output): the first two keep
    # x's lines in L2 for the next read, the last lets them go; w and b are read once each
    def f(x, w, b):
        return torch.nn.functional.layer_norm(x, (70,), w, b)

    cg = check(f, torch.randn(3, 70), torch.randn(70), torch.randn(70), kernels=1, **LOOPED)
    (k,) = cg.kernels.values()
    assert k.style == "looped"
    x_loads = [ln for ln in k.source.splitlines() if "tl.load(in_ptr0" in ln]
    assert len(x_loads) == 3
    assert [ln.split("eviction_policy=")[-1] for ln in x_loads] == ["'evict_last')"] * 2 + ["'evict_first')"]
    assert sum("eviction_policy" in ln for ln in k.source.splitlines() if "tl.load(" in ln) == 3
    persistent = check(f, torch.randn(3, 70), torch.randn(70), torch.randn(70))
    assert all("eviction_policy" not in k.source for k in persistent.kernels.values())  # one read: no hint
