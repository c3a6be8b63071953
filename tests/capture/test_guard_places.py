"""guards._PlaceIndex: finds the places a guard text reads and substitutes them exactly as the regular
expressions ``place(?![A-Za-z0-9_])`` did (checked against them on generated texts)."""
import random
import re

from kiln.capture.guards import _check_function_source, _PlaceIndex

_PARTS = ["L['self']", "._modules['0']", "._modules['10']", ".weight", ".w", "[0]", "[1]", ".config", ".cfg_"]


def _place(rng) -> str:
    return rng.choice(["L['self']", "L['x']", "G['torch']", "C[0].cell_contents"]) + "".join(
        rng.choice(_PARTS[1:]) for _ in range(rng.randrange(4)))


def _regex_places(text, places):
    return {p for p in places if re.search(re.escape(p) + r"(?![A-Za-z0-9_])", text)}


def test_candidates_and_replace_match_the_regular_expressions():
    rng = random.Random(0)
    for _ in range(300):
        places = {_place(rng) for _ in range(rng.randrange(1, 12))}
        text = " and ".join(_place(rng) + rng.choice(["", "x", "_1", ".size()", " is None", "[2]"])
                            for _ in range(rng.randrange(1, 5)))
        index = _PlaceIndex(places)
        assert index.candidates(text) == _regex_places(text, places), (text, places)
        for p in places:
            assert index.replace(text, p, "v0") == re.sub(re.escape(p) + r"(?![A-Za-z0-9_])", "v0", text)


def test_shared_places_are_read_once_into_locals():
    exprs = [("L['self'].a.w == 1", "w"), ("L['self'].a.w2 == 2", "w2"), ("L['self'].a is not None", "a")]
    src = _check_function_source(exprs, {"L['self']", "L['self'].a"})
    assert "v0 = L['self']\n" in src and "v1 = v0.a\n" in src
    assert "if not (v1.w == 1)" in src and "if not (v1.w2 == 2)" in src and "if not (v1 is not None)" in src
