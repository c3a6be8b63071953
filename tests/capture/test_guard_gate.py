"""Guard gates (kiln/capture/guard_gate.py): the module-tree guards are skipped while the dicts and types
they read through are unchanged, and every change to what they read still recompiles or fails them."""
import collections

import pytest
import torch
import torch.nn as nn

import kiln
from kiln.capture.guard_gate import gate_functions, plan_gate
from kiln.capture.guards import GuardSet
from kiln.capture.sources import AttrSource, DictEntrySource, LocalSource

pytestmark = pytest.mark.skipif(gate_functions() is None, reason="kiln's C extension is older than guard gates")


@pytest.fixture(autouse=True)
def _no_grad():
    """Every call in one grad mode: a call in another mode would recompile for that reason alone."""
    with torch.no_grad():
        yield


def net():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.Conv2d(4, 4, 1)).eval()


def compiled(m):
    return kiln.compile(m, backend="eager")


def compiled_and_called_twice(m, x):
    """``m`` compiled, called twice (the second call finds the entry and records the gate's tags)."""
    cm = compiled(m)
    cm(x)
    cm(x)
    return cm


def test_the_check_function_gates_the_module_tree():
    m = net()
    x = torch.randn(2, 3, 8, 8)
    src = str(kiln.explain(m, backend="eager")(x).guards[0])
    head, gated = src.split("if not ___gate_open:", 1)
    assert "padding" not in head and "padding" in gated  # config attributes: gated
    assert "L['input']" in head and "held tensors" in head  # inputs and tensor metadata: every call
    assert "the gate opens" in gated
    assert head.index("___gate_snapshot") < head.index("L['input']")  # the tags before any guard reads


def _check_changes(mutate, recompiles=True):
    """Compile, call twice (the second call records the tags), mutate, call again: the result equals
    eager's and the entry was (or was not) recompiled."""
    m = net()
    x = torch.randn(2, 3, 8, 8)
    cm = compiled(m)
    cm(x)
    cm(x)
    before = kiln.stats.frames_compiled
    mutate(m)
    got, want = cm(x), m(x)
    torch.testing.assert_close(got, want)
    assert (kiln.stats.frames_compiled > before) == recompiles


def test_changed_config_attribute_recompiles():
    def mutate(m):
        m[0].padding = (0, 0)
    _check_changes(mutate)


def test_replaced_submodule_recompiles():
    def mutate(m):
        m[2] = nn.Tanh()
    _check_changes(mutate)


def test_a_hook_added_later_runs():
    calls = []

    def mutate(m):
        m[1].register_forward_hook(lambda mod, i, o: calls.append(1))
    _check_changes(mutate)
    assert calls


def test_train_eval_toggle_recompiles_and_comes_back():
    m = net()
    x = torch.randn(2, 3, 8, 8)
    cm = compiled(m)
    hits = kiln.stats.cache_hits
    for mode in (False, True, False, True, False):
        m.train(mode)
        torch.testing.assert_close(cm(x), m(x))
    assert kiln.stats.cache_hits > hits  # the entries made first are found again


def test_swapped_modules_dict_then_changed():
    m = net()
    x = torch.randn(2, 3, 8, 8)
    cm = compiled(m)
    cm(x)
    cm(x)
    m._modules = dict(m._modules)  # same contents, another dict: the old one is no longer what guards read
    cm(x)
    cm(x)
    m._modules["2"] = nn.Sigmoid()  # a change only the new dict sees
    torch.testing.assert_close(cm(x), m(x))


def test_class_level_descriptor_added_later():
    class Conv(nn.Conv2d):
        pass

    m = nn.Sequential(Conv(3, 4, 3, padding=1)).eval()
    x = torch.randn(1, 3, 8, 8)
    cm = compiled(m)
    cm(x)
    cm(x)
    Conv.padding = property(lambda self: (0, 0))  # a data descriptor now wins over the instance dict
    try:
        torch.testing.assert_close(cm(x), m(x))
    finally:
        del Conv.padding


def test_reassigned_class_of_a_submodule():
    class Act(nn.Module):
        def forward(self, x):
            return x.relu()

    class Act2(nn.Module):
        def forward(self, x):
            return x.sigmoid()

    m = nn.Sequential(nn.Linear(4, 4), Act())
    x = torch.randn(2, 4)
    cm = compiled(m)
    cm(x)
    cm(x)
    m[1].__class__ = Act2
    torch.testing.assert_close(cm(x), m(x))


