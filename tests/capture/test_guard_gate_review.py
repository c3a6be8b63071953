"""Adversarial review of guard gates (guard_gate.py): programs that change what a gated guard reads
in ways other than the obvious `setattr`; each compiled result must equal eager's after the change."""
import collections
import functools

import pytest
import torch
import torch.nn as nn

import kiln
from kiln.capture.guard_gate import gate_functions

pytestmark = pytest.mark.skipif(gate_functions() is None, reason="kiln's C extension is older than guard gates")


@pytest.fixture(autouse=True)
def _no_grad():
    """One grad mode throughout; the global RNG as it was after each test (the models are seeded)."""
    with torch.no_grad(), torch.random.fork_rng():
        yield


def body():
    """Enough submodules that the planner gates (at least 8 guards)."""
    with torch.random.fork_rng():  # (also called at import: the global RNG stays as it was)
        torch.manual_seed(0)
        return nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.Conv2d(4, 4, 1)).eval()


X = torch.randn(2, 3, 8, 8, generator=torch.Generator().manual_seed(0))


def after(m, mutate, x=X, backend="eager", gated=True):
    """Compile, call twice (the second call records the gate's tags), mutate, and compare with eager
    twice (the second call: after whatever the first one recorded)."""
    cm = kiln.compile(m, backend=backend)
    cm(x)
    cm(x)
    if gated:
        src = str(kiln.explain(m, backend=backend)(x).guards[0])
        assert "___gate_unchanged" in src
    mutate()
    torch.testing.assert_close(cm(x), m(x))
    torch.testing.assert_close(cm(x), m(x))


