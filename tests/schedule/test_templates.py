"""The matmul-template pass (``schedule/templates.py``) on lowered graphs: which matmul calls become
templates, which group becomes the epilogue, and that the schedule stays in dependency order."""
import pytest
import torch

from kiln.api import options_for_mode
from kiln.loopir.nodes import Stored
from kiln.options import Options
from kiln.schedule.scheduler import ExternStep, FusedGroup, schedule
from kiln.schedule.templates import (MatmulTemplate, broadcast_strides, broadcasts_to, fuse_matmul_templates,
                                     template_steps)

pytest.importorskip("triton")
from tests.codegen.triton.helpers import compile_fn  # noqa: E402


def templated(fn, *args):
    """The lowered graph of ``fn`` scheduled for Triton, before and after the pass."""
    _, cg = compile_fn(fn, list(args))
    lg, buffers = cg.lg, cg.lg.buffers()
    outputs = {o.buffer.name for o in lg.outputs if isinstance(o, Stored)}
    sched = schedule(lg.nodes, buffers, outputs)
    return sched, fuse_matmul_templates(sched, buffers, outputs), buffers, lg


def assert_dependency_order(sched, lg):
    ready = {b.name for b in lg.inputs} | {c.name for c in lg.constants}
    for step in sched.steps:
        if isinstance(step, ExternStep):
            reads, writes = step.node.read_names, set(step.node.writes)
        elif isinstance(step, MatmulTemplate):
            reads, writes = step.reads, step.writes | ({step.out} if step.epilogue is None else set())
            writes |= step.epilogue.writes if step.epilogue is not None else set()
        else:
            reads, writes = step.reads - step.writes, step.writes
        assert reads <= ready, (step, reads - ready)
        ready |= writes


def test_linear_gelu_becomes_one_template_step():
    def f(x, w, b):
        return torch.nn.functional.gelu(torch.nn.functional.linear(x, w, b))

    before, after, _, lg = templated(f, torch.randn(2, 5, 8), torch.randn(6, 8), torch.randn(6))
    assert [type(s) for s in before.steps] == [ExternStep, FusedGroup]
    (t,) = after.steps
    assert isinstance(t, MatmulTemplate) and t.kind == "mm" and t.row_dims == 2 and not t.store_out
    assert t.shape == (10, 6, 8)
    assert "template" in after.format() and "kept in registers" in after.format()
    assert_dependency_order(after, lg)


def test_epilogue_that_is_not_the_first_reader_moves_up():
    def f(a, b, c):
        y = a @ b
        return torch.relu(y), y @ c

    before, after, _, lg = templated(f, torch.randn(6, 7), torch.randn(7, 8), torch.randn(8, 5))
    first, second = template_steps(after)
    assert first.epilogue is not None and first.store_out and first.index < second.index
    assert_dependency_order(after, lg)


def test_epilogue_needing_a_later_value_is_not_moved():
    def f(a, b, c, d):
        y = a @ b
        z = y @ c  # the first reader of y
        return (torch.relu(y) + (z @ d)) * 2  # needs z @ d: computed after the first reader

    _, after, _, lg = templated(f, torch.randn(6, 7), torch.randn(7, 6), torch.randn(6, 6), torch.randn(6, 6))
    ts = template_steps(after)
    y = next(t for t in ts if t.a.buffer.name == "a")
    assert y.epilogue is None and y.store_out
    assert_dependency_order(after, lg)


def test_reduction_and_transposed_readers_are_not_epilogues():
    _, after, _, _ = templated(lambda a, b: (a @ b).sum(1), torch.randn(6, 7), torch.randn(7, 8))
    (t,) = template_steps(after)
    assert t.epilogue is None and t.store_out
    _, after, _, _ = templated(lambda a, b, c: c * (a @ b).t(), torch.randn(6, 7), torch.randn(7, 8), torch.randn(8, 6))
    (t,) = template_steps(after)
    assert t.epilogue is None


def test_non_float_and_batched_matmuls_are_left_alone():
    def f(a, b, x, y):
        return a @ b, torch.bmm(x, y)

    before, after, _, _ = templated(f, torch.randint(0, 3, (3, 4)), torch.randint(0, 3, (4, 5)),
                                    torch.randn(2, 3, 4), torch.randn(2, 4, 5))
    assert template_steps(after) == [] and len(after.steps) == len(before.steps)


def test_broadcast_helpers():
    assert broadcasts_to((5,), (3, 5)) and broadcasts_to((3, 1), (3, 5)) and not broadcasts_to((3,), (3, 5))
    buf = type("B", (), {"name": "b", "dtype": torch.float32})()
    assert broadcast_strides(Stored(buf, (5,), (1,)), (3, 5)) == (0, 1)
    assert broadcast_strides(Stored(buf, (3, 1), (1, 1)), (3, 5)) == (1, 0)
    assert broadcast_strides(Stored(buf, (1, 1), (1, 1)), (1, 5)) == (1, 0)


def test_modes_set_the_options():
    base = Options()
    assert options_for_mode("max-autotune", base).matmul_templates
    assert options_for_mode("max-autotune", base).cudagraphs
    assert options_for_mode("max-autotune-no-cudagraphs", base).matmul_templates
    assert not options_for_mode("max-autotune-no-cudagraphs", base).cudagraphs
    assert not options_for_mode("reduce-overhead", base).matmul_templates
    assert options_for_mode(None, base) is base
    with pytest.raises(ValueError, match="matmul_choice"):
        Options(matmul_choice="fastest")
