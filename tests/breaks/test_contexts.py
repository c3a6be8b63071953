"""Breaks inside `with` blocks (no_grad, enable_grad, set_grad_enabled, autocast) and try blocks:
the continuation re-enters the block, so grad mode, finally clauses and except handlers behave as
in eager."""
import contextlib

import torch

from .support import check_breaks, disable, graph_break, t

EVENTS: list = []


def _clear_events():
    EVENTS.clear()


def _events():
    return list(EVENTS)


def test_print_inside_no_grad_block():
    def fn(w, x):
        y = x @ w
        with torch.no_grad():
            scale = y.abs().max()
            print("scale computed")  # BREAK:no_grad_print
            target = y * 0 + scale
        return (y - target).pow(2).mean(), target.requires_grad, torch.is_grad_enabled()

    check_breaks(fn, t(3, 3, requires_grad=True), t(2, 3, seed=1), graphs=2, breaks=1,
                 where=["BREAK:no_grad_print"])


def test_graph_break_inside_no_grad_then_grad_after():
    def fn(w, x):
        with torch.no_grad():
            a = x * w
            graph_break()
            b = a * w
        c = b * w
        return a.requires_grad, b.requires_grad, c.requires_grad, c

    check_breaks(fn, t(3, requires_grad=True), t(3, seed=1), graphs=2, breaks=1)


def test_enable_grad_inside_no_grad_with_break():
    def fn(w, x):
        with torch.no_grad():
            frozen = x * w
            with torch.enable_grad():
                live = x * w
                graph_break()
                live2 = live * 2
            frozen2 = frozen * w
        return frozen2.requires_grad, live2.requires_grad, live2 + frozen2

    check_breaks(fn, t(3, requires_grad=True), t(3, seed=1), graphs=2, breaks=1)


def test_set_grad_enabled_false_with_item():
    def fn(w, x):
        with torch.set_grad_enabled(False):
            y = (x * w).sum()
            v = y.item()
            z = w * v
        return z.requires_grad, z

    check_breaks(fn, t(3, requires_grad=True), t(3, seed=1), graphs=2, breaks=1)


def test_no_grad_decorator_function_with_break():
    @torch.no_grad()
    def ema_update(avg, new):
        out = avg * 0.9 + new * 0.1
        graph_break()
        return out * 1.0, torch.is_grad_enabled()

    def fn(w, x):
        y = x * w
        avg, mode = ema_update(y, y * 2)
        return y.sum() + avg.sum(), avg.requires_grad, mode

    # breaks: fn at the call, ema_update at graph_break() (dynamo's explain: graphs - 1 = 3)
    check_breaks(fn, t(3, requires_grad=True), t(3, seed=1), graphs=4, breaks=2, dynamo_breaks=3)


def test_autocast_cpu_bf16_block_with_break():
    def fn(a, b):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            c = a @ b
            graph_break()
            d = c @ b
        return c.dtype, d.dtype, d.float() + 1

    check_breaks(fn, t(4, 4), t(4, 4, seed=1), graphs=2, breaks=1, rtol=2e-2, atol=2e-2)


def test_try_finally_with_break_in_try():
    def fn(x):
        EVENTS.append("start")
        try:
            y = x * 2
            print("inside try")  # BREAK:try_finally
            y = y + 1
        finally:
            EVENTS.append("finally")
        return y

    # dynamo cannot resume inside a try block that has a finally: it runs the frame without
    # splitting it (no graph). Issue 3 asks kiln to re-enter the try block: 2 graphs.
    check_breaks(fn, t(3), graphs=2, breaks=1, setup=_clear_events, observe=_events,
                 dynamo_graphs=0, dynamo_breaks=-1)


def test_try_except_not_taken_with_break():
    def fn(x, d):
        y = x.relu()
        try:
            graph_break()
            s = d["scale"]
        except KeyError:
            s = 1.0
        return y * s

    # kiln: the root graph (relu), compiled again for the dict without the key (the live `d` handed to
    # the resume function is guarded by its keys); the continuation inside the try block (y * s), and
    # again for the dict without the key, where the KeyError is caught by the handler in the same trace
    # (y * 1.0). dynamo runs the frame unsplit (0 graphs).
    check_breaks(fn, arg_sets=[(t(3), {"scale": 3.0}), (t(3), {})], graphs=4, breaks=1,
                 dynamo_graphs=0, dynamo_breaks=-1)


