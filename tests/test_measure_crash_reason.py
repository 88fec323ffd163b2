"""A crash's reason names the job's own error, even when the process died in teardown after printing it.

Seen in CI (stop 29): a torchrun rank raised, printed its traceback, and then torch's
gloo threads aborted the interpreter at exit ("terminate called without an active
exception", signal 6); the reason gave only that last line.
"""

from __future__ import annotations

from infrarsi.measure import classify, error_line, summarize
from infrarsi.seams.executor import Execution
from infrarsi.trial_record import Outcome

TRACEBACK = """\
[rank1]: Traceback (most recent call last):
[rank1]:   File "/repo/train.py", line 80, in <module>
[rank1]:     main()
[rank1]:   File "/repo/train.py", line 40, in step
[rank1]:     raise RuntimeError("rank 1 lost its gradients")
[rank1]:     ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
[rank1]: RuntimeError: rank 1 lost its gradients
"""


def test_the_exception_a_traceback_ends_in_is_the_error() -> None:
    assert error_line(TRACEBACK) == "RuntimeError: rank 1 lost its gradients"


def test_what_the_process_printed_after_its_traceback_follows_the_exception() -> None:
    tail = TRACEBACK + "terminate called without an active exception\n"
    assert error_line(tail) == ("RuntimeError: rank 1 lost its gradients "
                                "(then: terminate called without an active exception)")


def test_the_last_traceback_counts_and_without_one_the_last_line_does() -> None:
    chained = ("Traceback (most recent call last):\n  File \"a.py\", line 1\nKeyError: 'x'\n\n"
               "During handling of the above exception, another exception occurred:\n\n"
               "Traceback (most recent call last):\n  File \"a.py\", line 3\nValueError: bad shape\n")
    assert error_line(chained) == "ValueError: bad shape"
    assert error_line("loading\nSegmentation fault (core dumped)\n\n") == "Segmentation fault (core dumped)"
    assert error_line("  \n") == "no stderr"


def test_a_rank_aborted_after_its_traceback_is_a_crash_named_by_its_exception() -> None:
    execution = Execution(events=(), returncode=-6, wall_s=3.0, peak_rss_bytes=1 << 20, failed_rank=1,
                          stderr_tail=TRACEBACK + "terminate called without an active exception\n")
    metrics = summarize(execution, warmup=2, measured=6)
    outcome, reason = classify(execution, metrics, warmup=2, measured=6, tokens_per_step=256)
    assert outcome is Outcome.CRASH
    assert reason.startswith("killed by signal 6 on rank 1: RuntimeError: rank 1 lost its gradients")
