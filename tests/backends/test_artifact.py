"""kiln.save / kiln.load (kiln/artifact.py): one file carries the generated code to a new process;
a damaged, stale or mismatched file is refused with a warning and kiln compiles instead."""
import os
import shutil
import subprocess
import sys
import textwrap

import pytest
import torch

import kiln
from kiln.artifact import ARTIFACT_MAGIC, ArtifactWarning
from kiln.backends import warm_cache

_MODEL = """
import torch, kiln
torch.manual_seed(0)
class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Linear(8, 16), torch.nn.Linear(16, 8)
        self.norm = torch.nn.LayerNorm(8)
    def forward(self, x):
        return self.norm(x + self.b(torch.nn.functional.gelu(self.a(x))))
m = Block().eval()
x = torch.randn(3, 8)
"""


def _run(code: str, tmp_path) -> str:
    env = {**os.environ, "PYTHONPATH": os.path.dirname(os.path.dirname(kiln.__file__)),
           "KILN_CACHE_DIR": str(tmp_path / "cache-of-this-process"), "KILN_WARM_CACHE": "0"}
    done = subprocess.run([sys.executable, "-c", _MODEL + textwrap.dedent(code)], capture_output=True, text=True,
                          env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture
def fresh(tmp_path):
    warm_cache.ENTRIES.clear()
    kiln.reset()
    kiln.stats.reset()
    yield kiln.Options(cache_dir=str(tmp_path / "cache"), warm_cache=True)
    warm_cache.ENTRIES.clear()


def test_artifact_round_trip_across_processes(tmp_path):
    path = str(tmp_path / "block.kiln")
    saved = _run(f"""
        with torch.no_grad():
            c = kiln.compile(m, options={{"warm_cache": True}})
            torch.testing.assert_close(c(x), m(x))
        print("saved", kiln.save(c, {path!r}))
    """, tmp_path)
    assert "saved 1" in saved
    # a new process with an empty cache directory of its own: nothing is traced, lowered or built
    loaded = _run(f"""
        import shutil
        shutil.rmtree(kiln.Options.from_any(None).cache_dir, ignore_errors=True)
        with torch.no_grad():
            c = kiln.load({path!r}, m)
            torch.testing.assert_close(c(x), m(x))
        print(dict(kiln.stats.warm_cache), sorted(kiln.stats.stages), kiln.stats.kernel_compiles)
    """, tmp_path)
    assert "'hits': 1" in loaded and "'lower'" not in loaded and "'cpp_compile'" not in loaded, loaded


def _save(fresh, tmp_path):
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Tanh()).eval()
    x = torch.randn(2, 4)
    with torch.no_grad():
        c = kiln.compile(m, options=fresh)
        c(x)
    path = str(tmp_path / "m.kiln")
    assert kiln.save(c, path) == 1
    shutil.rmtree(fresh.cache_dir)  # only the file is left
    from kiln.codegen.cpp import build

    build._LOADED.clear()
    warm_cache.ENTRIES.clear()
    kiln.reset()
    kiln.stats.reset()
    return m, x, path


@pytest.mark.parametrize("damage", ["random bytes", "truncated", "empty", "missing"])
def test_damaged_artifact_is_refused_and_kiln_compiles(fresh, tmp_path, damage):
    m, x, path = _save(fresh, tmp_path)
    blob = open(path, "rb").read()
    if damage == "missing":
        os.unlink(path)
    else:
        blob = {"random bytes": os.urandom(len(blob)), "truncated": blob[: len(blob) - 7], "empty": b""}[damage]
        with open(path, "wb") as f:
            f.write(blob)
    with pytest.warns(ArtifactWarning, match="not used"):
        c = kiln.load(path, m, options=fresh)
    with torch.no_grad():
        torch.testing.assert_close(c(x), m(x))
    assert kiln.stats.warm_cache["hits"] == 0
    with pytest.raises(ValueError, match="not used"):
        kiln.load(path, m, options=fresh, strict=True)


