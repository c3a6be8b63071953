"""print and logging in the middle of tensor code: the graph breaks there, the text is printed (or
logged) once per call, exactly as eager prints it, and tensor code before and after is compiled."""
import logging

import torch
import torch.nn as nn

from .support import check_breaks, t

LOG_RECORDS: list = []


class _ListHandler(logging.Handler):
    def emit(self, record):
        LOG_RECORDS.append(record.getMessage())


logger = logging.getLogger("tests.breaks.trainer")
logger.setLevel(logging.INFO)
logger.propagate = False
logger.addHandler(_ListHandler())


def _clear_log():
    LOG_RECORDS.clear()


def _log():
    return list(LOG_RECORDS)


def test_print_between_tensor_ops():
    def fn(x):
        y = torch.tanh(x * 2)
        print("tanh done, shape", tuple(y.shape))  # BREAK:print_mid
        return y.relu() + 1

    check_breaks(fn, t(3, 4), graphs=2, breaks=1, where=["BREAK:print_mid"])


def test_print_tensor_value():
    def fn(x):
        y = (x * 10).round()
        print("y =", y)
        return y / 10 - x

    check_breaks(fn, t(4), graphs=2, breaks=1)


def test_print_sep_end_and_python_numbers():
    def fn(x, step):
        h = x @ x.t()
        print("step", step, "rows", h.shape[0], sep="|", end="!\n")
        return h.diagonal() * step

    check_breaks(fn, t(3, 2), 5, graphs=2, breaks=1)


def test_print_fstring_of_item():
    # Two breaks in one statement: .item(), then print. The segment between them holds no tensor
    # op, so no graph for it; dynamo's explain counts graphs - 1 = 1.
    def fn(x, target):
        loss = ((x - target) ** 2).mean()
        print(f"loss {loss.item():.4f}")
        return loss * 2

    check_breaks(fn, t(5), t(5, seed=1), graphs=2, breaks=2, dynamo_breaks=1)


def test_print_at_start_and_end():
    # Breaks before any tensor op and after the last one: one graph in all. dynamo's explain
    # counts graphs - 1 = 0; kiln counts both breaks.
    def fn(x):
        print("enter")
        y = x.sin() + x.cos()
        print("exit")
        return y

    check_breaks(fn, t(4), graphs=1, breaks=2, dynamo_breaks=0)


def test_logging_info_with_int_args():
    def fn(x, step):
        y = x.softmax(-1)
        logger.info("step %d: softmax over %d classes", step, y.shape[-1])  # BREAK:log_info
        return (y * x).sum(-1)

    # breaks: logger.info; kiln also offers the handler's emit() (user code that logging calls) as a
    # frame of its own, which breaks at record.getMessage() without a graph (dynamo's explain: 1).
    check_breaks(fn, t(2, 5), 3, graphs=2, breaks=(1, 2), setup=_clear_log, observe=_log,
                 where=["BREAK:log_info"], dynamo_breaks=1)


def test_logging_warning_in_branch_on_shape():
    def fn(x):
        y = x.mean(0)
        if x.shape[0] > 2:
            logger.warning("large batch: %s", tuple(x.shape))
        return y * 2

    check_breaks(fn, arg_sets=[(t(4, 3),), (t(2, 3),)], graphs=3, breaks=(1, 2), setup=_clear_log, observe=_log,
                 dynamo_breaks=1)


def test_logger_disabled_level_still_breaks_cleanly():
    # logger.debug below the logger's level prints nothing; the call is still opaque Python.
    def fn(x):
        y = x.exp()
        logger.debug("not shown %s", y.shape)
        return y - 1

    check_breaks(fn, t(3), graphs=2, breaks=1, setup=_clear_log, observe=_log)


class _ChattyMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(4, 8)
        self.fc2 = nn.Linear(8, 2)

    def forward(self, x):
        h = torch.relu(self.fc1(x))
        print("hidden", tuple(h.shape))  # BREAK:module_print
        return self.fc2(h)


def test_print_in_module_forward():
    torch.manual_seed(0)
    check_breaks(_ChattyMLP(), t(3, 4), graphs=2, breaks=1, where=["BREAK:module_print"])


def test_print_in_module_forward_with_grad():
    torch.manual_seed(0)
    model = _ChattyMLP()

    def fn(model, x):
        out = model(x)
        loss = out.pow(2).mean()
        loss.backward()
        return loss.detach(), [p.grad for p in model.parameters()]

    # dynamo: graph of fn up to the model call is empty; forward's two graphs; loss.backward()
    # breaks fn (graph: pow/mean); the resume reading .grad has no tensor op.
    check_breaks(fn, model, t(3, 4), graphs=4, breaks=3)
