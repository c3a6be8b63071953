"""Graphs, graph breaks (with reasons) and recompiles of HF models, torch.nn's transformer layers (eval, no
grad: their fused fast paths) and a training loop under kiln.

    PYTHONPATH=$PWD python benchmarks/capture_breaks.py [bert gpt2 t5 llama tlayer tencoder mha train] [--reasons]

For each case the compiled function is called 3 times on the same inputs with a counting backend
(runs each graph as it is): graphs = FX graphs handed to the backend over the 3 calls, recompiles =
kiln.stats recompilations (a cache miss on a code object that already had an entry), breaks = graph
breaks recorded over the 3 calls (each frame compiled with a break counts once), eager = frames that
ran eagerly. Results are checked against eager. --reasons prints every break/eager reason and the guard
that failed for each recompile.
"""
from __future__ import annotations

import argparse
import collections
import contextlib
import io
import os
import sys
import warnings

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import kiln  # noqa: E402
from kiln.api import config_of  # noqa: E402
from kiln.debug.stats import stats  # noqa: E402


class Counter:
    def __init__(self):
        self.graphs = 0
        self.after_first = (0, 0)  # (recompiles, graphs) after the first call

    def __call__(self, gm, example_inputs):
        self.graphs += 1
        return gm.forward


def _models():
    import transformers

    def bert():
        config = transformers.BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                         intermediate_size=64, max_position_embeddings=64)
        ids = torch.randint(0, 100, (2, 8))
        return transformers.BertModel(config), dict(input_ids=ids, attention_mask=torch.ones(2, 8, dtype=torch.long))

    def gpt2():
        config = transformers.GPT2Config(vocab_size=100, n_embd=32, n_layer=2, n_head=2, n_positions=64)
        return transformers.GPT2Model(config), dict(input_ids=torch.randint(0, 100, (2, 8)))

    def t5():
        config = transformers.T5Config(vocab_size=100, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4,
                                       decoder_start_token_id=0)
        ids = torch.randint(0, 100, (2, 8))
        return transformers.T5Model(config), dict(input_ids=ids, decoder_input_ids=ids[:, :5])

    def llama():
        config = transformers.LlamaConfig(hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                                          num_attention_heads=4, num_key_value_heads=2, vocab_size=1000)
        return transformers.LlamaModel(config), dict(input_ids=torch.randint(0, 1000, (2, 8)))

    def tlayer():  # eval + no_grad: the fused fast path (_transformer_encoder_layer_fwd)
        layer = torch.nn.TransformerEncoderLayer(32, 4, 64, batch_first=True, dropout=0.0)
        return layer, dict(src=torch.randn(2, 8, 32))

    def tencoder():
        layer = torch.nn.TransformerEncoderLayer(32, 4, 64, batch_first=True, dropout=0.0, activation="gelu")
        return torch.nn.TransformerEncoder(layer, 2), dict(src=torch.randn(2, 8, 32))

    def mha():  # eval + no_grad: _native_multi_head_attention
        x = torch.randn(2, 8, 32)
        return torch.nn.MultiheadAttention(32, 4, batch_first=True), dict(query=x, key=x, value=x)

    return {"bert": bert, "gpt2": gpt2, "t5": t5, "llama": llama, "tlayer": tlayer, "tencoder": tencoder, "mha": mha}


def _first(out):
    return out.last_hidden_state if hasattr(out, "last_hidden_state") else out


def run_model(name, make):
    torch.manual_seed(0)
    model, inputs = make()
    model.eval()
    with torch.no_grad():
        expected = _first(model(**inputs))
        counter = Counter()
        compiled = kiln.compile(model, backend=counter)
        for call in range(3):
            torch.testing.assert_close(_first(compiled(**inputs)), expected)
            if call == 0:
                counter.after_first = (sum(stats.recompilations.values()), counter.graphs)
    return counter, config_of(compiled).compiler


def run_training():  # the step number changes every call, as in a real loop
    import transformers

    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=100, n_embd=32, n_layer=2, n_head=2, n_positions=64,
                                     attn_pdrop=0.0, resid_pdrop=0.0, embd_pdrop=0.0)
    model = transformers.GPT2LMHeadModel(config)
    reference = transformers.GPT2LMHeadModel(config)
    reference.load_state_dict(model.state_dict())
    model.train(), reference.train()
    optimizers = {id(model): torch.optim.AdamW(model.parameters(), lr=1e-3),
                  id(reference): torch.optim.AdamW(reference.parameters(), lr=1e-3)}

    def train_step(m, ids, step):
        opt = optimizers[id(m)]
        opt.zero_grad()
        loss = m(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        print(f"step {step} loss {loss.item():.4f}")
        return loss.detach()

    counter = Counter()
    compiled_step = kiln.compile(train_step, backend=counter)
    ids = torch.randint(0, 100, (2, 8))
    for step in range(3):
        with contextlib.redirect_stdout(io.StringIO()):
            got, want = compiled_step(model, ids, step), train_step(reference, ids, step)
        torch.testing.assert_close(got, want)
        if step == 0:
            counter.after_first = (sum(stats.recompilations.values()), counter.graphs)
    return counter, config_of(compiled_step).compiler


def measure(name, show_reasons):
    kiln.reset()
    stats.reset()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if name == "train":
            counter, compiler = run_training()
        else:
            counter, compiler = run_model(name, _models()[name])
    records = compiler.records
    breaks = [r for r in records if r.break_reason is not None]
    eager = [r for r in records if r.fallback_reason is not None]
    recompiles = sum(stats.recompilations.values())
    later = recompiles - counter.after_first[0]
    print(f"{name:6s} graphs {counter.graphs:4d}  breaks {len(breaks):4d}  eager frames {len(eager):3d}  "
          f"recompiles {recompiles:4d} (calls 2-3: {later}, new graphs {counter.graphs - counter.after_first[1]})  "
          f"recompile-limit hits {stats.eager_fallbacks.get('recompile limit', 0)}")
    if show_reasons:
        reasons = collections.Counter(
            f"break: {r.break_reason} @ {os.path.basename(r.fallback_file)}:{r.fallback_line}" for r in breaks)
        reasons.update(f"eager: {r.fallback_reason} @ {os.path.basename(r.fallback_file)}:{r.fallback_line}"
                       for r in eager)
        for reason, n in reasons.most_common():
            print(f"   {n:3d}x {reason}"[:300])
        for guard, n in stats.recompilations.most_common():
            print(f"   {n:3d}x recompile: {guard}"[:300])
        for w in caught:
            if "kiln" in str(w.message):
                print(f"   warning: {w.message}"[:300])


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("cases", nargs="*", default=["bert", "gpt2", "t5", "llama", "tlayer", "tencoder", "mha", "train"])
    parser.add_argument("--reasons", action="store_true")
    args = parser.parse_args()
    os.environ.setdefault("KILN_CACHE_DIR", "/tmp/kiln_capture_breaks_cache")
    for name in args.cases:
        measure(name, args.reasons)


if __name__ == "__main__":
    main()
