"""Malformed contracts: each gives exactly one clear error naming the file, the key and what was expected."""

from __future__ import annotations

from pathlib import Path

import pytest

from infrarsi.contract import ContractError, load_contract
from tests.support.contracts import BASE, MODEL

# (name, contract text, expected message after "<file>: ")
CASES = [
    ("not_toml", "[workload\ncommand = 1",
     "not valid TOML: Expected ']' at the end of a table declaration (at line 1, column 10)"),
    ("unknown_top_key", BASE + "\n[budgets]\ntrials = 3\n",
     "budgets: unknown key (did you mean 'budget'?); known keys here: apply, approvers, budget, constraints, data, "
     "knobs, launch, loss, precision, scope, timing, verify, version, workload"),
    ("bad_merge_method", BASE + '\n[apply]\nmerge_method = "fast-forward"\n',
     "apply.merge_method: expected one of 'auto', 'merge', 'squash', 'rebase', got string 'fast-forward'"),
    ("missing_tokens", BASE.replace("tokens_per_step", "tokens_per_stp"),
     "workload.tokens_per_step: missing; expected an integer >= 1"),
    ("typo_key", BASE.replace("[scope]", "[scope]\neditabel = []"),
     "scope.editabel: unknown key (did you mean 'editable'?); known keys here: allow_imports, editable, locked"),
    ("missing_command", BASE.replace('command = ["python", "train.py"]\n', ""),
     "workload.command: missing; expected a string or an array of strings"),
    ("command_wrong_type", BASE.replace('command = ["python", "train.py"]', "command = 3"),
     "workload.command: expected a string or an array of strings, got integer 3"),
    ("tokens_wrong_type", BASE.replace("tokens_per_step = 128", 'tokens_per_step = "128"'),
     "workload.tokens_per_step: expected an integer >= 1, got string '128'"),
    ("warmup_zero", BASE + "\n[timing]\nwarmup_steps = 0\n",
     "timing.warmup_steps: expected an integer >= 1, got integer 0"),
    ("bad_source", BASE + '\n[timing]\nsource = "stderr"\n',
     "timing.source: expected one of 'probe', 'stdout', 'optimizer', got string 'stderr'"),
    ("stdout_without_regex", BASE + '\n[timing]\nsource = "stdout"\n',
     "timing.stdout_regex: missing; expected a regular expression with a (?P<loss>...) group when "
     "timing.source = 'stdout'"),
    ("regex_without_loss", BASE + '\n[timing]\nsource = "stdout"\nstdout_regex = "step (\\\\d+)"\n',
     "timing.stdout_regex: expected a named group (?P<loss>...) in the regular expression"),
    ("default_outside_domain", BASE.replace('default = "fp32"', 'default = "fp16"'),
     "knobs.dtype.default: expected one of 'fp32', 'bf16', got string 'fp16'"),
    ("unknown_kind", BASE.replace('kind = "categorical"', 'kind = "enum"'),
     "knobs.dtype.kind: expected one of 'categorical', 'int', 'float', 'bool', got string 'enum'"),
    ("flag_and_env", BASE.replace('flag = "--dtype"', 'flag = "--dtype"\nenv = "DTYPE"'),
     "knobs.dtype.flag: expected exactly one of 'flag' (a command-line flag), 'override' (a Hydra override key) "
     "or 'env' (an environment variable) to say how the knob reaches the job"),
    ("int_knob_bad_bounds", BASE + '\n[knobs.threads]\nkind = "int"\nlow = 4\nhigh = 2\ndefault = 3\nflag = "--threads"\n',
     "knobs.threads.high: expected a bound above low = 4, got 2"),
    ("editable_missing_file", BASE.replace("model.py::GPT.forward", "modle.py::GPT.forward"),
     "scope.editable: expected an existing file, got 'modle.py::GPT.forward' (modle.py does not exist)"),
    ("editable_missing_symbol", BASE.replace("model.py::GPT.forward", "model.py::GPT.backward"),
     "scope.editable: expected a function or class defined in model.py, got 'model.py::GPT.backward' "
     "(no such definition)"),
    ("editable_in_locked_file", BASE.replace('locked = ["harness.py"]', 'locked = ["harness.py", "model.py"]'),
     "scope.editable: expected symbols outside locked files, got 'model.py::GPT.forward' (inside locked 'model.py')"),
    ("locked_matches_nothing", BASE.replace('locked = ["harness.py"]', 'locked = ["harnes.py"]'),
     "scope.locked: expected paths of files in the repo, got 'harnes.py' (matches no file)"),
    ("memory_limit_garbage", BASE + '\n[budget]\nmemory_limit = "lots"\n',
     "budget.memory_limit: expected a positive number of bytes or a size like '6GiB', got string 'lots'"),
    ("constraint_unknown_knob", BASE + '\n[[constraints]]\nkind = "divides"\nknob = "micro"\nvalue = 16\n',
     "constraints[0].knob: expected the name of a knob (dtype), got 'micro'"),
    ("knob_flag_in_fixed_args", BASE.replace('tokens_per_step = 128', 'tokens_per_step = 128\nargs = "--dtype bf16"'),
     "knobs.dtype.flag: expected a flag that workload.command and workload.args do not already set, got '--dtype'"),
    ("version_unknown", "version = 2\n" + BASE,
     "version: expected 1 (the only version this InfraRSI reads), got 2"),
    ("verify_alpha", BASE + "\n[verify]\nalpha = 0.7\n", "verify.alpha: expected a number in (0, 0.5), got 0.7"),
    ("table_is_scalar", "loss = 3\n" + BASE,
     "loss: expected a table, got integer 3"),
    ("cwd_renamed", BASE.replace("tokens_per_step = 128", 'tokens_per_step = 128\ncwd = "."'),
     "workload.cwd: renamed workload.workdir (the job's working directory, relative to the repo)"),
    ("workdir_outside", BASE.replace("tokens_per_step = 128", 'tokens_per_step = 128\nworkdir = "../elsewhere"'),
     "workload.workdir: expected a directory inside the repo (relative to it), got '../elsewhere'"),
    ("workdir_missing", BASE.replace("tokens_per_step = 128", 'tokens_per_step = 128\nworkdir = "projects/x"'),
     "workload.workdir: expected a directory inside the repo, got 'projects/x' (no such directory)"),
    ("env_not_text", BASE.replace("tokens_per_step = 128", "tokens_per_step = 128\nenv = {OMP_NUM_THREADS = 1}"),
     "workload.env.OMP_NUM_THREADS: expected a string (environment values are text), got integer 1"),
    ("env_set_twice", BASE.replace('tokens_per_step = 128', 'tokens_per_step = 128\nenv = {DTYPE = "fp32"}')
     .replace('flag = "--dtype"', 'env = "DTYPE"'),
     "knobs.dtype.env: expected a variable that workload.env does not already set, got 'DTYPE'"),
]


