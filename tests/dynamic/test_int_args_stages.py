"""Int arguments as symbols (Options.dynamic_ints), stage by stage: the policy, the ShapeEnv's binding and
printed check, the captured graph (an int placeholder whose example value is the SymInt), the AOT graph
(placeholder val is the SymInt, size nodes use it) and the static fallback."""
import operator

import sympy
import torch

import kiln
from kiln.aot.trace import aot_trace
from kiln.api import config_of
from kiln.capture.dynamic import DynamicPolicy, FrameShapes
from kiln.fake.shapes import to_expr
from kiln.fake.symbolic import ShapeEnv, is_symbolic, symbolic_fake


# ---- policy ------------------------------------------------------------------------------------

def test_policy_automatic_dynamic_marks_a_changed_int():
    shapes = FrameShapes()
    first = DynamicPolicy(None, shapes, True, ints=True)
    assert first.int_is_dynamic("L['n']", 4) is False  # first compile: a constant
    second = DynamicPolicy(None, shapes, True, ints=True)
    assert second.int_is_dynamic("L['n']", 7) is True  # another value at the same place
    assert DynamicPolicy(None, shapes, True, ints=True).int_is_dynamic("L['n']", 7) is True  # stays so
    assert DynamicPolicy(None, shapes, True, ints=True).int_is_dynamic("L['n']", 1) is False  # 0/1: constants
    assert DynamicPolicy(None, shapes, True, ints=True).int_is_dynamic("L['n']", -5) is False


def test_policy_dynamic_true_false_and_option_off():
    assert DynamicPolicy(True, FrameShapes(), True, ints=True).int_is_dynamic("L['n']", 4) is True
    assert DynamicPolicy(False, FrameShapes(), True, ints=True).int_is_dynamic("L['n']", 4) is False
    assert DynamicPolicy(True, FrameShapes(), True, ints=False).int_is_dynamic("L['n']", 4) is False
    assert DynamicPolicy(True, FrameShapes(), False, ints=True).int_is_dynamic("L['n']", 4) is False  # backend


# ---- ShapeEnv ----------------------------------------------------------------------------------

def test_shape_env_binds_an_int_input_and_checks_it():
    env = ShapeEnv()
    x = symbolic_fake(torch.randn(8, 3), env, "L['x']", {0})
    n = env.int_symbol(8, "L['n']")
    env.bind_scalar("L['n']", to_expr(n))
    assert to_expr(n) != to_expr(x.shape[0])  # never duck-sized with an equal tensor size
    bool(n < x.shape[0] + 1)  # a guard on the relation
    check = env.check_function()
    assert "s1 = ts[1]" in env.check_source()
    assert check(torch.randn(8, 3), 5) is None
    assert check(torch.randn(8, 3), 12) is not None  # s1 < s0 + 1 fails
    assert check(torch.randn(8, 3), 1) is None  # no decision needed n >= 2: 1 is served
    assert check(torch.randn(8, 3), 0) is not None  # below the lower bound
    fn, used = env.expr_function(to_expr(n) * 2 + to_expr(x.shape[0]))
    assert fn(*[[torch.randn(6, 3), 4][i] for i in used]) == 14


# ---- capture -----------------------------------------------------------------------------------

def _graphs(compiled):
    return [r.graph for r in config_of(compiled).compiler.records if r.graph is not None]


def test_capture_makes_an_int_placeholder_with_a_symint():
    def f(x, n, scale):
        return x[:n] * scale + n
    c = kiln.compile(f, backend="eager", dynamic=True, options={"dynamic_ints": True, "dynamic_floats": False})
    c(torch.randn(10), 4, 2.0)
    gm = _graphs(c)[0]
    places = {p.target: p.meta["example_value"] for p in gm.graph.nodes if p.op == "placeholder"}
    assert set(places) == {"x", "n"}  # the float stays a constant (Options.dynamic_floats off)
    assert isinstance(places["n"], torch.SymInt) and is_symbolic(places["n"])
    env = gm.meta["kiln_shape_env"]
    assert env.hints[to_expr(places["n"])] == 4
    assert any(n.target is operator.add and n.args[1].op == "placeholder" for n in gm.graph.nodes
               if n.op == "call_function" and isinstance(n.args[1], torch.fx.Node))


def test_capture_guard_on_int_branch_is_an_expression():
    def f(x, n):
        return x + 1 if n > 5 else x - 1
    c = kiln.compile(f, backend="eager", dynamic=True, options={"dynamic_ints": True})
    c(torch.randn(4), 8)
    gm = _graphs(c)[0]
    n = next(p.meta["example_value"] for p in gm.graph.nodes if p.op == "placeholder" and p.target == "n")
    assert [g.fact for g in gm.meta["kiln_shape_env"].guards] == [to_expr(n) > 5]


def test_capture_without_option_keeps_ints_constants():
    c = kiln.compile(lambda x, n: x[:n], backend="eager", dynamic=True, options={"dynamic_ints": False})
    c(torch.randn(10), 4)
    places = [p for p in _graphs(c)[0].graph.nodes if p.op == "placeholder"]
    assert [p.target for p in places] == ["x"]


# ---- AOT ---------------------------------------------------------------------------------------

def _captured(f, *args):
    c = kiln.compile(f, backend="eager", dynamic=True, options={"dynamic_ints": True})
    c(*args)
    return _graphs(c)[0]


def test_aot_placeholder_val_is_the_symint_and_runs_on_other_values():
    gm = _captured(lambda x, n: x[:n] + torch.arange(n), torch.randn(12), 5)
    assert [p.target for p in gm.graph.nodes if p.op == "placeholder"] == ["x", "n"]
    ag = aot_trace(gm, [torch.randn(12), 5])
    places = [p for p in ag.gm.graph.nodes if p.op == "placeholder"]
    assert isinstance(places[1].meta["val"], torch.SymInt) and to_expr(places[1].meta["val"]).is_Symbol
    assert ag.sizes.read([torch.randn(12), 9])[to_expr(places[1].meta["val"])] == 9
    x = torch.randn(12)
    torch.testing.assert_close(ag.gm(x, 9)[0], x[:9] + torch.arange(9))  # plain FX, another value


def test_aot_static_fallback_takes_the_int_as_a_constant():
    gm = _captured(lambda x, n: x[:n] * n, torch.randn(12), 5)
    env = gm.meta["kiln_shape_env"]
    env.specialize_all()
    ag = aot_trace(gm, [torch.randn(12), 5])
    places = [p for p in ag.gm.graph.nodes if p.op == "placeholder"]
    assert places[1].meta["val"] == 5
    check = env.check_function()
    assert check(torch.randn(12), 5) is None and check(torch.randn(12), 6) is not None


# ---- kiln codegen ------------------------------------------------------------------------------

def test_kiln_wrapper_reads_the_symbol_from_the_int_input():
    def f(x, n):
        return x[:n] * n
    c = kiln.compile(f, backend="kiln", dynamic=True, options={"dynamic_ints": True})
    x = torch.randn(12)
    report = str(kiln.explain(c)(x, 5))
    assert "def call(x, arg_n):" in report and "= arg_n" in report, report
    assert "size-generic code" in report
