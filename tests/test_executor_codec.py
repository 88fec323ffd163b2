"""The one wire form of a trial's launch and its execution record (infrarsi/seams/executor_codec.py).

Every field of :class:`TrialSpec` and :class:`Execution` round-trips through JSON; a field added to either
without an entry in the codec (and a strategy here) fails the first two tests.
"""

from __future__ import annotations

import json
from dataclasses import fields

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from infrarsi.seams.executor import Execution, TrialSpec
from infrarsi.seams.executor_codec import (CODEC_VERSION, EXECUTION_FIELDS, SPEC_FIELDS, CodecError,
                                           execution_from_dict, execution_to_dict, spec_from_dict, spec_to_dict)
from infrarsi.trial_record import StepEvent

text = st.text(max_size=20)
ints = st.integers(min_value=-(2**40), max_value=2**40)
naturals = st.integers(min_value=0, max_value=2**40)
floats = st.floats(allow_nan=False, allow_infinity=False, width=64)
pairs = st.lists(st.tuples(text, text), max_size=4).map(tuple)
json_values = st.recursive(st.none() | st.booleans() | ints | floats | text,
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3),
                           max_leaves=6)
report = st.dictionaries(text, json_values, max_size=4)

SPEC_STRATEGIES = {
    "argv": st.lists(text, min_size=1, max_size=4).map(tuple),
    "cwd": text,
    "env": pairs,
    "timeout_s": floats,
    "memory_limit_bytes": st.none() | naturals,
    "source": st.sampled_from(["probe", "stdout", "optimizer"]),
    "stdout_regex": st.none() | text,
    "expected_steps": st.none() | naturals,
    "step_stream": st.sampled_from(["stdout", "stderr"]),
    "log_dir": st.none() | text,
    "witness": st.none() | naturals,
    "steps_per_line": st.integers(min_value=1, max_value=100),
    "root": st.none() | text,
    "commit": st.none() | st.text(alphabet="0123456789abcdef", min_size=40, max_size=40),
    "lock": pairs,
    "step_tokens": st.none() | naturals,
}

events = st.builds(StepEvent, step=st.none() | ints, stamp=floats, loss=st.none() | floats,
                   tokens=st.none() | ints, child_t=st.none() | floats)
EXECUTION_STRATEGIES = {
    "events": st.lists(events, max_size=4).map(tuple),
    "returncode": st.none() | ints,
    "wall_s": floats,
    "peak_rss_bytes": naturals,
    "killed_for": st.none() | st.sampled_from(["timeout", "memory", "interrupt"]),
    "stderr_tail": text,
    "probe_oom": st.none() | text,
    "device_peak_mem_bytes": st.none() | naturals,
    "steady_rss_bytes": st.none() | naturals,
    "device_steady_bytes": st.none() | naturals,
    "device_capacity_bytes": st.none() | naturals,
    "devices": st.integers(min_value=1, max_value=64),
    "pids": st.lists(naturals, max_size=4).map(tuple),
    "phases": st.lists(st.tuples(ints, text, floats), max_size=3).map(tuple),
    "info": st.lists(st.tuples(text, json_values), max_size=3).map(tuple),
    "failed_rank": st.none() | naturals,
    "placement": st.lists(st.tuples(text, json_values), max_size=3).map(tuple),
    "stopped_after_steps": st.booleans(),
    "witness": st.none() | report,
    "witness_error": st.none() | text,
    "witness_ranks": st.lists(report, max_size=3).map(tuple),
    "witness_skipped": st.none() | text,
    "lock_changed": st.none() | st.lists(text, max_size=3).map(tuple),
    "host": st.lists(st.tuples(text, floats), max_size=3).map(tuple),
}


def test_the_codec_carries_every_field_of_the_launch() -> None:
    names = {f.name for f in fields(TrialSpec)}
    assert set(SPEC_FIELDS) == names, "a TrialSpec field without a codec entry (or one the codec has no more)"
    assert set(SPEC_STRATEGIES) == names, "a TrialSpec field this test does not generate"


def test_the_codec_carries_every_field_of_the_execution() -> None:
    names = {f.name for f in fields(Execution)}
    assert set(EXECUTION_FIELDS) == names, "an Execution field without a codec entry (or one the codec has no more)"
    assert set(EXECUTION_STRATEGIES) == names, "an Execution field this test does not generate"


@settings(max_examples=150, deadline=None)
@given(st.fixed_dictionaries(SPEC_STRATEGIES))
def test_every_launch_round_trips_through_json(values: dict) -> None:
    spec = TrialSpec(**values)
    wire = json.loads(json.dumps(spec_to_dict(spec)))
    assert spec_from_dict(wire) == spec


@settings(max_examples=150, deadline=None)
@given(st.fixed_dictionaries(EXECUTION_STRATEGIES))
def test_every_execution_round_trips_through_json(values: dict) -> None:
    execution = Execution(**values)
    wire = json.loads(json.dumps(execution_to_dict(execution, rank=1)))
    assert execution_from_dict(wire) == execution
    assert wire["rank"] == 1 and wire["schema_version"] == CODEC_VERSION


def test_an_older_record_reads_with_the_fields_it_lacks_at_their_defaults() -> None:
    old = {"schema_version": 3, "execution": {"events": [{"step": 1, "stamp": 0.5, "loss": None, "tokens": None,
                                                          "child_t": None}],
                                              "returncode": 0, "wall_s": 1.0, "peak_rss_bytes": 10}}
    ex = execution_from_dict(old)
    assert ex.events == (StepEvent(step=1, stamp=0.5),) and ex.witness_ranks == () and ex.lock_changed is None


@pytest.mark.parametrize(("data", "words"), [
    ({"schema_version": CODEC_VERSION + 1, "spec": {"argv": ["x"], "cwd": "."}}, "newer than this InfraRSI"),
    ({"schema_version": CODEC_VERSION, "spec": {"argv": ["x"], "cwd": ".", "new_field": 1}}, "unknown field"),
    ({"schema_version": CODEC_VERSION, "spec": {"argv": ["x"], "cwd": ".", "timeout_s": "soon"}},
     "trial launch.timeout_s"),
    ({"schema_version": CODEC_VERSION, "spec": {"cwd": "."}}, "argv"),
])
def test_a_record_that_cannot_be_read_says_which_field(data: dict, words: str) -> None:
    with pytest.raises(CodecError, match=words):
        spec_from_dict(data)
