"""Training through the joint graph: tracing, the min-cut partition, and the autograd.Function runtime."""
import copy

import pytest
import torch
import torch.fx as fx
import torch.nn as nn

import kiln
from kiln.aot.compile import aot_compile
from kiln.aot.joint import needs_joint_graph, trace_joint
from kiln.aot.partition import explain_rules, partition, recompute_rule
from kiln.aot.training import TrainingRuntime
from kiln.backends.aot_eager import compile_aot_eager
from kiln.decomp import decomposition_table

aten = torch.ops.aten


def _targets(gm):
    return [n.target for n in gm.graph.nodes if n.op == "call_function"]


def _joint(fn, *inputs):
    return trace_joint(fx.symbolic_trace(fn), list(inputs), decomposition_table())


def _grads_match(fn, *inputs, module=None, atol=1e-5, rtol=1e-5, loss=lambda out: out.sum()):
    """Compile through the training path; compare outputs and the grads of inputs and parameters."""
    eager_mod = module
    kiln_mod = copy.deepcopy(module) if module is not None else None
    eager_in = [x.detach().clone().requires_grad_(x.requires_grad) for x in inputs]
    kiln_in = [x.detach().clone().requires_grad_(x.requires_grad) for x in inputs]
    compiled = compile_aot_eager(fx.symbolic_trace(kiln_mod or fn), kiln_in, fallback=False)
    assert isinstance(compiled, TrainingRuntime)
    torch.manual_seed(0)
    expected = (eager_mod or fn)(*eager_in)
    torch.manual_seed(0)
    got = compiled(*kiln_in)
    torch.testing.assert_close(got, expected, atol=atol, rtol=rtol)
    loss(expected).backward()
    loss(got).backward()
    for a, b in zip(kiln_in, eager_in):
        torch.testing.assert_close(a.grad, b.grad, atol=atol, rtol=rtol)
    if module is not None:
        for (name, p), q in zip(eager_mod.named_parameters(), kiln_mod.parameters()):
            torch.testing.assert_close(q.grad, p.grad, atol=atol, rtol=rtol, msg=name)
        torch.testing.assert_close(kiln_mod.state_dict(), eager_mod.state_dict(), atol=atol, rtol=rtol)
    return compiled


# joint tracing -------------------------------------------------------------------------------------
def test_joint_graph_has_tangents_and_grads():
    x = torch.randn(4, requires_grad=True)
    joint = _joint(lambda x: x.sin().cos(), x)
    placeholders = [n for n in joint.gm.graph.nodes if n.op == "placeholder"]
    assert [p.name for p in placeholders] == ["x", "tangent_0"]
    assert joint.differentiable == [True] and joint.grad_inputs == [0]
    assert aten.detach.default not in _targets(joint.gm)
    out = joint.gm(torch.ones(4), torch.ones(4))
    torch.testing.assert_close(out[1], -torch.sin(torch.sin(torch.ones(4))) * torch.cos(torch.ones(4)))


def test_training_needs_grad_mode_and_requires_grad():
    gm = fx.symbolic_trace(lambda x: x * 2)
    assert needs_joint_graph(gm, [torch.randn(2, requires_grad=True)])
    assert not needs_joint_graph(gm, [torch.randn(2)])
    with torch.no_grad():
        assert not needs_joint_graph(gm, [torch.randn(2, requires_grad=True)])
        compiled = compile_aot_eager(gm, [torch.randn(2, requires_grad=True)], fallback=False)
    assert not isinstance(compiled, TrainingRuntime)  # inference path


def test_eager_saved_estimate():
    x = torch.randn(8, requires_grad=True)
    joint = _joint(lambda x: x.sin().cos(), x)
    # cos saves sin(x) (an activation), sin saves x (an input)
    assert joint.eager_saved.activation_bytes == 32 and joint.eager_saved.input_bytes == 32


