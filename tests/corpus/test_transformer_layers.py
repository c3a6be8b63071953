"""torch.nn's transformer layers in eval mode without grad: their fast-path checks (transformer.py,
activation.py) trace, so the fused op eager calls (_transformer_encoder_layer_fwd,
_native_multi_head_attention) lands in one graph with no break; and what those checks read is guarded
(the fast-path flag, hooks on every submodule, the dispatch-mode stack). Capture only: graphs run as
they are (CountingBackend); tests/models/test_nn_transformer.py runs them through kiln's backend."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from tests.breaks.support import check_breaks
from tests.corpus.harness import USE_DYNAMO, assert_same, check

pytestmark = pytest.mark.skipif(USE_DYNAMO, reason="kiln's capture of the fast path (dynamo takes other branches)")

B, T, E, H, FF = 2, 8, 32, 4, 64


def _x(seed=0):
    return torch.randn(B, T, E, generator=torch.Generator().manual_seed(seed))


def _padding(left_aligned: bool):
    mask = torch.zeros(B, T, dtype=torch.bool)
    if left_aligned:  # padding only at the end of each sequence
        mask[0, 6:] = True
        mask[1, 5:] = True
    else:
        mask[0, [1, 4]] = True
        mask[1, 2] = True
    return mask


def _layer(activation="relu", norm_first=False):
    torch.manual_seed(0)
    return nn.TransformerEncoderLayer(E, H, FF, batch_first=True, dropout=0.0, activation=activation,
                                      norm_first=norm_first).eval()


def _targets(counter) -> set:
    return {n.target for gm in counter.graphs for n in gm.graph.nodes if n.op == "call_function"}


MASKS = {
    "no_mask": {},
    "key_padding": {"src_key_padding_mask": _padding(False)},
    "src_mask": {"src_mask": torch.rand(T, T, generator=torch.Generator().manual_seed(3)) < 0.3},
    "both_masks": {"src_mask": torch.triu(torch.ones(T, T, dtype=torch.bool), 1),
                   "src_key_padding_mask": _padding(True)},
}


@pytest.mark.parametrize("masks", list(MASKS))
@pytest.mark.parametrize("norm_first", [False, True], ids=["post_norm", "norm_first"])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_encoder_layer_fast_path_is_one_graph(activation, norm_first, masks):
    with torch.no_grad():
        counter = check_breaks(_layer(activation, norm_first), _x(), kwargs=MASKS[masks], graphs=1, breaks=0)
    assert torch._transformer_encoder_layer_fwd in _targets(counter)  # the branch eager takes


def test_encoder_layer_with_grad_takes_the_module_path():
    counter = check_breaks(_layer(), _x(), graphs=1, breaks=0)
    assert torch._transformer_encoder_layer_fwd not in _targets(counter)


@pytest.mark.parametrize("nested", [True, False], ids=["nested_allowed", "nested_off"])
def test_encoder_of_two_layers_is_one_graph(nested):
    torch.manual_seed(0)
    encoder = nn.TransformerEncoder(_layer("gelu"), 2, enable_nested_tensor=nested).eval()
    kwargs = {} if nested else {"src_key_padding_mask": _padding(True)}
    with torch.no_grad():
        counter = check_breaks(encoder, _x(), kwargs=kwargs, graphs=1, breaks=0)
    assert torch._transformer_encoder_layer_fwd in _targets(counter)


@pytest.mark.parametrize("left_aligned", [True, False])
def test_encoder_key_padding_checks_the_mask_as_eager(left_aligned):
    """Eager checks (on the data) whether the padding is at the end of each sequence; if so it runs the
    layers on nested tensors and zero-fills padded positions. kiln follows eager's branch, not
    is_compiling()'s (which skips the check and the zeros): the data-dependent check breaks the graph."""
    torch.manual_seed(0)
    encoder = nn.TransformerEncoder(_layer(), 2).eval()
    mask = _padding(left_aligned)
    with torch.no_grad():
        if left_aligned:
            assert (encoder(_x(), src_key_padding_mask=mask)[mask] == 0).all()  # the case really zero-fills
        check_breaks(encoder, _x(), kwargs={"src_key_padding_mask": mask}, graphs=(2, 3, 4), breaks=(1, 2, 3, 4))


@pytest.mark.parametrize("kwargs", [{}, {"need_weights": False}, {"average_attn_weights": False},
                                    {"key_padding_mask": _padding(False)}], ids=["weights", "no_weights",
                                                                                 "per_head", "key_padding"])
