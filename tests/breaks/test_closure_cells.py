"""Closure cells across graph breaks: a variable of the frame shared with a nested function (`nonlocal`,
or only read by it) lives in one cell. The code before the break, the nested functions made there and
the resume functions after the break must all use that very cell object, as CPython's frame does: a
write through any of them is seen by the others, before and after the break.

Each case runs eagerly and compiled on fresh state (the counters live in the compiled frame) and also
under TorchDynamo (``KILN_CORPUS_ENGINE=dynamo``) to check the expected counts.
"""
import torch

from .support import check_breaks, disable, t


@disable
def _opaque():
    """A call kiln does not trace: a graph break where it is called."""
    return None


def test_counter_bumped_on_both_sides_of_a_print():
    def fn(x):
        n = 0

        def bump():
            nonlocal n
            n += 1

        bump()
        print("", end="")
        bump()
        return x * n

    check_breaks(fn, t(3), graphs=1, breaks=1, dynamo_breaks=0)  # (Dynamo: graphs - 1; no graph before the print)


def test_cell_read_after_the_break():
    def fn(x):
        n = 2

        def get():
            return n

        y = x + get()
        _opaque()
        return y * n + get()

    check_breaks(fn, t(3), graphs=2, breaks=1)


def test_closure_called_after_the_break_sees_earlier_writes():
    def fn(x):
        n = 0

        def bump():
            nonlocal n
            n += 1
            return n

        y = x + bump()
        _opaque()
        y = y + bump()
        return y * n

    check_breaks(fn, t(3), graphs=2, breaks=1)


def test_cell_written_in_the_resume_part_is_seen_by_the_closure():
    def fn(x):
        n = 1

        def get():
            return n

        y = x * get()
        _opaque()
        n = 7
        return y + get()

    check_breaks(fn, t(3), graphs=2, breaks=1)


def test_breaking_call_writes_the_cell():
    """The instruction run as Python at the break (a disabled function) writes the cell itself."""
    def fn(x):
        n = 1

        @disable
        def bump_eagerly():
            nonlocal n
            n += 10

        y = x + n
        bump_eagerly()
        return y * n

    check_breaks(fn, t(3), graphs=2, breaks=2, dynamo_breaks=1)  # disable(...) itself, then the call


def test_nested_closures_share_the_outer_cell():
    def fn(x):
        n = 0

        def outer():
            def inner():
                nonlocal n
                n += 2

            inner()
            return inner

        inner = outer()
        y = x + n
        _opaque()
        inner()
        return y * n

    check_breaks(fn, t(3), graphs=2, breaks=1)


def test_generator_closing_over_a_counter_across_breaks_in_its_loop():
    def fn(x):
        n = 0

        def gen():
            nonlocal n
            for i in range(3):
                n += 1
                yield i

        out = x
        for v in gen():
            out = out + v * n
            _opaque()
        return out * n

    # Dynamo gives up on the frame (a break inside a for loop over a generator) and runs it eagerly
    check_breaks(fn, t(3), graphs=1, breaks=1, dynamo_graphs=0, dynamo_breaks=-1)


def test_generator_object_held_across_a_break_bumps_the_counter():
    def fn(x):
        n = 0

        def gen():
            nonlocal n
            while True:
                n += 1
                yield n

        g = gen()
        a = next(g)
        _opaque()
        b = next(g)
        return x * a + b * n

    check_breaks(fn, t(3), graphs=1, breaks=1, dynamo_graphs=0, dynamo_breaks=-1)  # (Dynamo runs it eagerly)


def test_counter_in_a_loop_with_a_break():
    def fn(x):
        n = 0

        def bump():
            nonlocal n
            n += 1

        for _ in range(3):
            bump()
            x = x + n
            _opaque()
        return x * n

    # the resume function in the loop is specialized to the count it reads (an int constant): one
    # graph for each of n = 1, 2, 3. Dynamo runs a frame with a break inside a for loop eagerly
    check_breaks(fn, t(3), graphs=4, breaks=3, dynamo_graphs=0, dynamo_breaks=-1)