# partition ------------------------------------------------------------------------------------------
def test_pointwise_chain_saves_only_the_input_and_recomputes():
    x = torch.randn(16, requires_grad=True)
    part = partition(_joint(lambda x: x.sin().cos(), x))
    assert part.saved == ["x"]
    assert part.recomputed == ["sin_default"]
    assert part.saved_activation_bytes == 0


def test_matmul_output_is_saved_not_recomputed():
    x, w = torch.randn(4, 8, requires_grad=True), torch.randn(8, 8, requires_grad=True)
    part = partition(_joint(lambda x, w: torch.mm(x, w).tanh().sum(), x, w))
    assert part.saved_activation_bytes == 4 * 8 * 4  # one [4, 8] activation, not x and w to redo the mm
    assert _targets(part.fwd).count(aten.mm.default) == 1
    assert _targets(part.bwd).count(aten.mm.default) == 2  # the two gradient matmuls only


def test_reductions_are_saved():
    x = torch.randn(4, 8, requires_grad=True)
    part = partition(_joint(lambda x: torch.softmax(x, -1) * 3, x))
    assert aten.amax.default in _targets(part.fwd)
    assert aten.amax.default not in _targets(part.bwd)  # the forward's reduction is not run again


def test_rules_are_printable_and_pure():
    text = explain_rules()
    assert "random" in text and "pointwise" in text
    g = fx.Graph()
    x = g.placeholder("x")
    n = g.call_function(aten.bernoulli.p, (x, 0.5))
    assert recompute_rule(n) == (False, "random")
    m = g.call_function(aten.mm.default, (x, x))
    assert recompute_rule(m) == (False, "matmul")
    s = g.call_function(aten.sin.default, (x,))
    assert recompute_rule(s) == (True, "pointwise")


# runtime --------------------------------------------------------------------------------------------
def test_inputs_with_and_without_grad():
    def f(x, y, w):
        return (x @ w + y).relu()

    _grads_match(f, torch.randn(3, 4, requires_grad=True), torch.randn(3, 5), torch.randn(4, 5, requires_grad=True))


def test_non_differentiable_outputs():
    def f(x):
        y = x * 2
        return y, y > 0, y.argmax(), x.shape[0]

    x = torch.randn(5, requires_grad=True)
    compiled = compile_aot_eager(fx.symbolic_trace(f), [x], fallback=False)
    y, mask, idx, n = compiled(x)
    assert y.requires_grad and not mask.requires_grad and not idx.requires_grad and n == 5
    assert mask.dtype == torch.bool and idx.dtype == torch.int64
    y.sum().backward()
    torch.testing.assert_close(x.grad, torch.full((5,), 2.0))


def test_output_computed_under_no_grad_does_not_require_grad():
    def f(x):
        y = x * 2
        with torch.no_grad():
            z = y + 1
        return y, z

    kiln.reset()
    x = torch.randn(3, requires_grad=True)
    y, z = kiln.compile(f, backend="aot_eager")(x)
    assert y.requires_grad and not z.requires_grad
    assert torch.is_grad_enabled()


def test_retain_graph_and_output_used_twice():
    def f(x):
        y = x.exp()
        return y, y

    x = torch.randn(4, requires_grad=True)
    compiled = compile_aot_eager(fx.symbolic_trace(f), [x], fallback=False)
    a, b = compiled(x)
    assert a is b
    (a * b).sum().backward(retain_graph=True)
    first = x.grad.clone()
    (a * b).sum().backward()
    torch.testing.assert_close(x.grad, 2 * first)
    torch.testing.assert_close(first, 2 * x.exp() ** 2)


def test_outputs_that_view_inputs():
    def f(x, w):
        return x.t(), w[0], x * w

    x, w = torch.randn(3, 3, requires_grad=True), torch.randn(3, 3, requires_grad=True)
    compiled = _grads_match(f, x, w, loss=lambda out: (out[0] * 2).sum() + out[1].sum() + out[2].sum())
    a, b, _ = compiled(x, w)
    assert a._base is x and b._base is w


