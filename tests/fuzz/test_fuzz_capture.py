"""CI slice of the capture fuzzer: programs 0..SLICE-1 of tests/fuzz/grammar.py, eager vs kiln.

Each program runs eagerly and under ``kiln.compile(f, backend=<counting eager backend>)`` on two
input sets (tests/fuzz/runner.py). A mismatch fails the test and prints the minimized program.
Seeds in KNOWN_BAD fail today because of kiln bugs (one line each says which); they are
xfail(strict=True), so a fix shows up as XPASS and the seed must be deleted here. The goal is an
empty KNOWN_BAD. The minimized form of each bug is a regression test in tests/fuzz/test_found_cases.py.

The longer run: ``python benchmarks/fuzz_capture.py --n 3000 --seed 1000 --jobs 2``.
"""
from __future__ import annotations

import warnings

import pytest

from tests.corpus.harness import kiln_ready

SLICE = 300

KNOWN_BAD: dict[int, str] = {}  # emptied when the lazy-iterator, dict-view, identity and traced-raise work landed

pytestmark = pytest.mark.skipif(not kiln_ready(), reason="kiln.compile or its frame hook is not available")


def _params():
    for seed in range(SLICE):
        if seed in KNOWN_BAD:
            yield pytest.param(seed, marks=pytest.mark.xfail(strict=True, reason=KNOWN_BAD[seed]))
        else:
            yield seed


@pytest.fixture(autouse=True)
def _memory_cap():
    """A cap on this process's address space while a fuzz program runs, lifted after it (other tests run
    in the same process, CUDA ones too)."""
    from tests.fuzz.runner import limit_memory, restore_memory_limit

    previous = limit_memory(8.0)
    yield
    restore_memory_limit(previous)


@pytest.mark.parametrize("seed", list(_params()))
def test_fuzz_program(seed):
    from tests.fuzz.minimize import minimize
    from tests.fuzz.runner import run_seed, run_source

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        src, outcome = run_seed(seed)
        if not outcome.failed:
            return
        if seed in KNOWN_BAD:  # expected to fail: no time spent minimizing
            pytest.fail(f"{outcome.status} ({outcome.part}): {outcome.detail[:300]}")
        sig = outcome.signature()
        small = minimize(src, lambda s: run_source(s, tag=f"min{seed}", timeout=5).signature() == sig, budget=200)
        final = run_source(small, tag=f"min{seed}")
    pytest.fail(f"program {seed}: {outcome.status} ({outcome.part})\n{outcome.detail[:2000]}\n\n"
                f"minimized program ({final.status}: {final.detail[:1000]}):\n\n{small}")
