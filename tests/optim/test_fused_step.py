"""kiln's fused optimizer step (kiln/optim) against eager's optimizer.step()."""
import copy

import pytest
import torch

import kiln
from kiln.debug.stats import stats
from kiln.optim import fused_step_for, unsupported_reason

OPTIONS = kiln.Options(warm_cache=False, choose_faster=False)

CONFIGS = {
    "adamw": lambda ps: torch.optim.AdamW(ps, lr=1e-2, weight_decay=0.1),
    "adam_amsgrad": lambda ps: torch.optim.Adam(ps, lr=1e-2, weight_decay=0.05, amsgrad=True),
    "adam_maximize": lambda ps: torch.optim.Adam(ps, lr=1e-2, betas=(0.8, 0.9), eps=1e-6, maximize=True),
    "adamw_foreach_off": lambda ps: torch.optim.AdamW(ps, lr=3e-3, foreach=False),
    "sgd": lambda ps: torch.optim.SGD(ps, lr=1e-2),
    "sgd_momentum": lambda ps: torch.optim.SGD(ps, lr=1e-2, momentum=0.9, dampening=0.1, weight_decay=0.01),
    "sgd_nesterov": lambda ps: torch.optim.SGD(ps, lr=1e-2, momentum=0.9, nesterov=True, maximize=True),
}


def _model(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(6, 12), torch.nn.Tanh(), torch.nn.Linear(12, 3))


def _grads(model, seed):
    g = torch.Generator().manual_seed(seed)
    for p in model.parameters():
        p.grad = torch.randn(p.shape, generator=g).to(p.device, p.dtype)


