"""One codec per knob value: every kind survives command line -> TOML -> JSON -> Python literal and back.

The knobs are parsed from contract TOML by the real loader, so the property
covers knobs as a user writes them, not records built by hand.
"""

from __future__ import annotations

import json
import math
import tomllib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from infrarsi.contract import load_contract, parse_contract
from infrarsi.contract.knob_codec import (KnobValueError, assignment_text, guess_value, python_literal,
                                          python_text, toml_text)
from infrarsi.contract.model import Knob
from infrarsi.search.space import SearchSpace
from infrarsi.trial_record import Candidate

ROOT = Path(__file__).resolve().parent.parent


def _knob(table: dict) -> Knob:
    """A knob as the contract loader makes it from ``[knobs.k]``."""
    data = {"workload": {"command": ["python", "train.py"], "tokens_per_step": 1}, "knobs": {"k": table}}
    return parse_contract(data, source=ROOT / "infrarsi.toml", root=ROOT).knob("k")


def _same(a: object, b: object) -> bool:
    return type(a) is type(b) and a == b


finite = st.floats(allow_nan=False, allow_infinity=False, width=64)
ints = st.integers(min_value=-(2**63), max_value=2**63 - 1)
# TOML strings hold any Unicode scalar value; a command line cannot hold NUL.
texts = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=12)
passing = st.sampled_from([{"flag": "--k"}, {"flag": "--k", "form": "equals"}, {"env": "K"},
                           {"override": "trainer.k"}, {"override": "+k"}])


@st.composite
def knob_and_value(draw: st.DrawFn) -> tuple[Knob, object]:
    kind = draw(st.sampled_from(["categorical", "int_range", "int_values", "float_range", "float_values", "bool"]))
    how = draw(passing)
    if kind == "categorical":
        values = draw(st.lists(st.one_of(texts, ints, finite), min_size=1, max_size=5,
                               unique_by=lambda v: str(v)))
        table = {"kind": "categorical", "values": values, "default": values[0]}
        value = draw(st.sampled_from(values))
    elif kind == "int_range":
        low = draw(st.integers(-10**6, 10**6))
        high = draw(st.integers(low + 1, low + 10**6))
        table = {"kind": "int", "low": low, "high": high, "default": low}
        value = draw(st.integers(low, high))
    elif kind == "int_values":
        values = draw(st.lists(ints, min_size=1, max_size=5, unique=True))
        table = {"kind": "int", "values": values, "default": values[0]}
        value = draw(st.sampled_from(values))
    elif kind == "float_range":
        low = draw(st.floats(-1e12, 1e12))
        high = draw(st.floats(low, 2e12).filter(lambda h: h > low))
        table = {"kind": "float", "low": low, "high": high, "default": low, "log": False}
        value = draw(st.floats(low, high))
    elif kind == "float_values":
        values = draw(st.lists(finite, min_size=1, max_size=5, unique_by=lambda v: str(v)))
        table = {"kind": "float", "values": values, "default": values[0]}
        value = draw(st.sampled_from(values))
    else:
        table = {"kind": "bool", "default": False}
        spelled = draw(st.sampled_from([None, ["True", "False"], ["true", "false"], ["yes", "no"], ["on", "off"]]))
        if spelled is not None:
            table["bool_text"] = spelled
        value = draw(st.booleans())
    return _knob({**table, **how}), value


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(knob_and_value())
def test_every_kind_round_trips_command_line_toml_json_python(case: tuple[Knob, object]) -> None:
    knob, value = case
    codec = knob.codec
    from_cli = codec.from_cli(codec.to_cli(value))
    assert _same(from_cli, value)
    from_toml = codec.from_toml(codec.to_toml(from_cli))
    assert _same(from_toml, value)
    assert _same(tomllib.loads(f"v = {codec.to_toml(value)}")["v"], value)  # what tomllib reads in a contract
    from_json = codec.from_json(json.loads(codec.to_json(from_toml)))
    assert _same(from_json, value)
    from_python = codec.from_python(codec.to_python(from_json))
    assert _same(from_python, value)
    # and back the other way: Python literal -> JSON -> TOML -> command line
    back = codec.from_cli(codec.to_cli(codec.from_toml(codec.to_toml(codec.from_json(
        json.loads(codec.to_json(codec.from_python(codec.to_python(value)))))))))
    assert _same(back, value)


