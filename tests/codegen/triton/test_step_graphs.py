"""StepGraphRunner (a training step's forward and backward replayed from CUDA graphs): which results are
lent, copied, rebuilt on the caller's inputs or handed out as recorded, and when a call runs plainly.
The recording is faked on CPU (a "graph" that replays by running the wrapper on the static inputs);
tests/codegen/triton/test_cuda.py trains with real CUDA graphs."""
import torch

from kiln.codegen.step_graphs import StepGraphRunner
from tests.codegen.triton.cuda_fakes import CAPTURING, fake_cuda  # noqa: F401 (the fixture)


def runner_for(wrapper, n_state, **kw):
    """The runner on CPU tensors; its fake graph runs ``wrapper`` on the static inputs (pinned ones: the
    caller's tensors of that call) and copies what it computed into the recorded results."""
    r = StepGraphRunner(wrapper, n_state, **kw)
    r.device_type = "cpu"
    real_record, real_replay, current = r._record, r._replay, [None]

    def record(key, inputs):
        rec = real_record(key, inputs)
        if rec is not None:
            def replay():
                args = [current[0][i] if s is None else s for i, s in enumerate(rec.static_inputs)]
                for dst, src in zip(rec.static_results, wrapper(*args)):
                    if dst.data_ptr() != src.data_ptr():
                        dst.copy_(src)
            rec.graph.replay_fn = replay
        return rec

    def replay(rec, inputs):
        current[0] = inputs
        try:
            return real_replay(rec, inputs)
        finally:
            current[0] = None  # (holding the inputs would hold a saved tensor)

    r._record, r._replay = record, replay
    return r


class Forward:
    """A training forward: (running stat updated in place, output, saved input, saved activation, saved
    view of the weight); its in-place update is skipped while capturing (a capture does not run kernels)."""

    def __init__(self):
        self.plain_runs = 0

    def __call__(self, x, w, stat):
        if not CAPTURING[0]:
            stat.add_(1)
        self.plain_runs += 1
        h = torch.relu(x * w)
        return stat, h.sum(0), x, h, w.view(1, -1)


def test_forward_lends_saved_tensors_and_rebuilds_input_views(fake_cuda):
    w, stat = torch.randn(4), torch.zeros(())
    runner = runner_for(Forward(), n_state=2, lend_from=2)
    x = torch.randn(3, 4)
    got = runner(x, w, stat)
    rec = next(iter(runner.recordings.values()))
    assert runner.replays == 1 and stat.item() == 1  # recorded without running, replayed once
    kinds = [step[0] for step in rec.plan]
    assert kinds == ["input", "copy", "input", "lend", "input"], kinds
    assert got[0] is stat and got[2].data_ptr() == x.data_ptr()  # the caller's own tensors
    assert got[3].data_ptr() == rec.static_results[3].data_ptr()  # lent: the recording's memory
    assert got[1].data_ptr() != rec.static_results[1].data_ptr()  # the output: a copy
    torch.testing.assert_close(got[3], torch.relu(x * w))
    torch.testing.assert_close(got[1], torch.relu(x * w).sum(0))

    x2 = torch.randn(3, 4)
    held = got[3]  # the last replay's saved activation is still held (its backward has not run)
    again = runner(x2, w, stat)
    assert runner.busy == 1 and runner.replays == 1 and stat.item() == 2  # ran plainly
    torch.testing.assert_close(again[3], torch.relu(x2 * w))
    torch.testing.assert_close(held, torch.relu(x * w))  # not overwritten
    del got, held, again
    x3 = torch.randn(3, 4)
    third = runner(x3, w, stat)
    assert runner.replays == 2 and stat.item() == 3
    torch.testing.assert_close(third[3], torch.relu(x3 * w))
    assert "were still held" in runner.explain()