def test_global_function_rebound():
    import tests.capture.other_module as om

    class M(nn.Module):
        def forward(self, x):
            return torch.relu(x) + 1

    mods = [nn.Linear(4, 4) for _ in range(6)]

    class Deep(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList(mods)

        def forward(self, x):
            for layer in self.layers:
                x = torch.relu(layer(x))
            return x

    m = Deep()
    x = torch.randn(2, 4)
    cm = compiled_and_called_twice(m, x)
    old = torch.relu
    try:
        torch.relu = torch.tanh  # the module global the graph read
        torch.testing.assert_close(cm(x), m(x))
    finally:
        torch.relu = old
    assert om is not None


# ---- the planner ----------------------------------------------------------------------------------

class Holder(nn.Module):
    def __init__(self):
        super().__init__()
        self.sizes = [1, 2]  # a list: mutable without any dict changing
        self.scale = 2.0

    @property
    def double(self):
        return self.scale * 2


def test_planner_gates_immutables_only():
    h = Holder()
    gs = GuardSet()
    root = LocalSource("self")
    gs.identity(root, h)
    gs.constant(AttrSource(root, "scale"), 2.0)
    gs.constant(AttrSource(root, "sizes"), [1, 2])
    gs.constant(AttrSource(root, "double"), 4.0)
    gs.identity(DictEntrySource(root, "_parameters", "nothing"), None)
    for i in range(8):
        setattr(h, f"a{i}", i)
        gs.constant(AttrSource(root, f"a{i}"), i)
    plan = plan_gate(list(gs), ({"self": h}, {}, (), {}))
    gated = {g.source.name() for g in plan.gated}
    assert "L['self'].scale" in gated and "L['self'].a3" in gated
    assert "L['self'].sizes" not in gated  # a list
    assert "L['self'].double" not in gated  # a property
    assert "L['self']" not in gated  # the root: checked every call
    assert "L['self']._parameters['nothing']" not in gated  # missing key: nothing to watch


def test_planner_needs_a_fixed_root():
    h = Holder()
    gs = GuardSet()
    root = LocalSource("self")
    gs.type(root, h)  # a type guard only: another Holder may come next time
    for i in range(8):
        setattr(h, f"a{i}", i)
        gs.constant(AttrSource(root, f"a{i}"), i)
    assert plan_gate(list(gs), ({"self": h}, {}, (), {})) is None


def test_ordered_dict_keys_are_not_gated():
    h = Holder()
    h.table = collections.OrderedDict(a=1, b=2)  # move_to_end changes the order, not the version
    gs = GuardSet()
    root = LocalSource("self")
    gs.identity(root, h)
    gs.dict_keys(AttrSource(root, "table"), h.table)
    for i in range(8):
        setattr(h, f"a{i}", i)
        gs.constant(AttrSource(root, f"a{i}"), i)
    plan = plan_gate(list(gs), ({"self": h}, {}, (), {}))
    assert "L['self'].table" not in {g.source.name() for g in plan.gated}


def test_ordered_dict_reorder_is_seen():
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.order = collections.OrderedDict(a=1.0, b=2.0)
            self.lin = nn.ModuleList(nn.Linear(4, 4) for _ in range(4))

        def forward(self, x):
            for layer in self.lin:
                x = layer(x)
            for k in self.order:
                x = x * self.order[k] if k == "a" else x + self.order[k]
            return x

    m = M()
    x = torch.randn(2, 4)
    cm = compiled_and_called_twice(m, x)
    m.order.move_to_end("a")
    torch.testing.assert_close(cm(x), m(x))


def test_gate_reopens_after_an_unrelated_class_change(monkeypatch):
    """torch.compile's first call sets attributes on nn.Module (every module class's version tag
    changes): the gate checks the reads again and opens, instead of staying shut for good."""
    import kiln.capture.guard_gate as gg

    plans = []
    real = gg.plan_gate
    monkeypatch.setattr(gg, "plan_gate", lambda *a, **k: plans.append(real(*a, **k)) or plans[-1])
    unchanged = gg.gate_functions()[0]
    m = net()
    x = torch.randn(2, 3, 8, 8)
    cm = compiled(m)
    cm(x)
    cm(x)
    assert unchanged(plans[0].state)
    nn.Module._kiln_test_marker = 1  # a class attribute no guard reads: every module type's tag changes
    try:
        assert not unchanged(plans[0].state)
        torch.testing.assert_close(cm(x), m(x))
        assert unchanged(plans[0].state)  # reopened
    finally:
        del nn.Module._kiln_test_marker


def test_a_change_while_the_gated_guards_run_is_not_recorded(monkeypatch):
    """The recorded tags are those taken before the gated guards read (gate_snapshot): a change made
    between a guard's read and the record (another thread) keeps the gate shut for the next call."""
    import kiln.capture.guard_gate as gg

    plans = []
    real = gg.plan_gate
    monkeypatch.setattr(gg, "plan_gate", lambda *a, **k: plans.append(real(*a, **k)) or plans[-1])
    unchanged, _, _, snapshot = gg.gate_functions()
    m = net()
    x = torch.randn(2, 3, 8, 8)
    cm = compiled(m)
    cm(x)
    plan = plans[0]
    reached = plan.state[8]
    snap = snapshot(plan.state)
    m[0].padding = (0, 0)  # after the snapshot: as if between a guard's read and the record
    assert plan.record(plan.state, reached, snap)
    assert not unchanged(plan.state)
    torch.testing.assert_close(cm(x), m(x))  # the full check runs, fails, recompiles
