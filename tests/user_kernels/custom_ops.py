"""Custom ops used by the tests: torch.library.custom_op and torch.library.Library definitions."""
import torch


@torch.library.custom_op("kiln_test::mysin", mutates_args=())
def mysin(x: torch.Tensor) -> torch.Tensor:
    return torch.sin(x)


@mysin.register_fake
def _(x):
    return torch.empty_like(x)


def _mysin_backward(ctx, grad):
    (x,) = ctx.saved_tensors
    return grad * x.cos() * 10  # not sin's derivative: the user's formula must be the one that runs


def _mysin_setup(ctx, inputs, output):
    ctx.save_for_backward(inputs[0])


mysin.register_autograd(_mysin_backward, setup_context=_mysin_setup)


@torch.library.custom_op("kiln_test::rowsum", mutates_args=())
def rowsum(x: torch.Tensor) -> torch.Tensor:
    return x.sum(1)


@rowsum.register_fake
def _(x):
    return x.new_empty(x.shape[0])


@torch.library.custom_op("kiln_test::add_into", mutates_args=("out",))
def add_into(out: torch.Tensor, x: torch.Tensor) -> None:
    out.add_(x)


@add_into.register_fake
def _(out, x):
    return None


@torch.library.custom_op("kiln_test::scale_and_sum", mutates_args=("buf",))
def scale_and_sum(x: torch.Tensor, buf: torch.Tensor, k: float) -> torch.Tensor:
    buf.mul_(k)
    return x.sum() + buf.sum()


@scale_and_sum.register_fake
def _(x, buf, k):
    return x.new_empty(())


@torch.library.custom_op("kiln_test::nofake", mutates_args=())
def nofake(x: torch.Tensor) -> torch.Tensor:
    return x * 3


lib = torch.library.Library("kiln_test_lib", "DEF")
lib.define("twice(Tensor x) -> Tensor")
lib.impl("twice", lambda x: x * 2, "CPU")
lib.impl("twice", lambda x: torch.empty_like(x), "Meta")
lib.define("fill_(Tensor(a!) x, float v) -> ()")
lib.impl("fill_", lambda x, v: (x.fill_(v), None)[1], "CPU")
lib.impl("fill_", lambda x, v: None, "Meta")


@torch.library.custom_op("kiln_test::count_positive", mutates_args=())
def count_positive(x: torch.Tensor) -> int:
    return int((x > 0).sum())


@count_positive.register_fake
def _(x):
    return 0  # a number the fake cannot know: the call must break, not bake 0 into the graph
lib.define("argmax_rows(Tensor x) -> Tensor")
lib.impl("argmax_rows", lambda x: x.argmax(1), "CPU")
lib.impl("argmax_rows", lambda x: x.new_empty(x.shape[0], dtype=torch.int64), "Meta")


@torch.library.custom_op("kiln_test::positive_positions", mutates_args=())
def positive_positions(x: torch.Tensor) -> torch.Tensor:
    return torch.nonzero(x > 0).flatten()


@positive_positions.register_fake
def _(x):
    n = torch.library.get_ctx().new_dynamic_size(max=x.numel())  # a data-dependent output size
    return x.new_empty(n, dtype=torch.long)