def _rewrite(path, change):
    payload = warm_cache.decode(open(path, "rb").read(), ARTIFACT_MAGIC)
    change(payload)
    with open(path, "wb") as f:
        f.write(warm_cache.encode(payload, ARTIFACT_MAGIC))


def test_stale_artifact_says_what_differs(fresh, tmp_path):
    m, x, path = _save(fresh, tmp_path)
    _rewrite(path, lambda p: p["environment"][0][2].update(torch="1.0", kiln="old"))
    with pytest.warns(ArtifactWarning, match=r"another environment: kiln 'old'.*torch '1.0' \(here"):
        c = kiln.load(path, m, options=fresh)
    with torch.no_grad():
        torch.testing.assert_close(c(x), m(x))
    assert kiln.stats.warm_cache["hits"] == 0


def test_artifact_with_other_options_is_refused(fresh, tmp_path):
    m, x, path = _save(fresh, tmp_path)
    with pytest.warns(ArtifactWarning, match="other options: fusion=True"):
        kiln.load(path, m, options=fresh.replace(fusion=False))


def test_artifact_for_other_shapes_compiles(fresh, tmp_path):
    m, x, path = _save(fresh, tmp_path)
    c = kiln.load(path, m, options=fresh)
    with torch.no_grad():
        torch.testing.assert_close(c(x), m(x))  # the shape it was saved for comes from the file
        assert kiln.stats.warm_cache["hits"] == 1
        y = torch.randn(5, 4)  # the file has no code for this shape: kiln compiles
        torch.testing.assert_close(c(y), m(y))
        assert kiln.stats.warm_cache["hits"] == 1 and kiln.stats.frames_compiled == 2


def test_save_refuses_what_it_cannot_save(fresh):
    with pytest.raises(TypeError, match="what kiln.compile returned"):
        kiln.save(lambda x: x, "/nonexistent")
    c = kiln.compile(lambda x: x + 1, options=fresh)
    with pytest.raises(ValueError, match="nothing was compiled yet"):
        kiln.save(c, "/nonexistent")


def test_artifact_with_triton_kernels(fresh, tmp_path):
    from kiln.codegen.triton.runtime import triton_available

    if triton_available() is not None:
        pytest.skip(triton_available())
    fresh = fresh.replace(cpu_codegen="triton")  # Triton kernels run by Triton's interpreter on CPU tensors
    m, x, path = _save(fresh, tmp_path)
    c = kiln.load(path, m, options=fresh, strict=True)
    with torch.no_grad():
        torch.testing.assert_close(c(x), m(x))
    assert kiln.stats.warm_cache["hits"] == 1 and "lower" not in kiln.stats.stages


def test_tune_choices_travel_with_the_artifact(tmp_path):
    pytest.importorskip("triton")
    from kiln.artifact import _install_tune_choices, _tune_choices, _tune_path

    here, there = kiln.Options(cache_dir=str(tmp_path / "a")), kiln.Options(cache_dir=str(tmp_path / "b"))
    source = "# a Triton module\n"
    entry = {"target": "triton", "graphs": [{"library_source": source}]}
    os.makedirs(os.path.dirname(_tune_path(source, here)))
    with open(_tune_path(source, here), "w") as f:
        f.write('{"triton_k_0": [128, 0, 4, 2]}')
    choices = _tune_choices([entry, {"target": "cpp"}], here)
    assert choices == {source: {"triton_k_0": [128, 0, 4, 2]}}
    _install_tune_choices(choices, there)
    with open(_tune_path(source, there)) as f:
        assert f.read() == '{"triton_k_0": [128, 0, 4, 2]}'
    with open(_tune_path(source, there), "w") as f:
        f.write("{}")  # this machine's own choices are kept
    _install_tune_choices(choices, there)
    assert open(_tune_path(source, there)).read() == "{}"
