"""choose_faster's decision kept in the warm-cache entry (kiln/backends/choose_faster.py, warm_cache.py): a
graph loaded from the warm cache replays the choice instead of racing again; a stale choice is ignored
(raced again, the new choice kept); the verdict on random ops travels with the entry."""
import pytest
import torch

import kiln
from kiln.backends import warm_cache
from kiln.backends.choose_faster import CHOICE_FORMAT, TRIALS, valid_choice
from kiln.debug.stats import stats

RACE = 2 + 2 * TRIALS  # calls until the choice is made


@pytest.fixture
def opts(tmp_path):
    warm_cache.ENTRIES.clear()
    kiln.reset()
    stats.reset()
    yield kiln.Options(cache_dir=str(tmp_path), warm_cache=True, choose_faster=True)
    warm_cache.ENTRIES.clear()


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.LayerNorm(16)).eval()


def _only_entry(opts) -> dict:
    (key, entry), = warm_cache.ENTRIES.items()
    assert warm_cache.read(key, opts) is entry
    return entry


def _reload(m, opts, edit=None):
    """A new compile that reads the entry from the disk (as a new process does), after ``edit(entry)``."""
    entry = _only_entry(opts)
    if edit is not None:
        edit(entry)
        warm_cache.store(entry, opts)
    warm_cache.ENTRIES.clear()
    kiln.reset()
    stats.reset()
    return kiln.compile(m, options=opts)


def test_choice_is_kept_and_replayed_without_a_race(opts):
    m, x = _model(), torch.randn(3, 8)
    with torch.no_grad():
        fn = kiln.compile(m, options=opts)
        for _ in range(RACE):
            fn(x)
        chosen = next(iter(stats.speed_choices))
        kept = _only_entry(opts)["speed_choice"]
        assert kept["chosen"] == chosen and valid_choice(kept, cuda=False) is None

        def eager_won(entry):
            entry["speed_choice"] = dict(entry["speed_choice"], chosen="eager", medians={"kiln": 2e-3, "eager": 1e-3})

        fn = _reload(m, opts, eager_won)
        out = fn(x)
    assert stats.warm_cache["hits"] == 1
    assert stats.speed_choices == {"eager": 1}  # decided at the first call: no trial calls
    assert any("eager was faster" in k for k in stats.aten_fallbacks)
    torch.testing.assert_close(out, m(x))
    with torch.no_grad():
        report = "\n".join(kiln.explain(m, options=opts)(x).backend_reports)
    assert "eager runs" in report and "kept in the warm cache" in report


@pytest.mark.parametrize("stale", ["threads", "format", "malformed"])
def test_stale_choice_is_ignored_raced_again_and_replaced(opts, stale):
    m, x = _model(), torch.randn(3, 8)
    edits = {"threads": {"threads": torch.get_num_threads() + 1}, "format": {"format": "kiln-speed-choice-0"},
             "malformed": {"chosen": "neither"}}
    with torch.no_grad():
        fn = kiln.compile(m, options=opts)
        for _ in range(RACE):
            fn(x)
        fn = _reload(m, opts, lambda entry: entry["speed_choice"].update(edits[stale]))
        outs = [fn(x)]
        assert not stats.speed_choices  # racing again, not replaying (a replayed choice is made at call 1)
        assert sum(v for k, v in stats.warm_cache.items() if k.startswith("speed choice ignored")) == 1
        outs += [fn(x) for _ in range(RACE - 1)]
    assert sum(stats.speed_choices.values()) == 1
    kept = _only_entry(opts)["speed_choice"]
    assert valid_choice(kept, cuda=False) is None and kept["format"] == CHOICE_FORMAT
    for out in outs:
        torch.testing.assert_close(out, m(x))


def test_entry_without_a_choice_races_and_random_ops_stay_unraced(opts):
    m, x = _model(), torch.randn(3, 8)
    with torch.no_grad():
        kiln.compile(m, options=opts)(x)  # one call: no choice yet
        assert "speed_choice" not in _only_entry(opts) and _only_entry(opts)["race_ops"] is None
        fn = _reload(m, opts)
        for _ in range(RACE):
            fn(x)
    assert sum(stats.speed_choices.values()) == 1 and "speed_choice" in _only_entry(opts)
    with torch.no_grad():
        fn = _reload(m, opts, lambda entry: entry.pop("speed_choice") and entry.update(race_ops="random ops"))
        for _ in range(RACE):
            fn(x)
    assert stats.warm_cache["hits"] == 1 and not stats.speed_choices  # a loaded graph with random ops: no race


def test_narrow_eager_win_is_kept_as_generated_code():
    from kiln.backends.choose_faster import KEEP_EAGER, FastestOf

    chooser = FastestOf({"kiln": lambda x: x, "eager": lambda x: x}, "g", False)
    chooser._choose("eager", {"kiln": 1.0, "eager": 0.9})  # eager won by 10%: runs here, not kept
    assert chooser.run is chooser.eager and chooser.choice()["chosen"] == "kiln"
    chooser._choose("eager", {"kiln": 1.0, "eager": KEEP_EAGER * 0.9})
    assert chooser.choice()["chosen"] == "eager"