def test_dropout_gradients_equal_eager_under_the_same_seed():
    model = nn.Sequential(nn.Linear(8, 32), nn.Dropout(0.5), nn.Linear(32, 4), nn.Dropout(0.3)).train()
    compiled = _grads_match(None, torch.randn(16, 8, requires_grad=True), module=model)
    part = compiled.plan.partition
    randoms = [t for t in _targets(part.fwd) if torch.Tag.nondeterministic_seeded in getattr(t, "tags", ())]
    assert randoms and not any(torch.Tag.nondeterministic_seeded in getattr(t, "tags", ()) for t in _targets(part.bwd))


def test_batchnorm_running_stats_written_back():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU()).train()
    compiled = _grads_match(None, torch.randn(2, 3, 6, 6), module=model, atol=1e-4, rtol=1e-4)  # compares state
    assert len(compiled.plan.joint.mutated_inputs) == 3
    assert model[1].num_batches_tracked.item() == 1


def test_mutated_input_that_requires_grad_falls_back_to_autograd_over_aten():
    def f(x):
        y = x * 1
        y.add_(1)
        x.mul_(2)
        return y

    kiln.stats.reset()
    base = torch.randn(3, requires_grad=True)
    x = base * 1  # a non-leaf, so eager may mutate it
    compiled = compile_aot_eager(fx.symbolic_trace(f), [x], fallback=False)
    assert not isinstance(compiled, TrainingRuntime)
    assert any("joint graph" in k for k in kiln.stats.eager_fallbacks)
    xb = base * 1
    compiled(xb).sum().backward()
    torch.testing.assert_close(base.grad, torch.ones(3))  # y was taken before x.mul_


def test_graph_breaks_make_one_function_per_region():
    def f(x, w):
        y = (x @ w).tanh()
        kiln.graph_break()
        return (y * w).sum()

    kiln.reset()
    kiln.stats.reset()
    x, w = torch.randn(3, 3), torch.randn(3, 3, requires_grad=True)
    w2 = w.detach().clone().requires_grad_()
    kiln.compile(f, backend="aot_eager")(x, w).backward()
    f(x, w2).backward()
    torch.testing.assert_close(w.grad, w2.grad)
    assert kiln.stats.joint_graphs == 2


def test_backend_neutral_compilers_get_both_graphs():
    seen = []

    def compiler(gm, example_inputs):
        seen.append((gm.__class__.__name__, len(example_inputs)))
        return gm

    x = torch.randn(4, requires_grad=True)
    gm = fx.symbolic_trace(lambda x: (x * x).sum())
    runtime = aot_compile(gm, [x], compiler, compiler, decompositions=decomposition_table())
    runtime(x).backward()
    torch.testing.assert_close(x.grad, 2 * x)
    assert [name for name, _ in seen] == ["ForwardGraphModule", "BackwardGraphModule"]


def test_explain_shows_forward_backward_saved_and_memory():
    model = nn.Sequential(nn.Linear(4, 8), nn.GELU(), nn.Linear(8, 2))
    compiled = compile_aot_eager(fx.symbolic_trace(model), [torch.randn(3, 4)], fallback=False)
    text = compiled.kiln_explain()
    for words in ("forward graph", "backward graph", "saved for backward", "recomputed in backward", "eager autograd saves"):
        assert words in text, words
    part, eager = compiled.plan.partition, compiled.plan.joint.eager_saved
    assert part.saved_activation_bytes <= eager.activation_bytes


def test_double_backward_differentiates_the_gradient_again():
    # (it was refused: the generated backward's gradient had no history; tests/aot/test_double_backward.py)
    x = torch.randn(3, requires_grad=True)
    compiled = compile_aot_eager(fx.symbolic_trace(lambda x: (x ** 3).sum()), [x], fallback=False)
    (g,) = torch.autograd.grad(compiled(x), x, create_graph=True)
    torch.testing.assert_close(g, 3 * x.detach() ** 2)
    g.sum().backward()
    torch.testing.assert_close(x.grad, 6 * x.detach())