@settings(max_examples=200, deadline=None)
@given(knob_and_value())
def test_feature_names_and_descriptions_share_one_text(case: tuple[Knob, object]) -> None:
    knob, value = case
    assert knob.codec.feature(value) == assignment_text("k", value)
    assert Candidate.of({"k": value}).describe() == assignment_text("k", value)


def test_bool_spellings_the_job_reads() -> None:
    plain = _knob({"kind": "bool", "default": False, "flag": "--fast"})
    assert (plain.codec.to_cli(True), plain.codec.to_cli(False)) == ("1", "0")  # today's default, unchanged
    python = _knob({"kind": "bool", "default": False, "flag": "--fast", "bool_text": ["True", "False"]})
    assert (python.codec.to_cli(True), python.codec.to_cli(False)) == ("True", "False")
    hydra = _knob({"kind": "bool", "default": False, "override": "model.fast"})
    assert hydra.codec.to_cli(True) == "true"  # a Hydra override spells YAML booleans by default
    for text, want in (("1", True), ("on", True), ("FALSE", False), ("True", True), ("no", False)):
        assert plain.codec.from_cli(text) is want
    with pytest.raises(KnobValueError, match="knob k: expected true or false, got 'maybe'"):
        plain.codec.from_cli("maybe")


def test_decoders_name_the_knob_and_its_domain() -> None:
    knob = _knob({"kind": "categorical", "values": ["fp32", "bf16"], "default": "fp32", "flag": "--dtype"})
    with pytest.raises(KnobValueError, match=r"knob k: expected one of 'fp32', 'bf16', got 'fp16'"):
        knob.codec.from_cli("fp16")
    with pytest.raises(KnobValueError, match="expected a Python literal"):
        knob.codec.from_python("torch.float16")
    micro = _knob({"kind": "int", "values": [1, 2, 4], "default": 1, "flag": "--mb"})
    with pytest.raises(KnobValueError):
        micro.codec.from_json("2")  # a string is not an int knob's value, even when it looks like one
    with pytest.raises(KnobValueError):
        micro.codec.from_json(2.0)
    assert _same(micro.codec.from_python("4"), 4)
    bits = _knob({"kind": "bool", "default": False, "flag": "--compile"})
    assert bits.codec.from_python("1") is True  # an int-typed flag (choices=[0, 1]) holds a bool knob as 0/1


def test_module_helpers_for_values_without_a_knob() -> None:
    assert [guess_value(t) for t in ("8", "0.5", "1e-3", "bf16", "")] == [8, 0.5, 1e-3, "bf16", ""]
    assert python_literal("-3") == (True, -3) and python_literal("[1, 'a']") == (True, [1, "a"])
    assert python_literal("os.cpu_count()") == (False, None)
    assert python_text("it's", quote='"') == '"it\'s"' and python_text("bf16", quote="'") == "'bf16'"
    assert python_text('say "hi"', quote='"') == repr('say "hi"')
    assert python_text(True, bool_as_int=True) == "1" and python_text(6e-4) == "0.0006"
    assert toml_text("a\"b") == '"a\\"b"' and toml_text(False) == "false" and toml_text(2) == "2"
    with pytest.raises(KnobValueError):
        toml_text(math.inf)


def test_search_space_features_come_from_the_codec() -> None:
    knob = _knob({"kind": "categorical", "values": ["fp32", "bf16"], "default": "fp32", "flag": "--dtype"})
    space = SearchSpace.from_contract((knob,), (), [])
    assert "k=bf16" in space.feature_names and knob.codec.feature("bf16") == "k=bf16"


def test_values_the_job_could_not_tell_apart_are_refused(tmp_path: Path) -> None:
    (tmp_path / "infrarsi.toml").write_text(
        '[workload]\ncommand = ["python", "t.py"]\ntokens_per_step = 1\n\n'
        '[knobs.x]\nkind = "categorical"\nvalues = ["1", 1]\ndefault = "1"\nflag = "--x"\n', encoding="utf-8")
    from infrarsi.contract import ContractError

    with pytest.raises(ContractError, match=r"knobs\.x\.values: expected values the job can tell apart, got '1' twice"):
        load_contract(tmp_path)
