"""Calls kiln does not look inside: NumPy, random, file I/O, C functions of extension modules,
kiln.graph_break() and kiln.disable(fn). Each breaks the graph cleanly; the call runs once per call
of the compiled function, with eager's arguments and effects."""
import contextlib
import os
import random
import tempfile
import time
import zlib

import numpy as np
import torch
import torch.nn as nn

from tests.corpus.harness import dynamo_bug

from .support import check_breaks, disable, graph_break, t


# ------------------------------------------------------------------------------------------
# NumPy
# ------------------------------------------------------------------------------------------


def test_numpy_round_trip():
    # dynamo traces NumPy through torch._numpy, kiln through its own mapping (values/numpy_*.py):
    # one graph, no break, for both.
    def fn(x):
        y = x * 2
        a = np.tanh(y.numpy())
        return torch.from_numpy(a) + y

    check_breaks(fn, t(4), graphs=1, breaks=0)


@dynamo_bug("float() of the traced np.median result: 'only 0-dimensional arrays can be converted'",
            strict=False)
def test_numpy_statistics_for_python_decision():
    def fn(x):
        h = x.relu()
        med = float(np.median(h.numpy()))
        return h - med, med >= 0

    check_breaks(fn, t(7), graphs=(2, 3), breaks=(1, 2, 3), dynamo_graphs=1, dynamo_breaks=0)


def test_numpy_random_generator():
    def fn(x, seed):
        rng = np.random.default_rng(seed)
        noise = torch.from_numpy(rng.standard_normal(x.shape[0]).astype(np.float32))
        return x + noise * 0.1

    check_breaks(fn, t(5), 3, graphs=1, breaks=(1, 2, 3), dynamo_breaks=0)


# ------------------------------------------------------------------------------------------
# random
# ------------------------------------------------------------------------------------------


def _seed():
    random.seed(1234)


def test_random_random_scale():
    def fn(x):
        y = x.abs()
        r = random.random()
        return y * r + 1

    check_breaks(fn, t(4), graphs=2, breaks=1, setup=_seed, observe=random.getstate)


def test_random_augmentation_branch():
    def fn(x):
        x = x * 2 - 1
        if random.random() < 0.5:
            x = x.flip(-1)
        return x.tanh()

    check_breaks(fn, t(2, 5), graphs=2, breaks=1, setup=_seed, observe=random.getstate, calls=3)


def test_random_choice_of_python_list():
    def fn(x):
        acts = ["relu", "tanh", "sigmoid"]
        name = random.choice(acts)
        return getattr(torch, name)(x) + x, name

    # no tensor op before the break: one graph. dynamo's explain counts graphs - 1 = 0.
    check_breaks(fn, t(4), graphs=1, breaks=1, setup=_seed, observe=random.getstate, dynamo_breaks=0)


# ------------------------------------------------------------------------------------------
# file I/O
# ------------------------------------------------------------------------------------------

_TMP = tempfile.mkdtemp(prefix="kiln_breaks_")
_LOG_FILE = os.path.join(_TMP, "metrics.txt")


def _reset_file():
    with open(_LOG_FILE, "w"):
        pass


def _read_file():
    with open(_LOG_FILE) as f:
        return f.read()


def test_file_write_open_close():
    def fn(x, path):
        y = x.mean(0)
        f = open(path, "a")
        f.write(f"mean shape {tuple(y.shape)}\n")
        f.close()
        return y * 2

    # graphs: mean | y * 2. Breaks: open(), and f.write / f.close where kiln cannot call methods of
    # the file object from a graph's frame (dynamo's explain: graphs - 1 = 1).
    check_breaks(fn, t(3, 2), _LOG_FILE, graphs=2, breaks=(1, 2, 3), setup=_reset_file, observe=_read_file)


def test_file_write_with_block():
    # `with open(...)`: dynamo cannot resume inside a with block of a context manager it does not
    # know, so it runs that frame without breaking it (1 graph, the rest eager); kiln must at least
    # give eager's results and file contents.
    def fn(x, path):
        y = x.cumsum(0)
        with open(path, "a") as f:
            f.write("row\n")
        return y + 1

    check_breaks(fn, t(4), _LOG_FILE, graphs=(1, 2), breaks=(0, 1, 2), setup=_reset_file, observe=_read_file,
                 dynamo_graphs=1, dynamo_breaks=0)


def test_torch_save_checkpoint_mid_step():
    def fn(x, path):
        state = {"w": x * 2}
        torch.save(state, path)
        loaded = torch.load(path)
        return loaded["w"] + x

    path = os.path.join(_TMP, "ckpt.pt")
    check_breaks(fn, t(3), path, graphs=2, breaks=(1, 2, 3))


# ------------------------------------------------------------------------------------------
# C functions of extension modules
# ------------------------------------------------------------------------------------------


def test_time_perf_counter_around_forward():
    def fn(x):
        t0 = time.perf_counter()
        y = torch.relu(x @ x.t())
        elapsed = time.perf_counter() - t0
        return y, elapsed >= 0

    # the first break leaves nothing before it (no graph); kiln counts both breaks, dynamo's explain
    # graphs - 1 = 0. dynamo recompiles the continuation once for the new float t0 (then marks it
    # dynamic); t0 never reaches a graph, so kiln must not recompile for it.
    check_breaks(fn, t(3, 3), graphs=1, breaks=2, dynamo_breaks=0, dynamo_recompiles=True)