def test_backward_reads_pinned_inputs_in_place_and_runs_plainly_when_they_moved(fake_cuda):
    lent = torch.randn(3, 4)  # stands in for the forward recording's lent memory

    def backward(saved, grad):
        return saved * grad, grad.sum(0)

    runner = runner_for(backward, n_state=0, pinned=lambda ptr: ptr == lent.untyped_storage().data_ptr())
    g = torch.randn(3, 4)
    got = runner(lent, g)
    rec = next(iter(runner.recordings.values()))
    assert rec.static_inputs[0] is None and rec.pinned == [(0, lent.data_ptr())]  # no reference kept
    torch.testing.assert_close(got[0], lent * g)
    lent.mul_(2)  # (its forward replayed: new values at the same address)
    g2 = torch.randn(3, 4)
    torch.testing.assert_close(runner(lent, g2)[0], lent * g2)
    assert runner.replays == 2
    other = torch.randn(3, 4)  # the forward ran plainly: its saved tensor is elsewhere
    torch.testing.assert_close(runner(other, g2)[0], other * g2)
    assert runner.replays == 2 and runner.moved == 1


def test_results_sharing_memory_are_copied_once_and_stay_views_of_one_copy(fake_cuda):
    def wrapper(x):
        y = x * 2
        return y, y.view(-1)[:2]

    runner = runner_for(wrapper, n_state=0)
    x = torch.randn(2, 3)
    a, b = runner(x)
    assert a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()
    assert a.untyped_storage().data_ptr() != runner.recordings[next(iter(runner.recordings))].static_results[0].data_ptr()
    b[0] = 7.0
    assert a[0, 0].item() == 7.0
    torch.testing.assert_close(runner(x)[1], (x * 2).view(-1)[:2])


def test_a_lent_result_sharing_memory_with_an_output_is_copied(fake_cuda):
    def wrapper(x):
        y = x + 1
        return y, y  # an output that is also saved for the backward

    runner = runner_for(wrapper, n_state=0, lend_from=1)
    out, saved = runner(torch.randn(3))
    rec = next(iter(runner.recordings.values()))
    assert [step[0] for step in rec.plan] == ["copy", "copy"] and not rec.lent


def test_results_sharing_memory_share_one_version_counter(fake_cuda):
    """An output that is also saved for the backward, changed in place by the caller: autograd must see
    the change in the saved tensor, as in eager (one version counter for both)."""
    def wrapper(x):
        y = x.exp()
        return y, y

    runner = runner_for(wrapper, n_state=0)
    out, saved = runner(torch.randn(3))
    before = saved._version
    out.mul_(2)
    assert saved._version == before + 1 and torch.equal(out, saved)


def test_a_caller_holding_a_lent_storage_object_makes_the_call_plain(fake_cuda):
    def wrapper(x):
        return (x * 2,)

    runner = runner_for(wrapper, n_state=0, lend_from=0)
    (saved,) = runner(torch.randn(3))
    storage = saved.untyped_storage()  # what a hook packing (storage, offset, size, stride) keeps
    values = saved.clone()
    del saved
    runner(torch.randn(3))
    assert runner.busy == 1 and runner.replays == 1
    held = torch.empty(0).set_(storage, 0, (3,), (1,))
    assert torch.equal(held, values)  # not overwritten
    del held, storage
    runner(torch.randn(3))
    assert runner.replays == 2


def test_inputs_that_keep_moving_stop_the_recording(fake_cuda):
    lent = torch.randn(3)
    runner = runner_for(lambda saved, g: (saved * g,), n_state=0,
                        pinned=lambda ptr: ptr == lent.untyped_storage().data_ptr())
    runner(lent, torch.randn(3))
    for _ in range(3):
        other = torch.randn(3)
        g = torch.randn(3)
        torch.testing.assert_close(runner(other, g)[0], other * g)
    assert not runner.recordings and "moved 3 calls in a row" in runner.explain()
    torch.testing.assert_close(runner(lent, g)[0], lent * g)  # plain from now on
    assert runner.replays == 1


def test_parameters_that_keep_moving_stop_recording(fake_cuda):
    def wrapper(x, w):
        return (x * w,)

    runner = runner_for(wrapper, n_state=1)
    for i in range(12):
        w = torch.randn(3)  # a new parameter tensor every call
        x = torch.randn(3)
        torch.testing.assert_close(runner(x, w)[0], x * w)
    assert len(runner.record_seconds) <= 4 and "parameters moved" in runner.explain()
