"""CudaGraphRunner (mode="reduce-overhead"): when graphs are recorded, replayed, re-recorded or not used.
The recording itself is faked on CPU (a "graph" that replays by calling the wrapper on the static
inputs again); test_cuda.py runs real CUDA graphs."""
import pytest
import torch

import kiln
from kiln.codegen.cudagraphs import CudaGraphRunner
from tests.codegen.triton.cuda_fakes import fake_cuda  # noqa: F401 (the fixture)


class Wrapper:
    """Stands in for a generated wrapper: allocates its results, like the real one (``calls`` counts runs)."""

    def __init__(self, fail=False, alias=False):
        self.calls, self.fail, self.alias = 0, fail, alias

    def __call__(self, x, w):
        self.calls += 1
        if self.fail:
            raise RuntimeError("operation not permitted when stream is capturing")
        return (x.view(-1),) if self.alias else (x * w + 1, (x * w).sum())


def runner_for(wrapper, **kw):
    r = CudaGraphRunner(wrapper, n_state=1, **kw)
    r.device_type = "cpu"
    real_record = r._record

    def record(key, inputs):  # the fake graph replays by running the wrapper into the static results
        rec = real_record(key, inputs)
        if rec is not None:
            def replay():
                for dst, src in zip(rec.static_results, wrapper(*rec.static_inputs)):
                    dst.copy_(src)
            rec.graph.replay_fn = replay
        return rec

    r._record = record
    return r


def check(runner, x, w):
    got = runner(x, w)
    torch.testing.assert_close(got[0], x * w + 1)
    torch.testing.assert_close(got[1], (x * w).sum())
    return got


def test_warm_up_record_then_replay_with_new_values(fake_cuda):
    wrapper, w = Wrapper(), torch.randn(8)
    runner = runner_for(wrapper)
    check(runner, torch.randn(8), w)  # warm-up: plain run
    assert not runner.recordings
    check(runner, torch.randn(8), w)  # recorded, replayed
    assert len(runner.recordings) == 1 and runner.replays == 1
    rec = next(iter(runner.recordings.values()))
    first = check(runner, torch.randn(8), w)
    second = check(runner, torch.randn(8), w)
    assert runner.replays == 3
    assert first[0].data_ptr() != rec.static_results[0].data_ptr()  # callers get copies
    assert not torch.equal(first[0], second[0])


def test_parameter_moved_re_records_and_new_shapes_least_recent_dropped(fake_cuda):
    wrapper = Wrapper()
    runner = runner_for(wrapper, max_graphs=2)
    w = torch.randn(8)
    for _ in range(3):
        check(runner, torch.randn(8), w)
    w2 = w.clone()  # same signature, parameter at another address: recorded again
    check(runner, torch.randn(8), w2)
    assert len(runner.recordings) == 1 and runner.recordings[next(iter(runner.recordings))].state_ptrs == [w2.data_ptr()]
    for n in (4, 4, 4):
        check(runner, torch.randn(n), torch.randn(n))
    assert len(runner.recordings) == 2
    for n in (5,) * 4:  # full: size 5 runs plainly until it is called more often than size 8 (4 calls)
        check(runner, torch.randn(n), torch.randn(n))
    assert [k[0][0] for k in runner.recordings] == [(8,), (4,)] and runner.not_admitted == 3
    check(runner, torch.randn(5), torch.randn(5))  # its 5th call: the least recently used (size 8) goes
    assert len(runner.recordings) == 2
    assert [k[0][0] for k in runner.recordings] == [(4,), (5,)]
    assert runner.evicted == 1 and "least recently used dropped: 1" in runner.explain()
    assert "recording time per new shape" in runner.explain() and "rarer than every kept one" in runner.explain()
    for n in (4,) + (6,) * 6:  # size 4 replayed: it is the most recent now, so size 5 is dropped for 6
        check(runner, torch.randn(n), torch.randn(n))
    assert [k[0][0] for k in runner.recordings] == [(4,), (6,)]


