"""The validators behind the model's tools: nothing taken on trust, every refusal a message the model can act on.
Exchanges with the (replayed) API: test_proposer_anthropic.py."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from bot.proposers.answers import (MAX_PATCHES, PATCH_TOOL, human_command, validate_draft, validate_patches,
                                   validate_priors)
from bot.proposers.llm import InvalidAnswer
from infrarsi.contract.load import parse_contract
from infrarsi.seams.proposer import ArgFlag, RepoSummary
from tests.support.tinygpt import REPO

DDP = REPO / "fixtures" / "ddp"
CONTRACT = parse_contract(tomllib.loads((DDP / "infrarsi.toml").read_text()), source=Path("infrarsi.toml"),
                          root=DDP)
EFFECT = {"time_ratio": 0.8, "time_sigma": 0.2, "mem_ratio": 1.0, "mem_sigma": 0.1}


def _patch(**changes: object) -> dict:
    return {"name": "fast_mlp", "title": "A faster MLP", "target": "model.py::MLP.forward",
            "replacement": "def forward(self, x):\n    return self.fc(x)\n", "rationale": "fewer kernels",
            "evidence": "profile", **EFFECT, **changes}


def test_a_valid_patch_becomes_a_replacement_spec_with_a_content_id() -> None:
    [spec] = validate_patches({"patches": [_patch()]}, model="m1")
    assert spec.id.startswith("llm_fast_mlp_") and len(spec.id) == len("llm_fast_mlp_") + 8
    assert (spec.kind, spec.targets, spec.title, spec.evidence) == ("replacement", ("model.py::MLP.forward",),
                                                                    "A faster MLP", "profile")
    assert spec.effect.time_ratio == 0.8 and spec.effect.source == "expected by m1"
    again = validate_patches({"patches": [_patch(replacement="def forward(self, x):\n    return x\n")]}, model="m")
    assert again[0].id != spec.id
    assert PATCH_TOOL.name and PATCH_TOOL.to_api()["input_schema"]["properties"]["patches"]["maxItems"] == MAX_PATCHES


@pytest.mark.parametrize("data, message", [
    ({}, "missing required field 'patches'"),
    ({"patches": "[oops"}, "patches: invalid JSON"),
    ({"patches": {"a": 1}}, "patches: expected an array, got dict"),
    ({"patches": [_patch()] * (MAX_PATCHES + 1)}, f"patches: at most {MAX_PATCHES}, got {MAX_PATCHES + 1}"),
    ({"patches": ["x"]}, "patches[0]: expected an object, got str"),
    ({"patches": [{"name": "abc"}]}, "patches[0]: missing required field(s) title, target, replacement"),
    ({"patches": [_patch(name="Bad-Name")]}, "patches[0].name: expected lower_snake_case of 3 to 41 characters"),
    ({"patches": [_patch(target="../model.py::MLP")]}, "patches[0].target: expected a repo-relative"),
    ({"patches": [_patch(target="model.py")]}, "patches[0].target: expected a repo-relative"),
    ({"patches": [_patch(replacement=3)]}, "patches[0].replacement: expected the source of one definition"),
    ({"patches": [_patch(replacement="def forward(:\n")]}, "patches[0].replacement: "),
    ({"patches": [_patch(replacement="def backward(self):\n    pass\n")]},
     "patches[0].replacement defines 'backward' but the target is 'forward'"),
    ({"patches": [_patch(time_ratio=0)]}, "patches[0].time_ratio: expected a number in (0.0, 20.0], got 0"),
    ({"patches": [_patch(mem_sigma=True)]}, "patches[0].mem_sigma: expected a number in (0, 3.0], got True"),
    ({"patches": [_patch(title="  ")]}, "patches[0].title: expected a non-empty string"),
])
def test_a_bad_patch_answer_is_refused_with_what_to_fix(data: dict, message: str) -> None:
    with pytest.raises(InvalidAnswer) as e:
        validate_patches(data, model="m")
    assert message in str(e.value)


def test_priors_name_only_features_of_the_search_space() -> None:
    item = {"feature": "dtype=bf16", **EFFECT, "rationale": "tensor cores"}
    effects, why = validate_priors({"effects": [item]}, features=("dtype=bf16",), contract=CONTRACT, model="m2")
    assert effects["dtype=bf16"].mem_ratio == 1.0 and effects["dtype=bf16"].source == "prior stated by m2"
    assert why == {"dtype=bf16": "tensor cores"}
    with pytest.raises(InvalidAnswer, match=r"'fp8' is outside the contract's domain of knob 'dtype'"):
        validate_priors({"effects": [{**item, "feature": "dtype=fp8"}]}, features=("dtype=bf16",),
                        contract=CONTRACT, model="m")
    with pytest.raises(InvalidAnswer, match=r"'warp=9' is not a feature of the search space \(features: dtype=bf16"):
        validate_priors({"effects": [{**item, "feature": "warp=9"}]}, features=("dtype=bf16",), contract=CONTRACT,
                        model="m")


def test_the_humans_command_splits_into_entry_and_arguments() -> None:
    assert human_command("python train.py --lr 3e-4 --steps 10") == (["python", "train.py"],
                                                                     ["--lr", "3e-4", "--steps", "10"])


def _summary(tmp_path: Path) -> RepoSummary:
    return RepoSummary(root=tmp_path, entry="train.py", flags=(ArgFlag(flag="--lr", dest="lr"),), files=())


@pytest.mark.parametrize("data, message", [
    ({"fields": [{"key": "workload.colour", "value": 1, "rationale": "r"}]},
     "fields[0].key: 'workload.colour' is not a contract field this tool sets"),
    ({"fields": [{"key": "loss.rtol", "value": 0.1, "rationale": "r"}] * 2}, "fields[1].key: 'loss.rtol' given twice"),
    ({"fields": [{"key": "loss.rtol", "value": 0.1, "rationale": "r"}]},
     "fields: missing required field(s) workload.command, workload.args"),
])
def test_a_bad_draft_is_refused_by_field(tmp_path: Path, data: dict, message: str) -> None:
    with pytest.raises(InvalidAnswer) as e:
        validate_draft(data, command="python train.py --lr 1", summary=_summary(tmp_path), model="m")
    assert message in str(e.value)


def _fields(**values: object) -> list[dict]:
    base = {"workload.command": ["python", "train.py"], "workload.args": "", "workload.tokens_per_step": 64,
            "timing.source": "probe", "timing.warmup_steps": 1, "timing.measured_steps": 4, "loss.rtol": 0.02,
            "scope.editable": [], "scope.locked": [], "scope.allow_imports": False, "budget.trials": 4,
            "budget.trial_timeout_s": 60, **values}
    return [{"key": k, "value": v, "rationale": "because"} for k, v in base.items()]


def test_a_draft_must_keep_the_humans_command_and_knob_flags_of_the_script(tmp_path: Path) -> None:
    knob = {"name": "lr", "kind": "float", "flag": "--lr", "values": [1.0, 2.0], "default": 1.0, "rationale": "r"}

    def refusal(data: dict) -> str:
        with pytest.raises(InvalidAnswer) as e:
            validate_draft(data, command="python train.py --lr 1", summary=_summary(tmp_path), model="m")
        return str(e.value)
    assert refusal({"fields": _fields(), "knobs": [{**knob, "flag": "--lrr"}]}) == (
        "knobs[0].flag: '--lrr' is not an argument of the entry script (its flags: --lr)")
    assert refusal({"fields": _fields(), "knobs": [{**knob, "name": "LR"}]}) == (
        "knobs[0].name: 'LR' is not a new lower_snake_case name")
    assert refusal({"fields": _fields(**{"workload.command": ["python", "other.py"]}), "knobs": [knob]}).startswith(
        "workload.command must be the human's entry command ['python', 'train.py']")
    assert refusal({"fields": _fields(**{"workload.args": "--lr 1"}), "knobs": [knob]}).startswith(
        "workload.args must be the human's arguments minus the knob flags")
    assert refusal({"fields": _fields(), "knobs": [knob], "constraints": [{"kind": "maybe", "rationale": "r"}]}) == (
        "constraints[0].kind: expected one of divides, product, forbid, got 'maybe'")
