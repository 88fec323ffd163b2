"""What was judged stays judged: unvindicated patches are blamed, else the candidate alone is excluded; a patch
whose trials crash alike under other knob settings is blamed at the first repeat."""

from __future__ import annotations

from types import SimpleNamespace

from bot.stages.run.search_loop import SearchLoop
from infrarsi.search.blame import Judgements, crash_signature
from infrarsi.trial_record import Candidate, Outcome, TrialMetrics, TrialRecord


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


# -- a patch whose trials crash alike under other knob settings (issue 48) ------------------------------------

SECOND_TIME = ("exit status 1: RuntimeError: Trying to backward through the graph a second time (or directly access "
               "saved tensors after they have already been freed). Saved intermediate values of the graph are freed "
               "when you call .backward() or autograd.grad(). Specify retain_graph=True")


def _crashed(no: int, knobs: dict, patches: tuple[str, ...], reason: str = SECOND_TIME) -> TrialRecord:
    return TrialRecord(run_id="r", trial_no=no, candidate=Candidate.of(knobs, patches), outcome=Outcome.CRASH,
                       reason=reason, metrics=TrialMetrics())


def test_the_crash_signature_drops_how_it_exited_and_the_numbers() -> None:
    assert crash_signature("exit status 1: RuntimeError: shape [4, 16] vs [2, 16]") == \
        crash_signature("killed by signal 6 on rank 1: RuntimeError: shape [8, 16] vs [3, 16]")
    assert crash_signature("exit status 1: ValueError: a") != crash_signature("exit status 1: ValueError: b")


def test_a_patch_crashing_alike_under_other_knobs_is_blamed_at_the_first_repeat() -> None:
    j = Judgements()
    assert j.repeated_crash(_crashed(3, {"micro": 2}, ("checkpoint_blocks", "fused_gelu"))) is None
    assert j.repeated_crash(_crashed(4, {"micro": 2}, ("checkpoint_blocks",))) is None  # the same knobs: no news
    blamed, why = j.repeated_crash(_crashed(5, {"micro": 4}, ("checkpoint_blocks",)))  # type: ignore[misc]
    assert blamed.patches == ("checkpoint_blocks",)
    assert why.startswith("trial 5 crashed with the error of trial(s) 3, 4 under other knob settings")
    # another error, or a vindicated patch, is not a repeat
    assert j.repeated_crash(_crashed(6, {"micro": 1}, ("fused_gelu",), "exit status 1: KeyError: x")) is None
    j.vindicate(["fused_gelu"])
    assert j.repeated_crash(_crashed(7, {"micro": 8}, ("fused_gelu",))) is None


def _judge_trial(judged: Judgements, record: TrialRecord, doctor: object, session: object,
                 progress: object) -> bool:
    """SearchLoop.judge on a loop holding only what judging reads (no space, engine or trials)."""
    loop = SearchLoop.__new__(SearchLoop)
    loop.judged, loop.doctor, loop.session, loop.progress = judged, doctor, session, progress  # type: ignore[assignment]
    return loop.judge(record)


def test_the_search_excludes_the_patch_after_its_first_repeated_crash() -> None:
    j = Judgements()
    doctor = SimpleNamespace(printed_band=None, loss_band=None)
    said: list[dict] = []
    first = _crashed(3, {"micro": 2}, ("checkpoint_blocks",))
    assert _judge_trial(j, first, doctor, None, said.append) is False  # type: ignore[arg-type]
    assert j.excludes(Candidate.of({"micro": 4}, ("checkpoint_blocks",))) is None
    again = _crashed(5, {"micro": 4}, ("checkpoint_blocks",))
    assert _judge_trial(j, again, doctor, None, said.append) is True  # type: ignore[arg-type]
    assert "judged invalid" in j.excludes(Candidate.of({"micro": 1}, ("checkpoint_blocks",)))  # type: ignore[operator]
    assert any("checkpoint_blocks judged invalid" in str(m.get("message")) for m in said)
