"""The kernel caches survive damaged entries: a truncated, overwritten or half-written file costs one
rebuild, never a failed compile or wrong code."""
import json
import os

import pytest
import torch

from kiln.codegen.cpp import build
from kiln.codegen.triton import launch, runtime
from kiln.options import default_options

_SOURCE = 'extern "C" int kiln_cache_probe(int x) { return x * 3 + %d; }\n'


@pytest.fixture
def options(tmp_path):
    return default_options().replace(cache_dir=str(tmp_path))


def _load_fresh(source, options):
    build._LOADED.clear()
    return build.load_library(source, options)


def _build_only(source, options):
    """Put ``source``'s library in the cache without loading it (a library loaded in this process must not
    be overwritten in place: its pages are mapped; damage happens between processes in real life)."""
    path = build.library_path(source, options)
    build._compile(source, path, options, "C++ kernels")
    return path


@pytest.mark.parametrize("damage", ["random bytes", "empty", "checksum missing", "elf header kept"])
def test_damaged_cpp_library_is_rebuilt(options, damage):
    source = _SOURCE % len(damage)
    path = _build_only(source, options)
    with open(path, "rb") as f:
        good = f.read()
    if damage == "random bytes":
        data = os.urandom(len(good))
    elif damage == "empty":
        data = b""
    elif damage == "elf header kept":  # loads fine, but its code is not what was compiled
        data = good[:64] + bytes(len(good) - 64)
    else:
        data = good
        os.unlink(path + ".sha256")
    with open(path, "wb") as f:
        f.write(data)
    compiles = build.stats.kernel_compiles
    assert _load_fresh(source, options).kiln_cache_probe(2) == 6 + len(damage)
    assert build.stats.kernel_compiles == compiles + 1
    assert build._intact(path)


def test_intact_cpp_library_is_a_cache_hit(options):
    source = _SOURCE % 99
    _build_only(source, options)
    compiles, hits = build.stats.kernel_compiles, build.stats.kernel_cache_hits
    assert _load_fresh(source, options).kiln_cache_probe(1) == 102
    assert build.stats.kernel_compiles == compiles and build.stats.kernel_cache_hits == hits + 1


def test_compiled_graph_after_cache_damage_gives_eager_result(tmp_path, monkeypatch):
    """End to end: every cached library of a compiled function overwritten; a new compile still works."""
    import kiln

    monkeypatch.setenv("KILN_CACHE_DIR", str(tmp_path))

    def fn(x):
        return (x.sin() + 1).relu() * x.cos()

    import subprocess
    import sys
    import textwrap

    first = textwrap.dedent(f"""
        import torch, kiln
        def fn(x):
            return (x.sin() + 1).relu() * x.cos()
        x = torch.randn(33)
        torch.testing.assert_close(kiln.compile(fn, options={{"cache_dir": {str(tmp_path)!r}}})(x), fn(x))
    """)
    done = subprocess.run([sys.executable, "-c", first], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    x = torch.randn(33)
    libraries = [os.path.join(d, f) for d, _, fs in os.walk(tmp_path) for f in fs if f.endswith(".so")]
    assert libraries
    for path in libraries:
        with open(path, "wb") as f:
            f.write(b"\x7fELF" + os.urandom(100))
    build._LOADED.clear()
    kiln.reset()
    torch.testing.assert_close(kiln.compile(fn, options={"cache_dir": str(tmp_path)})(x), fn(x))


def test_damaged_triton_source_is_rewritten(options):
    pytest.importorskip("triton")
    source = runtime.MODULE_HEADER + "VALUE = 7\n"
    path = runtime.module_path(source, options)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write("VALUE = ")  # truncated by an interrupted process
    runtime._LOADED.clear()
    ns, _, fresh = runtime.load_module(source, options, interpret=True)
    assert ns["VALUE"] == 7 and fresh


@pytest.mark.parametrize("content", ["{not json", "[1, 2]", '{"k": [1]}', '{"k": "x"}'])
def test_damaged_tune_file_is_ignored(tmp_path, content):
    path = str(tmp_path / "kernels.py.tune.json")
    with open(path, "w") as f:
        f.write(content)
    configs = [launch.LaunchConfig(128, 0, 4)]
    assert launch._saved_choice(path, "k", configs) is None
    launch._save_raw(path, "k", [128, 0, 4])
    assert launch._saved_choice(path, "k", configs) == configs[0]
    with open(path) as f:
        assert json.load(f)["k"] == [128, 0, 4]


def test_tune_file_in_unwritable_place_is_not_an_error(tmp_path):
    launch._save_raw(str(tmp_path / "missing-dir" / "x.tune.json"), "k", [1, 0, 1])  # no exception


def test_processes_building_the_same_library_at_once(options):
    """Four processes build one library into an empty cache together: each loads a working library and
    the entry left behind is intact (or, if two writes interleaved, rebuilt once by the next process)."""
    import subprocess
    import sys
    import textwrap

    source = _SOURCE % 1234
    script = textwrap.dedent(f"""
        from kiln.codegen.cpp import build
        from kiln.options import default_options
        opts = default_options().replace(cache_dir={options.cache_dir!r})
        assert build.load_library({source!r}, opts).kiln_cache_probe(1) == 1237
    """)
    procs = [subprocess.Popen([sys.executable, "-c", script], stderr=subprocess.PIPE, text=True) for _ in range(4)]
    for proc in procs:
        assert proc.wait(timeout=300) == 0, proc.stderr.read()
    assert _load_fresh(source, options).kiln_cache_probe(1) == 1237
    assert build._intact(build.library_path(source, options))