class _Scale(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("buf", torch.tensor([1.0, 2.0, 3.0]))

    def forward(self, x):
        y = x * (self.buf * 2)  # eager saves buf * 2; kiln would rather save buf and recompute
        self.buf.add_(10)  # written back after the forward; the backward needs the old value
        return y


def test_saved_value_of_a_mutated_buffer_is_the_old_value():
    runtimes = []

    def backend(gm, example_inputs):  # (fx.symbolic_trace would run the add_ for real: capture instead)
        runtimes.append(compile_aot_eager(gm, example_inputs, fallback=False))
        return runtimes[-1]

    kiln.reset()
    eager, mine = _Scale(), _Scale()
    x = torch.randn(3, requires_grad=True)
    x2 = x.detach().clone().requires_grad_()
    kiln.compile(mine, backend=backend)(x2).sum().backward()
    eager(x).sum().backward()
    torch.testing.assert_close(x2.grad, x.grad)  # the old buf, not the written-back one
    torch.testing.assert_close(mine.buf, eager.buf)
    assert runtimes[0].plan.joint.mutated_inputs
    clones = [n for n in runtimes[0].plan.partition.fwd.graph.nodes if n.target is aten.clone.default]
    assert clones  # the saved buffer value is a copy


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA GPU"))])
def test_batch_norm_running_stats_are_stored_in_place_in_training(device, monkeypatch):
    # the training forward's kernels write BatchNorm's new running statistics (and the step counter)
    # straight into the module's buffers, as inference graphs do: no copy kernel per buffer and step.
    # (TF32 off: kiln's convolutions run channels-last on CUDA, where cuDNN's TF32 algorithms round
    # otherwise than eager's, 2e-4 apart in the second layer's running mean; exact without TF32)
    import copy

    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", False)

    import kiln
    from kiln.debug.stats import stats

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                                torch.nn.Conv2d(8, 8, 3), torch.nn.BatchNorm2d(8)).to(device)
    eager = copy.deepcopy(model)
    compiled = kiln.compile(model)
    before = stats.inplace_stores
    versions = [(b._version, c._version) for b, c in zip(model.buffers(), eager.buffers())]
    import kiln.aot.training as training

    copied = []  # per forward: how many new values came back in their own memory (copied into the buffer)
    real_write_back = training.write_back

    def write_back(target, new, *args, **kwargs):
        copied[-1] += new.data_ptr() != target.data_ptr()
        return real_write_back(target, new, *args, **kwargs)

    for _ in range(3):
        x = torch.randn(4, 3, 12, 12, device=device)
        copied.append(0)
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(training, "write_back", write_back)
            compiled(x).square().sum().backward()
        eager(x).square().sum().backward()
    assert stats.inplace_stores - before == 6  # running mean, running var, num_batches_tracked, twice
    # stored in place from the first call (C++) or the second (GPU: the first builds the kernels)
    assert copied[1:] == [0, 0] and copied[0] == (6 if device == "cuda" else 0), copied
    for (name, got), (_, want), (v_got, v_want) in zip(model.named_buffers(), eager.named_buffers(), versions):
        torch.testing.assert_close(got, want, msg=name)
        # (counted from the start: deepcopy of a CUDA module leaves its copy's buffers at version 1)
        assert got._version - v_got == want._version - v_want, name
    for (name, got), (_, want) in zip(model.named_parameters(), eager.named_parameters()):
        torch.testing.assert_close(got.grad, want.grad, rtol=1e-3, atol=2e-3, msg=name)


