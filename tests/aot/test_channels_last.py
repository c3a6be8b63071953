"""Options.conv_channels_last: 2-D convolutions of inference graphs get channels-last inputs and
weights; values and the strides callers see are eager's."""
import torch
import torch.nn as nn

import kiln
from kiln.aot.channels_last import use_channels_last


def _block():
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU(),
        nn.Conv2d(8, 8, 3, stride=2, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
    ).eval()


class Residual(nn.Module):
    def __init__(self):
        super().__init__()
        self.body, self.head = _block(), nn.Linear(8, 4)

    def forward(self, x):
        y = self.body(x)
        return self.head(y.mean((2, 3))), y + 1  # a 2-D and a 4-D output


def _compile(model, x, **options):
    kiln.reset()
    return kiln.compile(model, options={"conv_channels_last": True, **options})


def test_values_and_output_strides_are_eagers():
    model, x = Residual().eval(), torch.randn(2, 3, 12, 12)
    with torch.no_grad():
        want = model(x)
        got = _compile(model, x)(x)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)
        assert g.stride() == w.stride()  # the 4-D output is contiguous again, as eager returns it


def test_triton_generator_too():
    model, x = _block(), torch.randn(1, 3, 8, 8)
    with torch.no_grad():
        torch.testing.assert_close(_compile(model, x, cpu_codegen="triton")(x), model(x), rtol=1e-5, atol=1e-5)


def _captured(model, x):
    graphs = []

    def spy(gm, example_inputs, options=None):
        graphs.append(gm)
        return gm.forward

    kiln.reset()
    with torch.no_grad():
        kiln.compile(model, backend=spy)(x)
    return graphs[0]


def test_convolution_inputs_and_weights_become_channels_last():
    model, x = _block(), torch.randn(1, 3, 8, 8)
    gm = _captured(model, x)
    assert use_channels_last(gm)
    conv_args = [n.args[:2] for n in gm.graph.nodes if n.target is torch.conv2d]
    assert len(conv_args) == 2
    for args in conv_args:
        for a in args:
            assert a.op == "call_method" and a.target == "contiguous"
            assert a.kwargs["memory_format"] is torch.channels_last
    with torch.no_grad():
        torch.testing.assert_close(gm(x)[0], model(x))


def test_graphs_without_convolutions_are_left_alone():
    gm = _captured(nn.Sequential(nn.Linear(4, 4), nn.ReLU()).eval(), torch.randn(2, 4))
    before = str(gm.graph)
    assert not use_channels_last(gm)
    assert str(gm.graph) == before


def test_channels_last_model_keeps_its_layout_without_the_option():
    # a model already run channels-last: kiln's convolution results have the real kernel's strides
    # (no copy back to NCHW after each convolution), and so do its outputs
    model = _block().to(memory_format=torch.channels_last)
    x = torch.randn(2, 3, 8, 8).contiguous(memory_format=torch.channels_last)
    kiln.reset()
    with torch.no_grad():
        got, want = kiln.compile(model)(x), model(x)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert got.stride() == want.stride()


def test_default_is_on_for_cuda_graphs_only():
    from kiln.backends.kiln import _wants_channels_last
    from kiln.options import default_options

    cpu = [torch.randn(1, 3, 8, 8)]
    assert not _wants_channels_last(default_options().replace(conv_channels_last=None), cpu)
    assert _wants_channels_last(default_options().replace(conv_channels_last=True), cpu)
    if torch.cuda.is_available():
        cuda = [torch.randn(1, 3, 8, 8, device="cuda")]
        assert _wants_channels_last(default_options().replace(conv_channels_last=None), cuda)
        assert not _wants_channels_last(default_options().replace(conv_channels_last=False), cuda)


def test_cuda_model_by_default():
    if not torch.cuda.is_available():
        import pytest

        pytest.skip("needs CUDA")
    model, x = Residual().eval().cuda(), torch.randn(2, 3, 12, 12, device="cuda")
    kiln.reset()
    tf32 = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = False  # NCHW and NHWC kernels round differently in TF32
    try:
        with torch.no_grad():
            want, got = model(x), kiln.compile(model)(x)
    finally:
        torch.backends.cudnn.allow_tf32 = tf32
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-4)
        assert g.stride() == w.stride()


def test_explain_says_so():
    model, x = Residual().eval(), torch.randn(2, 3, 12, 12)
    kiln.reset()
    with torch.no_grad():
        on = str(kiln.explain(model, options={"conv_channels_last": True})(x))
        kiln.reset()
        off = str(kiln.explain(model, options={"conv_channels_last": False})(x))
    assert "convolutions run channels-last" in on and "channels-last" not in off


def test_strides_callers_and_views_see_are_eagers():
    # every op after a convolution follows its new layout: views and outputs get eager's layout back,
    # and a graph whose outputs are views of such values is left alone
    torch.manual_seed(0)
    m = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.ReLU()).eval()
    x = torch.randn(2, 3, 8, 8)
    cases = [
        lambda x: m(x).flatten(2),
        lambda x: m(x).view(2, -1),  # conv -> view(N, -1): a view of the channels-last result would fail
        lambda x: m(x).flatten(2).transpose(1, 2),
        lambda x: m(x).permute(0, 2, 3, 1),
        lambda x: (lambda y: (y, y[:, :2]))(m(x)),
        lambda x: nn.functional.adaptive_avg_pool2d(m(x), 1).view(2, -1),
    ]
    with torch.no_grad():
        for f in cases:
            got, want = _compile(f, x)(x), f(x)
            for g, w in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
                torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)
                assert g.stride() == w.stride()


def test_graph_with_view_output_is_left_alone():
    m = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1)).eval()
    gm = _captured(lambda x: m(x).permute(0, 2, 3, 1), torch.randn(1, 3, 8, 8))
    before = str(gm.graph)
    assert not use_channels_last(gm)
    assert str(gm.graph) == before


class _TrainNet(nn.Module):
    """Strided convolution, batch norm in training mode, max pooling, a residual block, a head."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU(),
                                  nn.MaxPool2d(3, 2, 1))
        self.c1, self.b1 = nn.Conv2d(8, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8)
        self.head = nn.Linear(8, 5)

    def forward(self, x):
        y = self.stem(x)
        y = torch.relu(y + self.b1(self.c1(y)))
        return self.head(y.mean((2, 3)))


def test_training_gradients_buffers_and_strides_are_eagers():
    import copy

    torch.manual_seed(0)
    model = _TrainNet()
    ref = copy.deepcopy(model)
    compiled = _compile(model, None)
    kiln.stats.reset()
    x = torch.randn(4, 3, 32, 32)
    for _ in range(2):
        out, want = compiled(x), ref(x)
        out.square().mean().backward()
        want.square().mean().backward()
        torch.testing.assert_close(out, want, rtol=1e-4, atol=1e-4)
        for (name, p), q in zip(model.named_parameters(), ref.parameters()):
            torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-4, msg=name)
            assert p.grad.stride() == q.grad.stride(), name  # gradients in the parameters' own layout
        for b, c in zip(model.buffers(), ref.buffers()):  # running statistics
            torch.testing.assert_close(b, c)
    assert kiln.stats.joint_graphs == 1
    assert "run channels-last" in str(kiln.explain(compiled)(x))
