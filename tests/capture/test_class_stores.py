"""Unit tests of stores to classes (values/class_stores.py): what is recorded and how lookups see it, and
the refusals (reasons name the class and why)."""
import types

import pytest
import torch

from kiln.capture.side_effects import SideEffects
from kiln.capture.values.base import ConstantValue
from kiln.capture.values.class_stores import class_has_pending, pending_class_attribute, store_class_attribute
from kiln.capture.values.objects import ClassValue
from kiln.errors import Unsupported


def _tx(*modules):
    from kiln.capture.values.modules import NNModuleValue

    held = {id(m): NNModuleValue.__new__(NNModuleValue) for m in modules}
    for m in modules:
        held[id(m)].module = m
    return types.SimpleNamespace(output=types.SimpleNamespace(side_effects=SideEffects(), values_by_source={},
                                                              values_by_id=held))


class Base:
    v = 1

    def m(self):
        return 1


class Sub(Base):
    pass


class Mod(torch.nn.Module):
    pass


class WithModuleChild:
    n = 0


class _ModuleChild(WithModuleChild, torch.nn.Module):
    pass


def test_store_recorded_in_the_class_own_dict_and_seen_through_the_mro():
    tx = _tx()
    store_class_attribute(tx, ClassValue(Base), "v", ConstantValue(5))
    assert pending_class_attribute(tx, Base, "v").as_constant() == 5
    assert pending_class_attribute(tx, Sub, "v") is None  # Sub's own dict has no entry
    assert class_has_pending(tx, Sub, "v") and not class_has_pending(tx, Sub, "w")
    (effect,) = list(tx.output.side_effects)
    assert effect.name == "v" and effect.obj.source.value is Base  # replayed as Base.v = 5
    store_class_attribute(tx, ClassValue(Base), "v", ConstantValue(6))  # a later store replaces it
    assert len(tx.output.side_effects) == 1 and pending_class_attribute(tx, Base, "v").as_constant() == 6


@pytest.mark.parametrize("cls, name, value, why", [
    (Base, "__len__", ConstantValue(1), "dunder"),
    (Base, "m", ConstantValue(1), "replaces a function"),
    (torch.nn.Linear, "k", ConstantValue(1), "a class of torch"),
    (Mod, "forward", ConstantValue(1), "the value stored .* or descriptor|replaces a function"),
])
def test_refused_stores_name_the_class_and_why(cls, name, value, why):
    with pytest.raises(Unsupported, match=f"{cls.__qualname__}.{name}: .*{why}"):
        store_class_attribute(_tx(), ClassValue(cls), name, value)


def test_stores_to_module_classes_are_recorded():
    tx = _tx(Mod())
    store_class_attribute(tx, ClassValue(Mod), "k", ConstantValue(1))
    store_class_attribute(tx, ClassValue(WithModuleChild), "n", ConstantValue(2))  # a subclass is an nn.Module
    assert pending_class_attribute(tx, Mod, "k").as_constant() == 1
    assert class_has_pending(tx, _ModuleChild, "n")


def test_a_store_shadowing_a_modules_parameter_is_refused():
    m = Mod()
    m.weight = torch.nn.Parameter(torch.ones(1))
    with pytest.raises(Unsupported, match="Mod.weight: .*parameter, buffer or submodule 'weight'"):
        store_class_attribute(_tx(m), ClassValue(Mod), "weight", ConstantValue(1))
