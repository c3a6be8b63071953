"""Unit tests of the lru_cache purity check's exemptions (kiln/capture/values/functools_values.py)."""
import functools

from kiln.capture.sources import AttrSource, GlobalSource
from kiln.capture.values.base import ConstantValue
from kiln.capture.values.functools_values import LruCacheFunctionValue, _body_of_lru_function, _unchanging


@functools.lru_cache
def _helper(n):
    return n


def _plain(n):
    return n


def test_lru_wrappers_are_unchanging_reads_plain_functions_are_not():
    assert _unchanging(_helper)
    assert not _unchanging(_plain)
    assert not _unchanging([1])


def test_body_of_lru_function_needs_an_lru_wrapper_at_the_base():
    base = GlobalSource("_helper")
    memo = {base.name(): LruCacheFunctionValue(_helper, base)}
    assert _body_of_lru_function(memo, AttrSource(base, "__wrapped__"))
    assert _body_of_lru_function(memo, AttrSource(base, "__wrapped__").name())
    assert not _body_of_lru_function(memo, AttrSource(base, "cache_info"))
    other = GlobalSource("_plain")
    memo[other.name()] = ConstantValue(3)
    assert not _body_of_lru_function(memo, AttrSource(other, "__wrapped__"))
    assert not _body_of_lru_function(memo, None)