def test_more_shapes_than_room_in_a_cycle_keep_their_recordings(fake_cuda):
    """Sequence lengths cycling over more shapes than recordings: pure LRU recorded every call again
    (each recording evicted before its shape came back); the kept ones stay and the rest run plainly."""
    runner = runner_for(Wrapper(), max_graphs=3)
    weights = {n: torch.randn(n) for n in (3, 4, 5, 6, 7, 9)}  # (state: at the same address every call)
    for _ in range(4):
        for n, w in weights.items():
            check(runner, torch.randn(n), w)
    assert len(runner.record_seconds) == 3 and runner.evicted == 0
    assert runner.replays == 3 * 3  # the three kept shapes, from the round that recorded them (it replays too)


def test_not_used_for_cpu_inputs_expanded_inputs_failures_and_aliases(fake_cuda):
    runner = CudaGraphRunner(Wrapper(), n_state=1)  # device_type "cuda": CPU inputs decline
    for _ in range(3):
        check(runner, torch.randn(8), torch.randn(8))
    assert not runner.recordings and "CUDA graphs need every input on the GPU" in runner.explain()

    runner = runner_for(Wrapper())
    for _ in range(3):
        check(runner, torch.randn(1).expand(8), torch.randn(8))
    assert "overlapping" in runner.explain()

    failing = Wrapper()
    runner = runner_for(failing)
    check(runner, torch.randn(8), torch.randn(8))
    failing.fail = True
    with pytest.raises(RuntimeError):  # the failure is not the capture's: the plain run raises it too
        runner(torch.randn(8), torch.randn(8))
    assert "recording the CUDA graph failed (RuntimeError" in runner.explain()

    runner = runner_for(Wrapper(alias=True))
    x = torch.randn(8)
    for _ in range(3):
        (out,) = runner(x, torch.randn(8))
    assert out.data_ptr() == x.data_ptr() and "shares memory with a graph input" in runner.explain()


def test_expanded_result_is_copied_with_its_strides():
    from kiln.codegen.cudagraphs import _copy

    r = torch.randn(3, 1).expand(3, 4)[1:]
    c = _copy(r)
    assert c.stride() == r.stride() and c.storage_offset() == r.storage_offset() and torch.equal(c, r)
    assert c.untyped_storage().data_ptr() != r.untyped_storage().data_ptr()


def test_reduce_overhead_mode_turns_on_cudagraphs():
    f = kiln.compile(lambda x: x + 1, mode="reduce-overhead")
    assert f._kiln_config.options.cudagraphs
    assert not kiln.compile(lambda x: x + 1)._kiln_config.options.cudagraphs
    # CPU tensors: no CUDA graphs, same results
    x = torch.randn(4)
    torch.testing.assert_close(f(x), x + 1)


def test_a_runner_whose_wrapper_ran_already_records_on_its_first_call(fake_cuda):
    wrapper, w = Wrapper(), torch.randn(8)
    runner = runner_for(wrapper, warmed_up=True)
    check(runner, torch.randn(8), w)  # recorded at once (the speed trial's runner: the code ran in call 1)
    assert len(runner.recordings) == 1 and runner.replays == 1
    check(runner, torch.randn(4), w[:4])  # another signature: a plain run first, as always
    assert len(runner.recordings) == 1


def test_only_the_recording_thread_replays(fake_cuda):
    """Replays share the recording's static buffers: another thread calling at the same time would copy
    its inputs over the first one's, so it runs the code plainly."""
    import threading

    wrapper, w = Wrapper(), torch.randn(8)
    runner = runner_for(wrapper)
    check(runner, torch.randn(8), w)
    check(runner, torch.randn(8), w)  # recorded here
    assert runner.replays == 1
    done = []
    thread = threading.Thread(target=lambda: done.append(check(runner, torch.randn(8), w)))
    thread.start()
    thread.join()
    assert done and runner.replays == 1 and runner.other_callers == 1
    check(runner, torch.randn(8), w)
    assert runner.replays == 2
    assert "another thread" in runner.explain()