@disable
def _parse_or_fail(text):
    return float(text)


def test_except_handler_runs_after_unsupported_code_raises():
    def fn(x, text):
        y = x * 2
        try:
            s = _parse_or_fail(text)
        except ValueError:
            EVENTS.append("bad value")
            s = -1.0
        return y * s

    # kiln: x * 2, then y * s after the call (and, for "oops", after the handler, which may also run
    # eagerly). dynamo cannot resume inside the try block: it runs the frame unsplit (0 graphs).
    check_breaks(fn, arg_sets=[(t(3), "2.5"), (t(3), "oops")], graphs=(2, 3), breaks=1, setup=_clear_events,
                 observe=_events, dynamo_graphs=0, dynamo_breaks=-1)


def test_break_inside_finally_block():
    def fn(x):
        try:
            y = x.exp()
        finally:
            EVENTS.append("cleanup")
            print("finally")
        return y - 1

    # the finally body on the normal path is ordinary code after the try block
    check_breaks(fn, t(3), graphs=2, breaks=1, setup=_clear_events, observe=_events)


class _Recorder:
    """A user context manager written in Python."""

    def __init__(self, name):
        self.name = name

    def __enter__(self):
        EVENTS.append(("enter", self.name))
        return self

    def __exit__(self, *exc):
        EVENTS.append(("exit", self.name))
        return False


def test_break_inside_user_context_manager():
    # dynamo cannot re-enter a user context manager after a break: it runs this frame eagerly.
    # kiln may do the same (0 graphs) or resume inside it; results must match eager either way.
    def fn(x):
        y = x + 1
        with _Recorder("block"):
            z = y * 2
            print("inside recorder")
        return z - y

    # kiln traces __enter__ and __exit__ (Python) into the graphs on both sides of the break; the
    # resume function gets the bound __exit__ on its stack and calls it where the block ends
    check_breaks(fn, t(3), graphs=2, breaks=1, setup=_clear_events, observe=_events,
                 dynamo_graphs=0, dynamo_breaks=-1)


def test_user_context_manager_without_break_is_one_graph():
    def fn(x):
        with _Recorder("quiet") as rec:
            y = x.sin() * 2
        return y + len(rec.name)

    check_breaks(fn, t(3), graphs=1, breaks=0, setup=_clear_events, observe=_events)


class _Swallow:
    """A context manager whose __exit__ suppresses ValueError and records what it saw."""

    def __init__(self, name):
        self.name = name

    def __enter__(self):
        EVENTS.append(("enter", self.name))
        return self

    def __exit__(self, kind, value, tb):
        EVENTS.append(("exit", self.name, kind.__name__ if kind else None))
        return kind is ValueError and self.name == "swallow"


@disable
def _maybe_raise(flag):
    if flag:
        raise ValueError("raised inside the block")
    return 2.0


def test_exception_after_break_inside_user_context_manager():
    def fn(x, flag, name):
        y = x + 1
        try:
            with torch.no_grad():
                with _Swallow(name):
                    z = y * 2
                    s = _maybe_raise(flag)  # BREAK:raise_in_cm
                    z = z * s
                EVENTS.append(("after block", torch.is_grad_enabled()))
        except ValueError:
            EVENTS.append(("caught", torch.is_grad_enabled()))
            z = y
        return z - y, torch.is_grad_enabled()

    # the call raising inside the block reaches the block's own cleanup (its __exit__ sees the
    # exception; "swallow" suppresses it), then the enclosing no_grad and try as in eager.
    # arg sets: normal; raised and caught outside; raised and suppressed by __exit__
    # (the name is only handed to _Swallow across the break: not guarded by value, one entry for both names)
    check_breaks(fn, arg_sets=[(t(3, requires_grad=True), False, "plain"), (t(3, requires_grad=True), True, "plain"),
                               (t(3, requires_grad=True), True, "swallow")],
                 graphs=3, breaks=1, setup=_clear_events, observe=_events, where=["BREAK:raise_in_cm"],
                 dynamo_graphs=0, dynamo_breaks=-1)