def test_multi_head_attention_fast_path_is_one_graph(kwargs):
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(E, H, batch_first=True).eval()

    def self_attention(m, x):
        return m(x, x, x, **kwargs)

    with torch.no_grad():
        counter = check_breaks(self_attention, mha, _x(), graphs=1, breaks=0)
    assert torch._native_multi_head_attention in _targets(counter)


def test_fast_path_flag_is_guarded():
    layer, x = _layer(), _x()
    with torch.no_grad():
        counter = check_breaks(layer, x, graphs=1, breaks=0)
        try:
            torch.backends.mha.set_fastpath_enabled(False)
            counter_off = check_breaks(layer, x, graphs=1, breaks=0)
        finally:
            torch.backends.mha.set_fastpath_enabled(True)
    assert torch._transformer_encoder_layer_fwd in _targets(counter)
    assert torch._transformer_encoder_layer_fwd not in _targets(counter_off)


def test_hook_added_to_a_submodule_recompiles_and_runs():
    """The fast-path check reads the hooks of every submodule (self.modules()): a hook added later
    fails a guard; eager then takes the module path, which calls the hook."""
    import kiln

    layer, x = _layer(), _x()
    calls = []
    with torch.no_grad():
        compiled = kiln.compile(layer, backend=lambda gm, inputs: gm.forward)
        first = compiled(x)
        handle = layer.linear1.register_forward_hook(lambda *args: calls.append(1))
        try:
            torch.testing.assert_close(compiled(x), layer(x))
        finally:
            handle.remove()
        torch.testing.assert_close(compiled(x), first)
    assert calls == [1, 1]  # the compiled call and the eager one


def test_dispatch_mode_stack_is_guarded():
    """MultiheadAttention asks for the dispatch-mode stack (is make_fx tracing?): empty while tracing,
    guarded so; under a mode the guard fails and the frame runs as Python."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Counting(TorchDispatchMode):
        ops = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            Counting.ops += 1
            return func(*args, **(kwargs or {}))

    import kiln

    torch.manual_seed(0)
    mha = nn.MultiheadAttention(E, H, batch_first=True).eval()
    x = _x()
    kiln.reset()
    kiln.stats.reset()
    with torch.no_grad():
        compiled = kiln.compile(mha, backend=lambda gm, inputs: gm.forward)
        want = mha(x, x, x)
        compiled(x, x, x)
        with Counting():
            got = compiled(x, x, x)
    assert Counting.ops > 0
    torch.testing.assert_close(got, want)
    assert sum(kiln.stats.recompilations.values()) == 1, kiln.stats.recompilations  # the mode failed a guard


# ---- the capture rules the fast-path checks need, on user code ----------------------------------


class Tree(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.inner = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
        self.again = self.a  # one module under two names: yielded once
        self.empty = None

    def forward(self, x):
        for name, m in self.named_modules():
            if isinstance(m, nn.Linear):
                x = m(x) + len(name)
        for m in self.children():
            x = x * 2 if isinstance(m, nn.Sequential) else x
        names = [n for n, _ in self.named_children()]
        return x, len(list(self.modules())), names


def test_module_tree_iterators_trace():
    check(Tree(), torch.randn(2, 4), graphs=1)


def test_any_over_module_hooks_traces():
    def fn(m, x):
        if any(len(getattr(sub, "_forward_hooks", {})) for sub in m.modules()):
            return x - 1
        return x + 1

    check(fn, Tree(), torch.randn(2, 4), graphs=1)


def test_submodule_added_later_recompiles():
    import kiln

    tree = Tree()
    compiled = kiln.compile(tree, backend=lambda gm, inputs: gm.forward)
    x = torch.randn(2, 4)
    compiled(x)
    tree.extra = nn.Linear(4, 4)
    assert_same(compiled(x), tree(x))  # named_modules() now yields it


def test_has_torch_function_of_plain_tensors_is_false():
    def fn(x, w):
        if torch.overrides.has_torch_function((x, w, None)) or torch.overrides.has_torch_function_unary(x):
            return x - 1
        return x + w

    check(fn, torch.randn(3), nn.Parameter(torch.randn(3)), graphs=1)


def test_dtype_answers_of_torch_functions_are_constants():
    def fn(x, mask):
        return x.to(F._none_or_dtype(mask)) * 2

    check(fn, torch.randn(3, dtype=torch.float64), torch.zeros(3, dtype=torch.float32), graphs=1)
