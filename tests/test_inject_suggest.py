"""groupquant.inject.closest: the one did-you-mean rule, against difflib's similarity ratio directly."""
from __future__ import annotations

from difflib import SequenceMatcher

from hypothesis import given
from hypothesis import strategies as st

from groupquant.inject import SUGGEST_CUTOFF as CUTOFF, closest, did_you_mean

names = st.text(alphabet="abcdefg_", min_size=1, max_size=8)


@given(names, st.lists(names, max_size=8))
def test_closest_is_the_most_similar_known_name_above_the_cutoff(name, known):
    def ratio(candidate):
        matcher = SequenceMatcher()
        matcher.set_seqs(candidate, name)
        return matcher.ratio()

    # difflib's quick_ratio / real_quick_ratio are upper bounds of ratio, so ratio alone decides
    above = [(ratio(k), k) for k in set(known) if ratio(k) >= CUTOFF]
    assert closest(name, known) == (max(above)[1] if above else None)


@given(st.lists(names, min_size=1, max_size=8))
def test_a_known_name_suggests_itself(known):
    assert closest(known[0], known) == known[0]


def test_did_you_mean_text():
    assert did_you_mean("group_sise", ["group_size", "bit_width"]) == "; did you mean 'group_size'?"
    assert did_you_mean("sise", ["group_size"], prefix="weight_") == ""
    assert did_you_mean("group_sise", ["group_size"], prefix="weight_") == "; did you mean 'weight_group_size'?"