def test_zlib_checksum_of_config():
    def fn(x, name):
        y = x + 1
        key = zlib.crc32(name.encode()) % 7
        return y * key

    check_breaks(fn, t(3), "layer1", graphs=2, breaks=1)


def test_os_getpid_c_function():
    def fn(x):
        y = x.square()
        pid_ok = os.getpid() > 0
        return y.sqrt() if pid_ok else y

    check_breaks(fn, t(3), graphs=2, breaks=1)


# ------------------------------------------------------------------------------------------
# kiln.graph_break()
# ------------------------------------------------------------------------------------------


def test_graph_break_forced():
    def fn(x):
        a = x.sin()
        graph_break()  # BREAK:forced
        return a.cos()

    check_breaks(fn, t(4), graphs=2, breaks=1, where=["BREAK:forced"])


def test_graph_break_twice_in_a_row():
    # Nothing between the two breaks: no graph there. dynamo's explain: graphs - 1 = 1.
    def fn(x):
        a = x + 1
        graph_break()
        graph_break()
        return a * 2

    check_breaks(fn, t(3), graphs=2, breaks=2, dynamo_breaks=1)


def test_graph_break_is_noop_eagerly():
    def fn(x):
        graph_break()
        return x * 2

    torch.testing.assert_close(fn(torch.ones(2)), torch.full((2,), 2.0))


class _Staged(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.b = nn.Linear(4, 4)

    def forward(self, x):
        x = self.a(x).relu()
        graph_break()
        return self.b(x)


def test_graph_break_in_module_forward():
    torch.manual_seed(0)
    check_breaks(_Staged(), t(2, 4), graphs=2, breaks=1)


# ------------------------------------------------------------------------------------------
# kiln.disable(fn)
# ------------------------------------------------------------------------------------------


@disable
def _eager_only_clip(y, lo, hi):
    # imagine a custom C++ op: run eagerly, never looked into
    return y.clamp(lo, hi)


def test_disabled_function_mid_code():
    def fn(x):
        y = x * 3
        z = _eager_only_clip(y, -1.0, 1.0)  # BREAK:disabled
        return z + y

    check_breaks(fn, t(5), graphs=2, breaks=1, where=["BREAK:disabled"])


@disable
def _disabled_with_prints(y):
    print("inside disabled:", y.shape)
    return y.sum(0)


def test_disabled_function_that_would_break_itself():
    def fn(x):
        y = x.exp()
        s = _disabled_with_prints(y)
        return s / y.sum()

    check_breaks(fn, t(3, 2), graphs=2, breaks=1)


class _CustomOpBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 4)

    @disable
    def forward(self, x):
        return self.proj(x).sigmoid()


class _UsesCustomBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.pre = nn.Linear(4, 4)
        self.custom = _CustomOpBlock()
        self.post = nn.Linear(4, 2)

    def forward(self, x):
        return self.post(self.custom(self.pre(x)) + x)


def test_disabled_submodule_forward():
    torch.manual_seed(0)
    check_breaks(_UsesCustomBlock(), t(3, 4), graphs=2, breaks=1)


def test_disable_applied_inline():
    def helper(y):
        return y * 2

    def fn(x):
        a = x - 1
        b = disable(helper)(a)
        return a + b

    check_breaks(fn, t(3), graphs=2, breaks=1)


def _rng_state():
    return torch.get_rng_state()


def test_manual_seed_then_random_ops():
    def fn(x):
        y = x * 2
        torch.manual_seed(7)  # BREAK:manual_seed
        noise = torch.rand_like(y)
        return y + noise, torch.randn(3), torch.nn.functional.dropout(y, 0.5, training=True)

    # the reseed runs as Python between the graphs; the random ops of the second graph draw from the
    # reseeded generator in program order: the same numbers as eager, and the same generator state after
    check_breaks(fn, t(4), graphs=2, breaks=1, observe=_rng_state, where=["BREAK:manual_seed"])


@contextlib.contextmanager
def _frozen_rng():
    state = torch.get_rng_state()
    try:
        yield
    finally:
        torch.set_rng_state(state)


def _with_seed(op, *args, **kwargs):
    """Like OpInfo's wrapper_set_seed: reseed inside a block that puts the generator state back."""
    with _frozen_rng():
        torch.manual_seed(42)
        return op(*args, **kwargs)


def test_reseeding_wrapper_around_random_op():
    def fn(x):
        y = x.abs()
        return _with_seed(torch.nn.functional.dropout, y, 0.3, training=True) + 1

    # fn breaks at the call into the wrapper; the wrapper's frame breaks at the generator context
    # manager (entering it: a break inside the block moves to its with, and leaving it) and at
    # manual_seed; dropout and the add after it are still compiled, with eager's random numbers, and
    # the generator state is put back as in eager
    check_breaks(fn, t(6), graphs=3, breaks=4, observe=_rng_state, dynamo_graphs=2, dynamo_breaks=1)
