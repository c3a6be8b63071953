"""benchmarks/cpu_models.py (issue 19's models on the CPU) and benchmarks/cpu.py --isolate, at the tiny size."""
import os
import subprocess
import sys

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

from cpu import build, check  # noqa: E402
from cpu_models import ISSUE19_CASES, NanoGPT  # noqa: E402


def test_nanogpt_ties_its_head_and_returns_the_last_position():
    m = NanoGPT(n_layer=1, n_head=2, n_embd=16, block_size=32, vocab_size=65).eval()
    assert m.lm_head.weight is m.transformer.wte.weight
    assert m(torch.randint(0, 65, (1, 10))).shape == (1, 1, 65)


@pytest.mark.parametrize("name", ["nanogpt", "hf_llama_gqa"])
def test_issue19_models_compile_and_match_eager(name):
    import kiln

    if name.startswith("hf_"):
        pytest.importorskip("transformers")
    _, f, args, _ = build(name, "tiny")
    with torch.no_grad():
        expected = f(*args)
        assert check(f, args, kiln.compile(f)(*args), expected) is None


def test_every_issue19_case_builds():
    pytest.importorskip("transformers")
    for name in ISSUE19_CASES:
        kind, f, args, desc = build(name, "tiny")
        assert kind == "model" and not f.training and desc


def test_isolate_times_each_compiler_in_its_own_process(tmp_path):
    out = tmp_path / "rows.json"
    done = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "cpu.py"), "--cases", "mlp_b1", "--size", "tiny",
                           "--isolate", "--backends", "eager,kiln", "--iters", "2", "--min-time", "0", "--threads", "1",
                           "--no-compile-time", "--json", str(out)],
                          env=dict(os.environ, PYTHONPATH=ROOT), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    import json

    row = json.loads(out.read_text())["rows"][0]
    assert set(row["ms"]) == {"eager", "kiln"} and set(row["eager_ms_by"]) == {"kiln"}, row
    assert "isolated" in done.stdout
