"""What was judged stays judged: unvindicated patches are blamed, else the candidate alone is excluded."""

from __future__ import annotations

from infrarsi.search.blame import Judgements
from infrarsi.trial_record import Candidate


def test_an_invalid_candidate_blames_its_unvindicated_patches() -> None:
    j = Judgements()
    j.vindicate(["good"])
    bad = Candidate.of({"micro": 2}, ("good", "bad"))
    assert j.judge(bad, "loss left the band") == ("bad",)
    assert j.patches == {"bad": "loss left the band"} and j.candidates == {}
    other = Candidate.of({"micro": 4}, ("bad",))
    assert j.excludes(other) == "patch bad was judged invalid: loss left the band"
    assert j.excludes(Candidate.of({"micro": 4}, ("good",))) is None
    assert j.excluded_sets == [frozenset({"bad"})]


def test_with_every_patch_vindicated_only_that_candidate_is_excluded() -> None:
    j = Judgements()
    j.vindicate(["p"])
    c = Candidate.of({"micro": 2}, ("p",))
    assert j.judge(c, "tokens differ") == ()
    assert j.excludes(c) == "tokens differ"
    assert j.excludes(Candidate.of({"micro": 1}, ("p",))) is None
    assert j.excluded_sets == []


def test_the_first_reason_is_kept() -> None:
    j = Judgements()
    c = Candidate.of({}, ("p", "q"))
    j.judge(c, "first")
    j.judge(Candidate.of({}, ("p",)), "second")
    j.judge(Candidate.of({}), "baseline broke")
    j.judge(Candidate.of({}), "again")
    assert j.patches == {"p": "first", "q": "first"}
    assert j.excludes(Candidate.of({})) == "baseline broke"
    assert j.excluded_sets == [frozenset({"p"}), frozenset({"q"})]