class Wrap(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = body()
        self.scale = 2.0

    def forward(self, x):
        return self.body(x) * self.scale


# ---- a class attribute's type decides how the instance attribute is read --------------------------

class Marker:
    pass


class Shadowed(Wrap):
    scale = Marker()  # a plain class attribute: the instance's 2.0 wins


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_class_attribute_type_becomes_a_data_descriptor(backend):
    """`Marker.__get__`/`__set__` set later: Shadowed's tag does not change (only Marker's), and
    `m.scale` now calls Marker.__get__."""
    class Mk:
        pass

    class S(Wrap):
        scale = Mk()

    m = S()

    def mutate():
        Mk.__get__ = lambda self, obj, cls=None: 5.0
        Mk.__set__ = lambda self, obj, value: None
    after(m, mutate, backend=backend)


# ---- the instance dict, the class, the type --------------------------------------------------------

def test_instance_dict_replaced():
    m = body()

    def mutate():
        m[0].__dict__ = dict(m[0].__dict__, padding=(0, 0))
    after(m, mutate, x=torch.randn(2, 3, 10, 10))


def test_instance_dict_written_through_object_setattr_and_vars():
    m = Wrap()

    def mutate():
        object.__setattr__(m, "scale", 3.0)
        vars(m.body[0])["stride"] = (2, 2)
    after(m, mutate)


def test_class_of_a_submodule_swapped_for_one_with_a_property():
    class Padless(nn.Conv2d):
        @property
        def padding(self):
            return (0, 0)

        @padding.setter
        def padding(self, v):
            pass

    m = body()

    def mutate():
        m[0].__class__ = Padless
    after(m, mutate)


def test_property_added_on_a_base_class():
    class A(nn.Conv2d):
        pass

    class B(A):
        pass

    m = nn.Sequential(B(3, 4, 3, padding=1), nn.ReLU(), B(4, 4, 3, padding=1), nn.ReLU()).eval()

    def mutate():
        A.padding = property(lambda self: (0, 0))
    try:
        after(m, mutate)
    finally:
        del A.padding


def test_bases_reassigned():
    class P1(nn.Module):
        k = 2.0

    class P2(nn.Module):
        k = 3.0

    class S(P1):
        def __init__(self):
            super().__init__()
            self.body = body()

        def forward(self, x):
            return self.body(x) * self.k

    m = S()

    def mutate():
        S.__bases__ = (P2,)
    after(m, mutate)


def test_class_attribute_on_instance_class_changed():
    class S(Wrap):
        k = 2.0

        def forward(self, x):
            return self.body(x) * self.k

    m = S()

    def mutate():
        S.k = 3.0
    after(m, mutate)


def test_inherited_method_replaced_on_a_base():
    class Act(nn.Module):
        def forward(self, x):
            return x.relu()

    class Act2(Act):
        pass

    m = nn.Sequential(nn.Conv2d(3, 4, 1), Act2(), nn.Conv2d(4, 4, 1), Act2()).eval()

    def mutate():
        Act.forward = lambda self, x: x.sigmoid()
    after(m, mutate)


def test_metaclass_attribute_changed():
    class Meta(type):
        pass

    class Cfg(metaclass=Meta):
        k = 2.0

    class S(Wrap):
        def forward(self, x):
            return self.body(x) * Cfg.k

    m = S()

    def mutate():
        Cfg.k = 3.0
    after(m, mutate)


# ---- values that hold mutable objects ---------------------------------------------------------------

def holding(cfg, read):
    """Wrap with ``self.cfg = cfg``, returning ``body(x) * read(self.cfg)``."""
    class S(Wrap):
        def __init__(self):
            super().__init__()
            self.cfg = cfg

        def forward(self, x):
            return self.body(x) * read(self.cfg)

    return S()


def test_tuple_holding_a_list():
    m = holding(([2.0],), lambda c: c[0][0])

    def mutate():
        m.cfg[0][0] = 3.0
    after(m, mutate)


class Cfg:
    def __init__(self):
        self.k = 2.0
        self.shift = 1.0


class Slotted:
    __slots__ = ("k",)

    def __init__(self):
        self.k = 2.0


class D(dict):
    pass


@pytest.mark.parametrize("make, change, gated", [
    (Cfg, lambda c: c.__dict__.update(k=3.0), True),  # a plain object's dict
    (Slotted, lambda c: object.__setattr__(c, "k", 3.0), True),  # a slot: read every call
], ids=["dict", "slots"])
def test_config_object_attribute_changed(make, change, gated):
    m = holding(make(), lambda c: c.k)
    after(m, lambda: change(m.cfg), gated=gated)


@pytest.mark.parametrize("make, change, gated", [
    (dict, lambda d: d.update(k=3.0), True),
    (D, lambda d: dict.__setitem__(d, "k", 3.0), False),  # a dict subclass: never gated
], ids=["dict", "dict-subclass"])
def test_config_mapping_changed(make, change, gated):
    m = holding(make(k=2.0), lambda c: c["k"])
    after(m, lambda: change(m.cfg), gated=gated)


def test_partial_rebound_by_setstate():
    class S(Wrap):
        def __init__(self):
            super().__init__()
            self.op = functools.partial(torch.mul, other=2.0)

        def forward(self, x):
            return self.op(self.body(x))

    m = S()

    def mutate():
        m.op.__setstate__((torch.add, (), {"other": 2.0}, None))
    after(m, mutate, gated=False)


# ---- nn.Module's own ways of changing a module ------------------------------------------------------

def test_parameter_set_by_setattr():
    m = body()

    def mutate():
        m[0].weight = nn.Parameter(torch.randn(4, 3, 3, 3))
    after(m, mutate)


def test_parameter_set_by_setattr_aot():
    m = body()

    def mutate():
        m[3].bias = nn.Parameter(torch.randn(4))
    after(m, mutate, backend="aot_eager")


def test_buffer_registered_again():
    m = body()

    def mutate():
        m[1].register_buffer("running_mean", torch.randn(4))
    after(m, mutate)


def test_parameter_removed_to_none():
    m = body()

    def mutate():
        m[3].bias = None
    after(m, mutate)


def test_load_state_dict_and_setstate():
    m = body()
    other = body()
    for p in other.parameters():
        p.add_(1.0)

    def mutate():
        m.load_state_dict(other.state_dict())
        state = dict(m[0].__dict__, padding=(0, 0))
        m[0].__setstate__(state)
    after(m, mutate)


def test_module_to_double_and_back():
    m = body()

    def mutate():
        m.double()
        m.float()
        m[0].weight.data = m[0].weight.data * 2
    after(m, mutate)


def test_parametrize_registered_later():
    from torch.nn.utils import parametrize

    class Double(nn.Module):
        def forward(self, w):
            return w * 2

    m = body()

    def mutate():
        parametrize.register_parametrization(m[0], "weight", Double())
    after(m, mutate)


def test_weight_norm_applied_later():
    m = body()

    def mutate():
        torch.nn.utils.weight_norm(m[3])
        m[3].weight_g.data.mul_(2)
    after(m, mutate)


def test_global_hooks_registered_later():
    from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook

    m = body()
    handles = []

    def mutate():
        handles.append(register_module_forward_hook(lambda mod, i, o: o * 2 if isinstance(mod, nn.ReLU) else None))
        handles.append(register_module_forward_pre_hook(
            lambda mod, i: (i[0] + 1,) if isinstance(mod, nn.Conv2d) else None))
    try:
        after(m, mutate)
    finally:
        for h in handles:
            h.remove()


def test_hook_with_kwargs_and_always_call():
    m = body()

    def mutate():
        m[2].register_forward_pre_hook(lambda mod, args, kwargs: ((args[0] * 3,), kwargs), with_kwargs=True)
        m[0].register_forward_hook(lambda mod, i, o: o + 1, always_call=True)
    after(m, mutate)


def test_hook_order_changed_by_move_to_end():
    m = body()
    h1 = m[2].register_forward_hook(lambda mod, i, o: o * 2)
    m[2].register_forward_hook(lambda mod, i, o: o + 1)

    def mutate():
        m[2]._forward_hooks.move_to_end(h1.id)
    after(m, mutate, gated=False)


def test_hook_removed():
    m = body()
    h = m[1].register_forward_hook(lambda mod, i, o: o * 2)

    def mutate():
        h.remove()
    after(m, mutate, gated=False)


def test_training_of_one_submodule():
    m = body()

    def mutate():
        m[1].train()
    after(m, mutate)


def test_submodule_replaced_through_modules_dict():
    m = Wrap()

    def mutate():
        m.body._modules["2"] = nn.Tanh()
    after(m, mutate)


def test_instance_dict_entry_shadows_a_submodule():
    m = Wrap()

    def mutate():
        m.__dict__["body"] = nn.Sequential(nn.Conv2d(3, 4, 1))
    after(m, mutate)


def test_class_attribute_shadows_a_submodule():
    class S(Wrap):
        pass

    m = S()

    def mutate():
        S.body = nn.Sequential(nn.Conv2d(3, 4, 1))
    after(m, mutate)


def test_module_list_grows():
    class S(nn.Module):
        def __init__(self):
            super().__init__()
            self.convs = nn.ModuleList([nn.Conv2d(3, 3, 1) for _ in range(3)])

        def forward(self, x):
            for c in self.convs:
                x = c(x).relu()
            return x + self.convs[-1](x)

    m = S()

    def mutate():
        m.convs.append(nn.Conv2d(3, 3, 1))
    after(m, mutate, x=torch.randn(1, 3, 4, 4))


def test_sequential_grows():
    m = body()

    def mutate():
        m.append(nn.Tanh())
    after(m, mutate)


def test_parameter_list_and_module_dict_grow():
    class S(nn.Module):
        def __init__(self):
            super().__init__()
            self.scales = nn.ParameterList([nn.Parameter(torch.full((3,), 2.0))])
            self.heads = nn.ModuleDict({"a": nn.Conv2d(3, 3, 1)})

        def forward(self, x):
            for p in self.scales:
                x = x * p.view(1, 3, 1, 1)
            for name in self.heads:
                x = self.heads[name](x)
            return x * len(self.scales) + len(self.heads)

    m = S()

    def mutate():
        m.scales.append(nn.Parameter(torch.full((3,), 3.0)))
        m.heads["b"] = nn.Conv2d(3, 3, 1)
    after(m, mutate, x=torch.randn(1, 3, 4, 4))


# ---- functions: globals, closures, config objects ---------------------------------------------------

CFG = Cfg()
NET = body()


def uses_globals(x):
    return NET(x) * CFG.k + CFG.shift


def test_function_global_object_attribute_changed():
    def mutate():
        CFG.k = 3.0
    try:
        cf = kiln.compile(uses_globals, backend="eager")
        cf(X)
        cf(X)
        mutate()
        torch.testing.assert_close(cf(X), uses_globals(X))
    finally:
        CFG.k = 2.0


def test_function_global_object_class_swapped():
    class Tripled(Cfg):
        @property
        def k(self):
            return 6.0

        @k.setter
        def k(self, v):
            pass

    cf = kiln.compile(uses_globals, backend="eager")
    cf(X)
    cf(X)
    try:
        CFG.__class__ = Tripled
        torch.testing.assert_close(cf(X), uses_globals(X))
    finally:
        CFG.__class__ = Cfg


def test_function_global_rebound_through_module_dict():
    cf = kiln.compile(uses_globals, backend="eager")
    cf(X)
    cf(X)
    old = globals()["CFG"]
    try:
        other = Cfg()
        other.k = 4.0
        globals()["CFG"] = other
        torch.testing.assert_close(cf(X), uses_globals(X))
    finally:
        globals()["CFG"] = old


def test_closure_cell_changed():
    net = body()
    k = 2.0

    def f(x):
        return net(x) * k

    cf = kiln.compile(f, backend="eager")
    cf(X)
    cf(X)
    k = 3.0  # noqa: F841 (read through the closure)
    torch.testing.assert_close(cf(X), f(X))


def test_inlined_helper_closure_changed():
    def make(v):
        def helper(t):
            return t * v
        return helper

    class S(Wrap):
        def __init__(self):
            super().__init__()
            self.helper = make(2.0)

        def forward(self, x):
            return self.helper(self.body(x))

    m = S()

    def mutate():
        m.helper.__closure__[0].cell_contents = 3.0
    after(m, mutate)


# ---- the planner: units ---------------------------------------------------------------------------

def test_reads_plainly_refuses_a_class_attribute_of_a_mutable_class():
    from kiln.capture.guard_gate import reads_plainly

    class Mk:
        pass

    class S(nn.Module):
        plain = 1.0
        marked = Mk()

    s = S()
    s.marked = 2.0
    s.own = 3.0
    assert reads_plainly(s, "own", False)
    assert reads_plainly(s, "plain", False)  # a float: its class cannot gain __get__
    assert not reads_plainly(s, "marked", False)  # Mk.__get__/__set__ may be set later


# ---- a change made while the check function runs (another thread) ----------------------------------

class Sized(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.sizes = [scale, 1.0]  # a list: its guard runs on every call, reading through L['self']._modules['body']

    def forward(self, x):
        return self.bn(self.conv(x)).relu() * self.sizes[0]


class Outer(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.body = Sized(2.0).eval()
        self.head = nn.Sequential(nn.Conv2d(4, 4, 1), nn.ReLU(), nn.Conv2d(4, 4, 1)).eval()

    def forward(self, x):
        return self.head(self.body(x))


def test_a_change_between_the_ungated_reads_and_the_snapshot():
    """A submodule replaced after the every-call guards read it but before the gate's snapshot: the
    gated guards must not check the object read before the change while the tags recorded are those
    after it (the gate would then stay open with the new submodule unchecked)."""
    import sys

    snapshot = gate_functions()[3]
    m = Outer()
    cm = kiln.compile(m, backend="eager")
    cm(X)
    cm(X)
    torch.manual_seed(1)
    other = Sized(2.0).eval()  # (the every-call guard on its sizes passes: other weights)
    done = []

    def profile(frame, event, arg):
        if event == "c_call" and arg is snapshot and not done:
            done.append(1)
            m._modules["body"] = other  # as another thread would, just before the snapshot
    m.body.conv.unrelated = 1  # (a watched dict changes: the next call runs the gated block)
    sys.setprofile(profile)
    try:
        cm(X)  # (this call may use either submodule: it raced with the change)
    finally:
        sys.setprofile(None)
    assert done
    torch.testing.assert_close(cm(X), m(X))
    torch.testing.assert_close(cm(X), m(X))


def test_reads_plainly_looks_getattribute_up_in_the_mro():
    """`cls.__getattribute__` asks the metaclass, which may answer anything; Python calls the MRO's."""
    from kiln.capture.guard_gate import reads_plainly

    class Lying(type):
        def __getattribute__(cls, name):
            if name == "__getattribute__":
                return object.__getattribute__
            return super().__getattribute__(name)

    class Counting(metaclass=Lying):
        def __init__(self):
            self.k = 2.0

        def __getattribute__(self, name):
            return 7.0 if name == "k" else object.__getattribute__(self, name)

    c = Counting()
    assert c.k == 7.0
    assert not reads_plainly(c, "k", False)
    assert reads_plainly(c, "k", True)  # (object.__getattribute__ itself: the instance dict)


def test_one_object_at_two_places_then_one_place_rebound():
    """An object reached at two places is watched once; one place then gets another object (equal, so
    the guards pass): the record must see that the second place holds an object no tag watches."""
    class S(Wrap):
        def __init__(self):
            super().__init__()
            self.a_cfg = self.b_cfg = Cfg()

        def forward(self, x):
            return self.body(x) * self.a_cfg.k + self.b_cfg.k

    m = S()
    cm = kiln.compile(m, backend="eager")
    cm(X)
    cm(X)
    m.b_cfg = Cfg()  # equal values: the gated guards run and pass
    torch.testing.assert_close(cm(X), m(X))
    torch.testing.assert_close(cm(X), m(X))
    m.b_cfg.k = 5.0  # a change to the new object only
    torch.testing.assert_close(cm(X), m(X))


def test_every_place_of_a_reached_object_is_checked():
    """Guards that read one object at two places with no guard that the places alias (the tracer adds
    one; a guard set need not): after one place gets another, equal object, the record must not open
    the gate, since no tag watches the new object."""
    from kiln.capture.guards import GuardSet
    from kiln.capture.sources import AttrSource, LocalSource

    h = Cfg()
    h.a = h.b = Cfg()
    gs = GuardSet()
    root = LocalSource("self")
    gs.identity(root, h)
    for place in ("a", "b"):
        gs.type(AttrSource(root, place), h.a)
        gs.constant(AttrSource(AttrSource(root, place), "k"), 2.0)
    for i in range(8):
        setattr(h, f"c{i}", i)
        gs.constant(AttrSource(root, f"c{i}"), i)
    frame = ({"self": h}, {}, (), {})
    check = gs.compile(frame).check
    assert check(*frame) and check(*frame)
    h.b = Cfg()  # equal: the guards pass
    assert check(*frame) and check(*frame)
    h.b.k = 5.0  # only the new object changes
    assert not check(*frame)


# ---- modules: sys.modules, a module's globals --------------------------------------------------------

class Importing(Wrap):
    def forward(self, x):
        import tests.capture.other_module as om

        return om.scaled(self.body(x))


def test_module_replaced_in_sys_modules():
    import sys
    import types

    import tests.capture.other_module as om

    m = Importing()
    fake = types.ModuleType(om.__name__)
    fake.scaled = lambda x: x * 7.0
    pkg = sys.modules["tests.capture"]

    def mutate():
        sys.modules[om.__name__] = fake
        pkg.other_module = fake  # (`import a.b.c as x` reads the attribute of the package)
    try:
        after(m, mutate)
    finally:
        sys.modules[om.__name__] = om
        pkg.other_module = om


def test_module_global_changed():
    import tests.capture.other_module as om

    m = Importing()

    def mutate():
        om.SCALE = 3.0
    try:
        after(m, mutate)
    finally:
        om.SCALE = 2.0


def test_weakref_proxy_attribute():
    import weakref

    class Holder(Wrap):
        def __init__(self, cfg):
            super().__init__()
            self.cfg = weakref.proxy(cfg)

        def forward(self, x):
            return self.body(x) * self.cfg.k

    cfg = Cfg()
    m = Holder(cfg)

    def mutate():
        cfg.k = 3.0
    after(m, mutate)


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_plain_tensor_attribute_changed_in_place_and_rebound(backend):
    class S(Wrap):
        def __init__(self):
            super().__init__()
            self.mask = torch.ones(4, 1, 1)

        def forward(self, x):
            return self.body(x) * self.mask

    m = S()

    def mutate():
        m.mask.mul_(2)
        m.body[1].running_var.add_(1.0)
    after(m, mutate, backend=backend)
    m.mask = torch.full((4, 1, 1), 3.0)
    cm = kiln.compile(m, backend=backend)
    torch.testing.assert_close(cm(X), m(X))


def test_a_mapping_proxy_attribute():
    import types

    class S(Wrap):
        def __init__(self, d):
            super().__init__()
            self.cfg = types.MappingProxyType(d)

        def forward(self, x):
            return self.body(x) * self.cfg["k"]

    d = {"k": 2.0}
    m = S(d)

    def mutate():
        d["k"] = 3.0
    after(m, mutate)