@contextlib.contextmanager
def _tagged(tag):
    EVENTS.append(("open", tag))
    try:
        yield tag * 2
    finally:
        EVENTS.append(("close", tag))


def test_break_inside_generator_context_manager():
    def fn(x):
        y = x * 3
        with _tagged(2) as k:
            z = y + k
            print("inside the generator context")  # BREAK:gen_cm_print
            z = z * 2
        return z.relu()

    # kiln traces @contextmanager generators, but a break inside the block cannot hand on a half-run
    # generator: it breaks at the with statement instead (which runs as Python), at the print and at
    # __exit__, and compiles the code in between
    check_breaks(fn, t(4), graphs=4, breaks=3, setup=_clear_events, observe=_events,
                 where=["BREAK:gen_cm_print"], dynamo_graphs=0, dynamo_breaks=-1)


@disable
def _matmul_as_python(a, b):
    return a @ b  # runs at the break: under the autocast block, as in eager


def test_autocast_nested_blocks_with_breaks_and_branch():
    def fn(a, b):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            c = a @ b
            with torch.no_grad():
                e = _matmul_as_python(c, b)
            with torch.autocast("cpu", enabled=False):
                g = c.float() @ b
                print("autocast off here:", torch.is_autocast_enabled("cpu"))
                h = g @ b
            if e.sum() > 0:
                d = c @ b
            else:
                d = c @ b * 2
            inside = torch.is_autocast_enabled("cpu")
        return c.dtype, e.dtype, e.requires_grad, g.dtype, h.dtype, d.dtype, d.float() + 1, inside, \
            torch.is_autocast_enabled("cpu")

    check_breaks(fn, arg_sets=[(t(4, 4, requires_grad=True), t(4, 4, seed=1)),
                               (t(4, 4, scale=-1.0, requires_grad=True), t(4, 4, seed=1))],
                 graphs=5, breaks=3, rtol=2e-2, atol=2e-2)


def test_exception_after_break_inside_autocast_leaves_it():
    def fn(a, flag):
        out = []
        try:
            with torch.autocast("cpu", dtype=torch.bfloat16):
                c = a @ a
                _maybe_raise(flag)
                c = c @ a
        except ValueError:
            out.append(torch.is_autocast_enabled("cpu"))
            c = a
        return c.float() * 2, out, torch.is_autocast_enabled("cpu")

    check_breaks(fn, arg_sets=[(t(4, 4), False), (t(4, 4), True)], graphs=3, breaks=1, rtol=2e-2, atol=2e-2,
                 dynamo_graphs=0, dynamo_breaks=-1)


def test_backward_inside_compiled_function_with_no_grad_update():
    def fn(w, x):
        loss = (x @ w).pow(2).mean()
        loss.backward()
        with torch.no_grad():
            w -= 0.1 * w.grad
            print("updated")
        g = w.grad.clone()
        w.grad = None
        return loss.detach(), g

    w = t(3, 2, requires_grad=True)
    # graphs: loss | the no_grad update | w.grad.clone(); breaks: backward(), print
    check_breaks(fn, w, t(4, 3, seed=1), graphs=3, breaks=2, inputs_mutated=True)


def test_nullcontext_is_traced_without_a_break():
    def fn(x, use_no_grad):
        cm = torch.no_grad() if use_no_grad else contextlib.nullcontext()
        with cm:
            y = x * 2
        with contextlib.nullcontext(3) as k:
            y = y + k
        return y.sin(), torch.is_grad_enabled()

    check_breaks(fn, t(4, 3, requires_grad=True), False, graphs=1, breaks=0)
    check_breaks(fn, t(4, 3, requires_grad=True), True, graphs=1, breaks=0)
