"""Training- and evaluation-style code compiled as one function: forward, loss, backward,
optimizer.step, a logging print of loss.item(). The model and optimizer persist across calls (one
copy per side); parameters, optimizer state and printed losses must match eager after every call.

Graph counts here are ranges: how many graphs the optimizer's own code gives depends on how much of
torch.optim kiln traces (dynamo traces it whole; its exact counts are given as dynamo_graphs; kiln
may run optimizer.step() eagerly, as a break, so that the forward + loss graph and the graph after
the step are all there is: 2).
Where a break sits inside a loop, dynamo runs that frame unsplit (small dynamo counts)."""
import torch
import torch.nn as nn

from .support import check_breaks, t


def _mlp(seed=0):
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 2))


def _batch(seed, n=6):
    return t(n, 4, seed=seed), t(n, 2, seed=seed + 100)


def test_train_step_sgd_with_print():
    model = _mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def train_step(model, opt, x, y):
        opt.zero_grad()
        out = model(x)
        loss = nn.functional.mse_loss(out, y)
        loss.backward()
        opt.step()
        print(f"loss {loss.item():.6f}")
        return loss.detach()

    # dynamo: 3 graphs (zero_grad + forward + loss | optimizer step | loss.item()), 2 breaks
    check_breaks(train_step, model, opt, *_batch(0), graphs=tuple(range(2, 9)), breaks=tuple(range(2, 9)),
                 calls=3, inputs_mutated=True, rtol=1e-5, atol=1e-6, dynamo_graphs=3, dynamo_breaks=2)


def test_train_step_adam_with_grad_clipping_and_logging():
    model = _mlp(1)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)

    def train_step(model, opt, x, y):
        out = model(x)
        loss = (out - y).abs().mean()
        loss.backward()
        total_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        print("loss", round(loss.item(), 5), "grad norm", round(total_norm.item(), 5))
        return loss.detach()

    # Adam creates its state on the first step: the second call may compile again (stable_after=1).
    # dynamo: 4 graphs on the first call, 6 from the second on; explain (first call) 3 breaks.
    check_breaks(train_step, model, opt, *_batch(1), graphs=tuple(range(2, 13)), breaks=tuple(range(2, 13)),
                 calls=3, inputs_mutated=True, rtol=1e-5, atol=1e-6, stable_after=1, dynamo_graphs=6,
                 dynamo_breaks=3)


def test_training_loop_over_batches_in_one_function():
    model = _mlp(2)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    batches = [_batch(s, n=4) for s in range(3)]

    def train(model, opt, batches):
        losses = []
        for step, (x, y) in enumerate(batches):
            opt.zero_grad()
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            losses.append(loss.item())
            if step % 2 == 0:
                print(f"step {step} loss {losses[-1]:.5f}")
        return losses

    # dynamo: 2 graphs (train unsplit: breaks inside its loop; forward + loss, the optimizer step)
    check_breaks(train, model, opt, batches, graphs=tuple(range(2, 14)), breaks=tuple(range(1, 14)),
                 inputs_mutated=True, rtol=1e-5, atol=1e-6, dynamo_graphs=2, dynamo_breaks=1)


def test_gradient_accumulation_step_on_python_counter():
    model = _mlp(3)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def train(model, opt, batches, accum):
        for i, (x, y) in enumerate(batches):
            loss = nn.functional.mse_loss(model(x), y) / accum
            loss.backward()
            if (i + 1) % accum == 0:
                opt.step()
                opt.zero_grad()
                print("optimizer step after batch", i)
        return loss.detach()

    batches = [_batch(s, n=3) for s in range(4)]
    # dynamo: 1 graph (train unsplit; the model's forward)
    check_breaks(train, model, opt, batches, 2, graphs=tuple(range(2, 14)), breaks=tuple(range(1, 14)),
                 inputs_mutated=True, rtol=1e-5, atol=1e-6, dynamo_graphs=1, dynamo_breaks=0)


def test_eval_loop_accuracy_with_item_accumulation():
    model = _mlp(4)
    model.eval()
    batches = [_batch(s, n=5) for s in range(3)]

    def evaluate(model, batches):
        correct = 0
        total = 0
        with torch.no_grad():
            for x, y in batches:
                pred = model(x).argmax(-1)
                correct += (pred == y.argmax(-1)).sum().item()
                total += y.shape[0]
        acc = correct / total
        print(f"accuracy {acc:.3f}")
        return acc

    # dynamo: 0 graphs (evaluate unsplit: a break inside its loop; Sequential's frames are torch's)
    check_breaks(evaluate, model, batches, graphs=tuple(range(2, 6)), breaks=tuple(range(1, 6)),
                 dynamo_graphs=0, dynamo_breaks=-1)


class _EarlyExit(nn.Module):
    """Adaptive depth: stop running blocks once the activation is small."""

    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([nn.Linear(4, 4) for _ in range(4)])

    def forward(self, x, thresh: float):
        for i, blk in enumerate(self.blocks):
            x = torch.tanh(blk(x)) * 0.5
            if x.norm() < thresh:
                return x, i
        return x, len(self.blocks)


def test_early_exit_model_both_ways():
    torch.manual_seed(0)
    # dynamo: 5 graphs (forward unsplit: a break inside its loop; one per nn.Linear frame and shape)
    check_breaks(_EarlyExit(), arg_sets=[(t(2, 4), 100.0), (t(2, 4), 1e-6)], graphs=tuple(range(2, 12)),
                 breaks=tuple(range(1, 6)), dynamo_graphs=5, dynamo_breaks=0)


class _ClipIfExploding(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        h = self.lin(x)
        if self.training and h.abs().max() > 5:
            h = h.clamp(-5, 5)
        return h.relu()


def test_train_mode_data_dependent_clip_and_eval_mode():
    torch.manual_seed(0)
    model = _ClipIfExploding()

    def fn(model, x, train):
        model.train(train)
        return model(x)

    check_breaks(fn, arg_sets=[(model, t(2, 4) * 10, True), (model, t(2, 4) * 10, False),
                               (model, t(2, 4) * 0.01, True)], graphs=4, breaks=2,
                dynamo_breaks=1)
