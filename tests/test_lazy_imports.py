"""Import costs (kiln/lazy.py): ``import kiln`` and a static-shape warm start import neither sympy nor
kiln's lowering, scheduling and code generation; each check runs in a fresh process."""
import json
import os
import subprocess
import sys
import textwrap

import pytest

from kiln.lazy import LazyModule

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COMPILER_MODULES = ("kiln.lower", "kiln.schedule", "kiln.loopir", "kiln.codegen.cpp.kernel", "kiln.codegen.wrapper")
PREFIXES = tuple(p + "." for p in COMPILER_MODULES)  # (a module or its submodules)

_BLOCK = textwrap.dedent("""
    import json, os, sys
    import torch

    class Block(torch.nn.Module):
        def __init__(self, d=16):
            super().__init__()
            self.ln, self.qkv, self.out = torch.nn.LayerNorm(d), torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
            self.mlp = torch.nn.Sequential(torch.nn.Linear(d, 2 * d), torch.nn.GELU(), torch.nn.Linear(2 * d, d))

        def forward(self, x):
            q, k, v = self.qkv(self.ln(x)).chunk(3, dim=-1)
            x = x + self.out(torch.softmax(q @ k.transpose(-1, -2) * 0.25, dim=-1) @ v)
            return x + self.mlp(x)

    torch.manual_seed(0)
    model, x = Block().eval(), torch.randn(2, 4, 16)
    import kiln
    with torch.no_grad():
        out = kiln.compile(model)(x)
        ok = torch.allclose(out, model(x), atol=1e-5)
    print(json.dumps({"ok": ok, "warm_cache": dict(kiln.stats.warm_cache), "sympy": "sympy" in sys.modules,
                      "dynamo": "torch._dynamo" in sys.modules,
                      "compiler": sorted(m for m in sys.modules if (m + ".").startswith(%r))}))
""" % (PREFIXES,))


def _run(script: str, **env) -> dict:
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""), **env)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_import_kiln_imports_no_sympy_and_no_compiler_stages():
    got = _run("import json, sys, torch\nimport kiln\n"
               "print(json.dumps({'sympy': 'sympy' in sys.modules, "
               f"'compiler': sorted(m for m in sys.modules if (m + '.').startswith({PREFIXES!r}))}}))")
    assert got == {"sympy": False, "compiler": []}


def test_static_warm_load_imports_no_sympy(tmp_path):
    env = {"KILN_CACHE_DIR": str(tmp_path), "KILN_WARM_CACHE": "1", "KILN_CHOOSE_FASTER": "0"}
    cold = _run(_BLOCK, **env)
    assert cold["ok"] and cold["warm_cache"].get("stored") == 1
    warm = _run(_BLOCK, **env)
    assert warm["ok"] and warm["warm_cache"] == {"hits": 1}
    assert not warm["sympy"], "a static warm load imported sympy"
    assert not warm["dynamo"], "capture ran a meta kernel that imports torch._dynamo (see kiln/fake/fast_meta.py)"
    assert warm["compiler"] == []


def test_lazy_module_imports_at_first_read_and_keeps_attributes():
    lazy = LazyModule("json")
    assert "dumps" not in vars(lazy)
    assert lazy.dumps([1]) == "[1]" and "dumps" in vars(lazy)  # kept: later reads are plain
    with pytest.raises(AttributeError):
        lazy.no_such_attribute
    unkept = LazyModule("json", keep=False)
    assert unkept.loads("2") == 2 and "loads" not in vars(unkept)