def test_gpu_training_forward_stores_in_place_from_its_second_call():
    # the wrapper generated for the GPU computes its first call functionally (its kernels are built then)
    # and stores mutated inputs in place afterwards; the runtime then calls the wrapper directly
    from kiln.backends.kiln import InplaceAfterFirstForward, gpu_training_runtime
    from kiln.codegen.wrapper_runtime import INPLACE_FLAG
    from kiln.options import default_options

    namespace = {INPLACE_FLAG: False}
    exec("def call(x):\n    return x + 1 if _INPLACE else x - 1", namespace)
    runtime = TrainingRuntime.__new__(TrainingRuntime)
    runtime.fwd, runtime.bwd, runtime.state, runtime.n_mut, runtime.n_out = namespace["call"], None, [], 0, 1
    runtime.joint_gm, runtime.warm_race_ops, runtime.backward_without = None, None, None
    runtime.n_inputs, runtime.mutated = 1, []
    gm = torch.fx.symbolic_trace(lambda x: x + 1)
    gpu_training_runtime(runtime, gm, default_options(), "cpp")  # C++: in place from the start
    assert runtime.fwd is namespace["call"]
    # (CUDA-graph replay of the step, backends/step_graphs.py, off: tests/codegen/triton/test_cuda_step_graphs.py)
    no_replay = default_options().replace(default_cudagraphs=False)
    gpu_training_runtime(runtime, gm, no_replay.replace(cudagraphs=True), "triton")
    # (recorded graphs replay the first call's buffers; on a GPU the forward is replayed from its second call)
    assert getattr(runtime.fwd, "plain", runtime.fwd) is namespace["call"]
    runtime.fwd = namespace["call"]
    gpu_training_runtime(runtime, gm, no_replay, "triton")
    assert isinstance(runtime.fwd, InplaceAfterFirstForward)
    assert runtime.fwd(1) == 0  # the first call: functional
    assert runtime.fwd is namespace["call"] and runtime.fwd(1) == 2


def test_in_place_op_on_a_view_output():
    """A Linear on a 3-D input returns its [B*T, N] product viewed as [B, T, N]: eager allows an in-place
    op on it, and so must the compiled output (a custom Function's view outputs may not be changed in
    place); a change of a value the backward needs is still caught, as in eager."""
    torch.manual_seed(0)
    lin, x = nn.Linear(6, 6), torch.randn(2, 3, 6)
    expected = lin(x)
    expected *= 0.5
    expected.sum().backward()
    want = lin.weight.grad.clone()
    lin.weight.grad = None
    kiln.reset()
    got = kiln.compile(lin, backend="aot_eager")(x)
    got *= 0.5
    got.sum().backward()
    torch.testing.assert_close(got, expected)
    torch.testing.assert_close(lin.weight.grad, want)

    def f(x, w):
        h = x @ w
        return h.view(2, -1), (h * h).sum()  # the product is returned and saved for the backward

    for fn in (f, kiln.compile(f, backend="aot_eager")):
        out, loss = fn(torch.randn(4, 3, requires_grad=True), torch.randn(3, 5, requires_grad=True))
        out.mul_(2)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            loss.backward()


def test_non_reentrant_checkpoint_inside_a_compiled_model():
    """torch.utils.checkpoint(use_reentrant=False) recomputes its function eagerly in the backward and
    requires it to save what the forward saved: kiln runs that forward eagerly (counted in
    stats.eager_fallbacks); the rest of the model is compiled."""
    from torch.utils.checkpoint import checkpoint

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = nn.ModuleList([nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 8)) for _ in range(2)])
            self.head = nn.Linear(8, 3)

        def forward(self, x):
            for b in self.blocks:
                x = x + checkpoint(b, x, use_reentrant=False)
            return self.head(x)

    torch.manual_seed(0)
    net, x = Net(), torch.randn(5, 8)
    net(x).pow(2).mean().backward()
    want = [p.grad.clone() for p in net.parameters()]
    kiln.reset()
    compiled = kiln.compile(net, backend="aot_eager")
    for _ in range(2):
        net.zero_grad()
        compiled(x).pow(2).mean().backward()
        for p, g in zip(net.parameters(), want):
            torch.testing.assert_close(p.grad, g)
    assert any("checkpoint" in reason for reason in kiln.stats.eager_fallbacks)
