"""torch.nn modules built inside the traced code (values/module_construction.py): built while tracing
from their arguments, one graph, no recompile per new object; what they cannot be built from breaks."""
import pytest
import torch
from torch import nn

import kiln
from kiln.capture.values.base import Unsupported
from kiln.capture.values.module_construction import _StandIn, _StandInUsed


def setup_function():
    kiln.reset()
    kiln.stats.reset()


def test_a_loss_built_from_a_tensor_argument_every_call_is_one_graph():
    def f(x, t, w):
        return nn.CrossEntropyLoss(weight=w, label_smoothing=0.1)(x, t) * 2

    compiled = kiln.compile(f)
    for _ in range(4):  # new weights each call: an input of the graph, not a constant of it
        x, t, w = torch.randn(6, 5), torch.randint(0, 5, (6,)), torch.rand(5)
        torch.testing.assert_close(compiled(x, t, w), f(x, t, w))
    assert kiln.stats.graphs == 1 and not kiln.stats.graph_breaks and not kiln.stats.recompilations


def test_the_built_module_reads_the_argument_as_it_is_when_called():
    def f(x, t, w):
        loss = nn.CrossEntropyLoss(weight=w)  # holds w itself: a later in-place change is seen
        w.mul_(2)
        return loss(x, t)

    x, t, w = torch.randn(6, 5), torch.randint(0, 5, (6,)), torch.rand(5)
    w1, w2 = w.clone(), w.clone()
    torch.testing.assert_close(kiln.compile(f)(x, t, w1), f(x, t, w2))
    torch.testing.assert_close(w1, w2)


def test_a_built_module_that_outlives_the_graph_is_built_again_from_the_same_arguments():
    def f(x, t, w):
        loss = nn.NLLLoss(weight=w, ignore_index=1)
        return loss(x.log_softmax(-1), t), loss

    x, t, w = torch.randn(6, 5), torch.randint(0, 5, (6,)), torch.rand(5)
    got, module = kiln.compile(f)(x, t, w)
    torch.testing.assert_close(got, f(x, t, w)[0])
    assert type(module) is nn.NLLLoss and module.weight is w and module.ignore_index == 1
    assert kiln.stats.graphs == 1 and not kiln.stats.graph_breaks


def test_a_module_built_with_sizes_read_from_the_input():
    def f(x):
        return nn.Unflatten(1, (2, x.shape[1] // 2))(x).sum(-1)

    compiled = kiln.compile(f)
    x = torch.randn(3, 8)
    torch.testing.assert_close(compiled(x), f(x))
    assert kiln.stats.graphs == 1 and not kiln.stats.graph_breaks


def test_modules_with_weights_or_a_constructor_that_reads_a_tensor_break_and_run_as_eager():
    def f(x):
        return nn.Linear(3, 2)(x)  # draws its weights at random: built by Python, as eager does

    torch.manual_seed(0)
    got, after = kiln.compile(f)(torch.ones(1, 3)), torch.rand(1)
    torch.manual_seed(0)
    want, after_eager = f(torch.ones(1, 3)), torch.rand(1)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(after, after_eager)  # the random stream is where eager leaves it
    assert any("nn.Linear" in reason and "parameters" in reason for reason in kiln.stats.graph_breaks)


def test_a_stand_in_refuses_any_use_but_being_stored():
    stand_in = torch.Tensor._make_subclass(_StandIn, torch.empty(0, device="meta"))
    holder = {"kept": stand_in}
    assert holder["kept"] is stand_in
    with pytest.raises(_StandInUsed):
        stand_in.shape
    with pytest.raises(_StandInUsed):
        stand_in + 1


def test_a_torch_module_class_whose_init_reads_a_tensor_argument_is_refused():
    from kiln.capture.values.base import ConstantValue
    from kiln.capture.values.module_construction import construct_torch_module

    class Reads(nn.Module):
        __module__ = "torch.nn.modules.kiln_test"

        def __init__(self, w):
            super().__init__()
            self.n = w.shape[0]

    from kiln.capture.values.tensors import TensorValue

    value = object.__new__(TensorValue)  # (only its type is looked at before __init__ runs)
    with pytest.raises(Unsupported, match="uses a tensor argument"):
        construct_torch_module(None, Reads, [value], {})
    with pytest.raises(Unsupported, match="raised TypeError"):
        construct_torch_module(None, nn.CrossEntropyLoss, [], {"no_such": ConstantValue(1)})


def test_super_call_from_a_class_call_runs_the_module_call():
    """transformers' GradientCheckpointingLayer defines ``__call__`` and calls ``super().__call__``
    (nn.Module's): traced as the module call it is (hooks, then forward), not a graph break per layer."""
    counted = []

    class Checkpointing(nn.Module):
        def __call__(self, *args, **kwargs):
            counted.append(1)
            return super().__call__(*args, **kwargs) * 2

    class Layer(Checkpointing):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 4)

        def forward(self, x, scale=1.0):
            return self.lin(x) * scale

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList([Layer() for _ in range(3)])

        def forward(self, x):
            for layer in self.layers:
                x = layer(x, scale=0.5)
            return x

    model, x = Model(), torch.randn(2, 4)
    model.layers[1].register_forward_hook(lambda mod, args, out: out + 1)
    compiled = kiln.compile(model)
    torch.testing.assert_close(compiled(x), model(x))
    assert len(counted) == 6 and kiln.stats.graphs == 1 and not kiln.stats.graph_breaks


def test_a_wrong_argument_caught_by_torchs_meta_kernel_runs_as_eager_and_raises_its_error():
    def f(x, t, w):
        return nn.CrossEntropyLoss(weight=w)(x, t)  # 3 weights for 5 classes: torch's meta kernel asserts

    with pytest.raises(RuntimeError, match="weight tensor should be defined"):
        kiln.compile(f)(torch.randn(4, 5), torch.randint(0, 5, (4,)), torch.rand(3))
    assert not any("internal error" in reason for reason in kiln.stats.eager_fallbacks)