def _same_state(o1, o2):
    s1, s2 = o1.state_dict(), o2.state_dict()
    assert s1["param_groups"] == s2["param_groups"]
    for k, st in s1["state"].items():
        for name, v in st.items():
            torch.testing.assert_close(s2["state"][k][name], v, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_fused_step_matches_eager_with_a_schedule(name):
    m1 = _model()
    m2 = copy.deepcopy(m1)
    o1, o2 = CONFIGS[name](m1.parameters()), CONFIGS[name](m2.parameters())
    s1 = torch.optim.lr_scheduler.StepLR(o1, 1, gamma=0.7)
    s2 = torch.optim.lr_scheduler.StepLR(o2, 1, gamma=0.7)
    stats.reset()
    step = fused_step_for(o2, OPTIONS)
    for i in range(4):
        _grads(m1, i), _grads(m2, i)
        o1.step(), step()
        s1.step(), s2.step()  # no "lr_scheduler.step() before optimizer.step()" warning: step was seen
        for p, q in zip(m1.parameters(), m2.parameters()):
            torch.testing.assert_close(q, p, rtol=1e-5, atol=1e-6)
    _same_state(o1, o2)
    assert stats.optimizer_steps["fused"] >= 3  # the first step of a stateful optimizer runs eagerly
    assert stats.optimizer_graphs == 1  # the learning rate changes every step: no recompile


def test_fused_step_with_triton_kernels():
    pytest.importorskip("triton")
    m1 = _model()
    m2 = copy.deepcopy(m1)
    o1, o2 = CONFIGS["adamw"](m1.parameters()), CONFIGS["adamw"](m2.parameters())
    step = fused_step_for(o2, kiln.Options(warm_cache=False, choose_faster=False, cpu_codegen="triton"))
    for i in range(3):
        _grads(m1, i), _grads(m2, i)
        o1.step(), step()
    assert step.last_reason is None
    for p, q in zip(m1.parameters(), m2.parameters()):
        torch.testing.assert_close(q, p, rtol=1e-5, atol=1e-6)


def test_parameters_without_gradients_and_several_groups():
    m1 = _model()
    m2 = copy.deepcopy(m1)
    groups = lambda m: [{"params": m[0].parameters()}, {"params": m[2].parameters(), "lr": 0.1, "weight_decay": 0}]
    o1, o2 = torch.optim.AdamW(groups(m1), lr=1e-2), torch.optim.AdamW(groups(m2), lr=1e-2)
    step = fused_step_for(o2, OPTIONS)
    for i in range(4):
        _grads(m1, i), _grads(m2, i)
        if i == 2:  # one parameter has no gradient this step: eager skips it
            m1[2].bias.grad = m2[2].bias.grad = None
        o1.step(), step()
        for p, q in zip(m1.parameters(), m2.parameters()):
            torch.testing.assert_close(q, p, rtol=1e-5, atol=1e-6)
    _same_state(o1, o2)


def test_gradient_with_other_strides_gets_its_own_compile():
    m1 = _model()
    m2 = copy.deepcopy(m1)
    o1, o2 = CONFIGS["sgd_momentum"](m1.parameters()), CONFIGS["sgd_momentum"](m2.parameters())
    stats.reset()
    step = fused_step_for(o2, OPTIONS)
    for i in range(5):
        _grads(m1, i), _grads(m2, i)
        if i == 3:
            m2[0].weight.grad = m1[0].weight.grad.t().contiguous().t()  # same values, column-major
        o1.step(), step()
        for p, q in zip(m1.parameters(), m2.parameters()):
            torch.testing.assert_close(q, p, rtol=1e-5, atol=1e-6)
    assert stats.optimizer_graphs == 2  # (row-major again at the last step: the first compile again)


def test_parameters_changed_in_place_recompile():
    m1 = _model()
    m2 = copy.deepcopy(m1)
    o1, o2 = CONFIGS["adamw"](m1.parameters()), CONFIGS["adamw"](m2.parameters())
    step = fused_step_for(o2, OPTIONS)
    for i in range(4):
        if i == 2:  # p.data = p.data.double() on the same parameter objects, and their state
            for m, o in ((m1, o1), (m2, o2)):
                m.double()
                for st in o.state.values():
                    for k in ("exp_avg", "exp_avg_sq"):
                        st[k] = st[k].double()
        _grads(m1, i), _grads(m2, i)
        o1.step(), step()
        assert step.last_reason is None or i == 0
        for p, q in zip(m1.parameters(), m2.parameters()):
            assert q.dtype == p.dtype
            torch.testing.assert_close(q, p, rtol=1e-5, atol=1e-6)


class _MyAdam(torch.optim.Adam):
    pass


@pytest.mark.parametrize("case", ["subclass", "hook", "closure", "tensor_lr", "fused", "replaced"])
def test_what_the_fused_step_leaves_to_eager(case):
    m1 = _model()
    m2 = copy.deepcopy(m1)
    make = {"subclass": lambda ps: _MyAdam(ps, lr=1e-2),
            "tensor_lr": lambda ps: torch.optim.Adam(ps, lr=torch.tensor(1e-2), foreach=False),
            "fused": lambda ps: torch.optim.Adam(ps, lr=1e-2, fused=True)}.get(case, CONFIGS["adamw"])
    o1, o2 = make(m1.parameters()), make(m2.parameters())
    calls = []
    if case == "hook":
        for o in (o1, o2):
            o.register_step_post_hook(lambda opt, args, kwargs: calls.append(1))
    if case == "replaced":
        original = o2.step
        o2.step = lambda closure=None: (calls.append(1), original(closure))[1]
    step = fused_step_for(o2, OPTIONS)
    for i in range(3):
        _grads(m1, i), _grads(m2, i)
        if case == "closure":
            assert o1.step(lambda: 1.0) == step(lambda: 1.0) == 1.0
        else:
            o1.step(), step()
        assert step.last_reason is not None
        for p, q in zip(m1.parameters(), m2.parameters()):
            torch.testing.assert_close(q, p)
    if case == "hook":
        assert len(calls) == 6
    if case == "replaced":
        assert len(calls) == 3 and "replaced" in unsupported_reason(o2)


def test_step_in_a_compiled_training_function():
    m1 = _model()
    m2 = copy.deepcopy(m1)
    o1, o2 = CONFIGS["adamw"](m1.parameters()), CONFIGS["adamw"](m2.parameters())

    def train_step(model, opt, x):
        opt.zero_grad()
        loss = model(x).pow(2).mean()
        loss.backward()
        opt.step()
        return loss.detach()

    kiln.reset()
    stats.reset()
    compiled = kiln.compile(train_step, options=OPTIONS)
    for i in range(4):
        x = torch.randn(5, 6)
        torch.testing.assert_close(compiled(m2, o2, x), train_step(m1, o1, x))
        for p, q in zip(m1.parameters(), m2.parameters()):
            torch.testing.assert_close(q, p, rtol=1e-5, atol=1e-6)
    assert stats.optimizer_steps["fused"] == 3
    report = str(kiln.explain(compiled)(m2, o2, torch.randn(5, 6)))
    assert "AdamW.step() runs between graphs, as kiln's fused optimizer step" in report


def test_step_of_a_global_optimizer_in_a_compiled_function():
    m1 = _model()
    m2 = copy.deepcopy(m1)
    o1 = CONFIGS["sgd"](m1.parameters())
    global OPT
    OPT = CONFIGS["sgd"](m2.parameters())

    def do_step():
        OPT.step()

    kiln.reset()
    stats.reset()
    compiled = kiln.compile(do_step, options=OPTIONS)
    for i in range(2):
        _grads(m1, i), _grads(m2, i)
        o1.step(), compiled()
    for p, q in zip(m1.parameters(), m2.parameters()):
        torch.testing.assert_close(q, p)
    assert stats.optimizer_steps["fused"] == 2


def test_compile_of_optimizer_step_and_other_backends():
    m = _model()
    opt = CONFIGS["adamw"](m.parameters())
    assert kiln.compile(opt.step, options=OPTIONS) is fused_step_for(opt, OPTIONS)
    assert not isinstance(kiln.compile(opt.step, backend="eager"), type(fused_step_for(opt)))

    def train_step(model, opt, x):
        model(x).sum().backward()
        opt.step()

    kiln.reset()
    stats.reset()
    kiln.compile(train_step, backend="eager")(m, opt, torch.randn(2, 6))
    assert not stats.optimizer_steps  # backend "eager": eager's step, as written


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("name", ["adamw", "sgd_momentum"])
def test_fused_step_on_the_gpu_matches_eager_foreach(name, dtype):
    m1 = _model().to("cuda", dtype)
    m2 = copy.deepcopy(m1)
    o1, o2 = CONFIGS[name](m1.parameters()), CONFIGS[name](m2.parameters())
    step = fused_step_for(o2, OPTIONS.replace(fused_optimizer="all"))
    tol = dict(rtol=1e-5, atol=1e-6) if dtype == torch.float32 else dict(rtol=2e-2, atol=1e-2)
    for i in range(4):
        _grads(m1, i), _grads(m2, i)
        o1.step(), step()
        for p, q in zip(m1.parameters(), m2.parameters()):
            torch.testing.assert_close(q, p, **tol)
    assert step.last_reason is None


def test_option_keeps_eager_step():
    m = _model()
    opt = CONFIGS["sgd"](m.parameters())
    _grads(m, 0)
    step = fused_step_for(opt, OPTIONS.replace(fused_optimizer="off"))
    step()
    assert "fused_optimizer" in step.last_reason


@pytest.mark.parametrize("cpu_codegen", ["cpp", "triton"])
def test_every_update_is_stored_in_place(cpu_codegen):
    """Parameters of GPT-2-like shapes: the scheduler fuses updates over shared outer loops and splits
    some buffers' loops ([32, 128] as [32, 32, 4]); every new value still goes straight into its tensor."""
    if cpu_codegen == "triton":
        pytest.importorskip("triton")
    shapes = [(32, 32), (32, 128), (128, 32), (32,), (128,), (100, 32), (32, 96), (96,)]
    params = [torch.nn.Parameter(torch.randn(s)) for s in shapes]
    opt = torch.optim.AdamW(params, lr=1e-3)
    _grads_of(params, 0)
    opt.step()
    kiln.reset()
    stats.reset()
    step = fused_step_for(opt, kiln.Options(warm_cache=False, choose_faster=False, cpu_codegen=cpu_codegen))
    _grads_of(params, 1)
    step()
    assert step.last_reason is None
    assert stats.inplace_stores == 3 * len(params)


def _grads_of(params, seed):
    g = torch.Generator().manual_seed(seed)
    for p in params:
        p.grad = torch.randn(p.shape, generator=g)


def test_many_small_parameters_split_into_kernels_of_bounded_size():
    """300 parameters of one shape: one kernel would take 1200 buffers (ctypes calls take at most 1024
    arguments); the scheduler caps a kernel's buffers (schedule/scheduler.MAX_KERNEL_BUFFERS)."""
    params = [torch.nn.Parameter(torch.randn(4)) for _ in range(300)]
    ref = [torch.nn.Parameter(p.detach().clone()) for p in params]
    opt, opt_ref = torch.optim.AdamW(params, lr=1e-2), torch.optim.AdamW(ref, lr=1e-2)
    kiln.reset()
    stats.reset()
    step = fused_step_for(opt, OPTIONS)
    for i in range(3):
        _grads_of(params, i), _grads_of(ref, i)
        step(), opt_ref.step()
    assert step.last_reason is None and stats.kernels_generated > 1
    for p, q in zip(params, ref):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)


def test_a_group_without_state_falls_back_without_advancing_the_others():
    """A group added after some steps has no state yet: eager's step runs for all groups, and the
    other groups' step counters advance once, as in eager (not also by the fused step's bookkeeping)."""
    m1 = _model()
    m2 = copy.deepcopy(m1)
    o1, o2 = torch.optim.AdamW(m1[0].parameters(), lr=1e-2), torch.optim.AdamW(m2[0].parameters(), lr=1e-2)
    step = fused_step_for(o2, OPTIONS)
    for i in range(4):
        if i == 2:
            o1.add_param_group({"params": m1[2].parameters()})
            o2.add_param_group({"params": m2[2].parameters()})
        _grads(m1, i), _grads(m2, i)
        o1.step(), step()
        for p, q in zip(m1.parameters(), m2.parameters()):
            torch.testing.assert_close(q, p, rtol=1e-5, atol=1e-6)
    _same_state(o1, o2)
