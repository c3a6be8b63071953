"""CI slice of the view/in-place fuzzer (tests/fuzz/views.py): programs against eager, traced to ATen
and run as ATen ops (aot_eager), and a few through kiln's generated C++ (slower to build)."""
from __future__ import annotations

import warnings

import pytest

from tests.fuzz.views import mismatch

SLICE = 120
GENERATED = (636, 127, 0, 1, 2, 3)  # 636: a view of an offset input written in the graph read one row off


@pytest.mark.parametrize("seed", range(SLICE))
def test_view_and_write_program_agrees_with_eager(seed):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert mismatch(seed, "aot_eager") is None


@pytest.mark.parametrize("seed", GENERATED)
def test_view_and_write_program_in_generated_code_agrees_with_eager(seed):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert mismatch(seed, "kiln") is None
