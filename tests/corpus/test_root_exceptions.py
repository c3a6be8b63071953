"""try/except/finally in the compiled function itself: exceptions raised by traced code are caught by the
frame's own handlers symbolically (one graph); one that leaves the frame after a handler caught it breaks
the graph at the instruction that raised it, and the whole try statement runs as Python."""
import pytest
import torch

from .harness import check, compile_fn, reset


def _t(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g)


class Missing(Exception):
    pass


def _lookup(table, key):
    if key not in table:
        raise Missing(key)
    return table[key]


def test_builtin_error_caught_in_the_frame():
    def fn(x):
        try:
            k = len(5)
        except TypeError:
            k = -1
        return x * k

    check(fn, _t(3))


def test_user_exception_from_a_helper_caught_in_the_frame():
    def fn(x):
        table = {"a": 2}
        try:
            scale = _lookup(table, "b")
        except Missing as exc:
            scale = len(exc.args) + 3
        return x * scale

    check(fn, _t(3))


def test_raise_in_the_frame_caught_by_its_own_handler_with_else_and_finally():
    def fn(x):
        out = x
        try:
            if x.dim() == 2:
                raise ValueError("two")
        except ValueError:
            out = out * 2
        else:
            out = out - 1
        finally:
            out = out + 10
        return out

    check(fn, _t(2, 2))
    check(fn, _t(3))


def test_nested_try_inner_handler_does_not_match():
    def fn(x):
        try:
            try:
                y = [1, 2][5]
            except KeyError:
                y = 0
        except IndexError:
            y = 7
        return x + y

    check(fn, _t(3))


def test_exception_in_a_no_grad_block_caught_outside():
    def fn(x):
        try:
            with torch.no_grad():
                y = x * 2
                raise RuntimeError("stop")
        except RuntimeError:
            y = x * 3
        return y, torch.is_grad_enabled()

    check(fn, _t(3).requires_grad_())


def test_caught_exception_object_is_usable():
    def fn(x):
        try:
            raise KeyError("k", 3)
        except KeyError as exc:
            n = exc.args[1]
        return x * n

    check(fn, _t(3))


@pytest.mark.parametrize("reraise", ["bare", "new", "unmatched"])
def test_exception_leaving_the_frame_is_raised_as_in_eager(reraise):
    def fn(x, n):
        y = x.sin()
        try:
            k = len(n)
        except (TypeError if reraise != "unmatched" else KeyError):
            if reraise == "bare":
                raise
            raise ValueError("no length")
        finally:
            y = y + 1
        return y * k

    check(fn, _t(3), [1, 2, 3])  # no exception: one graph
    expected = None
    try:
        fn(_t(3), 5)
    except Exception as exc:  # noqa: BLE001
        expected = type(exc)
    reset()
    with pytest.raises(expected):
        compile_fn(fn, "eager")(_t(3), 5)


def _raise_value_error():
    raise ValueError("inner")


def test_raise_from_sets_cause_and_context():
    def fn(x):
        try:
            try:
                {}["a"]
            except KeyError as e:
                raise RuntimeError("wrapped") from e
        except RuntimeError as err:
            return x * 3, type(err.__cause__).__name__, type(err.__context__).__name__, err.__suppress_context__

    check(fn, _t(2))


def test_raise_from_none_and_implicit_context_across_a_call():
    def fn(x):
        out = []
        try:
            try:
                [][0]
            except IndexError:
                raise KeyError("k") from None
        except KeyError as err:
            out.append((err.__cause__ is None, type(err.__context__).__name__, err.__suppress_context__))
        try:
            try:
                {}["z"]
            except KeyError:
                _raise_value_error()  # raised in a called function: its context is still the KeyError
        except ValueError as err:
            out.append(type(err.__context__).__name__)
        return x + 1, out

    check(fn, _t(2))