def test_argument_captured_by_a_closure_and_rebound_after_the_break():
    def fn(x, k):
        def scaled():
            return k * x

        y = scaled()
        _opaque()
        k = k + 1
        return y + scaled()

    check_breaks(fn, t(3), 2, graphs=2, breaks=1)


def test_counter_in_try_finally_around_the_break():
    def fn(x):
        n = 0

        def bump():
            nonlocal n
            n += 1

        try:
            bump()
            y = x + n
            _opaque()
            bump()
        finally:
            bump()
        return y * n

    check_breaks(fn, t(3), graphs=2, breaks=1, dynamo_graphs=0, dynamo_breaks=-1)


def test_counter_on_both_paths_of_a_data_dependent_branch():
    def fn(x):
        n = 0

        def bump():
            nonlocal n
            n += 1

        bump()
        if x.sum() > 0:
            bump()
        else:
            n -= 5
        return x * n

    check_breaks(fn, arg_sets=[(t(3).abs(),), (-t(3).abs(),)], graphs=3, breaks=1)


def test_counter_across_two_breaks():
    def fn(x):
        n = 0

        def bump():
            nonlocal n
            n += 1

        bump()
        x = x + n
        _opaque()
        bump()
        x = x * n
        _opaque()
        bump()
        return x - n

    check_breaks(fn, t(3), graphs=3, breaks=2)


def test_returned_closure_keeps_the_frame_cell():
    """The closure returned after the break holds the cell the resume function wrote: calling it later
    (post) sees the final count and keeps counting in that cell."""
    def fn(x):
        n = 0

        def bump():
            nonlocal n
            n += 1
            return n

        y = x * bump()
        _opaque()
        n += 10
        return y, bump

    # (no tensor op after the break: one graph)
    check_breaks(fn, t(3), graphs=1, breaks=1, dynamo_breaks=0, post=lambda out: (out[0], out[1](), out[1]()))


def test_lambda_made_after_the_break_shares_the_cell_with_one_made_before():
    def fn(x):
        n = 1

        def before():
            return n

        y = x + before()
        _opaque()
        after = lambda: n * 3  # noqa: E731
        n = 4
        return y + before() + after()

    check_breaks(fn, t(3), graphs=2, breaks=1)


class _Base(torch.nn.Module):
    def forward(self, x):
        return x * 2


class _ClosureOverSelf(_Base):
    def __init__(self):
        super().__init__()
        self.scale = 3

    def forward(self, x):
        scale = lambda: self.scale  # noqa: E731 (`self` is a cell variable)
        y = x + scale()
        _opaque()
        return super().forward(y) + scale()  # zero-argument super() reads the first local


def test_method_using_super_whose_self_is_captured_by_a_closure():
    check_breaks(_ClosureOverSelf(), t(3), graphs=2, breaks=1)


def test_cell_not_named_after_the_break_is_not_handed_on():
    def fn(x):
        n = 1

        def get():
            return n

        y = x + get()
        _opaque()
        return y * 2

    check_breaks(fn, t(3), graphs=2, breaks=1)


def _breaking_helper(v):
    print("", end="")  # a graph break inside the inlined call: the break moves to the call
    return v + 1


def test_break_in_the_arguments_of_a_call_to_the_counting_closure():
    """`inner(_breaking_helper(y))`: the breaking call sits in the arguments of a call to a closure that
    bumps the counter; the closure and the counter after the break share the frame's cell."""
    def fn(x):
        n = 0

        def inner(v):
            nonlocal n
            n += 1
            return v * n

        y = inner(x)
        z = inner(_breaking_helper(y))
        return z + n

    check_breaks(fn, t(3), graphs=3, breaks=2)  # (the helper's own frame breaks at its print too)