def _repo(tmp_path: Path, contract: str) -> Path:
    (tmp_path / "model.py").write_text(MODEL)
    (tmp_path / "harness.py").write_text("import time\n")
    (tmp_path / "infrarsi.toml").write_text(contract)
    return tmp_path


def test_the_base_contract_is_valid(tmp_path: Path) -> None:
    contract = load_contract(_repo(tmp_path, BASE))
    assert contract.workload.command == ("python", "train.py")
    assert contract.knob("dtype").default == "fp32"


@pytest.mark.parametrize("name,text,message", CASES, ids=[c[0] for c in CASES])
def test_malformed_contract_message(tmp_path: Path, name: str, text: str, message: str) -> None:
    repo = _repo(tmp_path, text)
    with pytest.raises(ContractError) as info:
        load_contract(repo)
    assert str(info.value) == f"{repo / 'infrarsi.toml'}: {message}"


def test_merge_method_defaults_to_auto_and_takes_a_named_method(tmp_path: Path) -> None:
    assert load_contract(_repo(tmp_path, BASE)).apply.merge_method == "auto"
    assert load_contract(_repo(tmp_path, BASE + '\n[apply]\nmerge_method = "squash"\n')).apply.merge_method == "squash"


def test_at_least_twelve_cases() -> None:
    assert len(CASES) >= 12


def test_pyproject_table_is_read_and_errors_name_it(tmp_path: Path) -> None:
    repo = _repo(tmp_path, BASE)
    (repo / "infrarsi.toml").unlink()
    table = BASE.replace("[workload]", "[tool.infrarsi.workload]").replace("[scope]", "[tool.infrarsi.scope]") \
        .replace("[knobs.dtype]", "[tool.infrarsi.knobs.dtype]")
    (repo / "pyproject.toml").write_text('[project]\nname = "x"\n\n' + table)
    assert load_contract(repo).workload.tokens_per_step == 128
    (repo / "pyproject.toml").write_text('[project]\nname = "x"\n\n' + table.replace('default = "fp32"', "default = 1"))
    with pytest.raises(ContractError) as info:
        load_contract(repo)
    assert str(info.value) == (f"{repo / 'pyproject.toml'}: tool.infrarsi.knobs.dtype.default: expected one of "
                               "'fp32', 'bf16', got integer 1")


def test_no_contract(tmp_path: Path) -> None:
    with pytest.raises(ContractError, match="no contract found"):
        load_contract(tmp_path)


def test_cli_prints_the_error_without_traceback(tmp_path: Path) -> None:
    from tests.support.tinygpt import infrarsi

    repo = _repo(tmp_path, BASE.replace('default = "fp32"', 'default = "fp16"'))
    result = infrarsi("check", str(repo))
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert result.stderr.strip() == (f"error: {repo / 'infrarsi.toml'}: knobs.dtype.default: expected one of "
                                     "'fp32', 'bf16', got string 'fp16'")
