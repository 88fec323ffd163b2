"""bot.stages.init.cfgnode: minGPT-style ``CfgNode`` defaults found statically, overridable as ``--a.b=value``."""
from __future__ import annotations

from pathlib import Path

import libcst as cst

from bot.stages.init.cfgnode import read_cfgnode

TRAINER = '''
class Trainer:
    @staticmethod
    def get_default_config():
        C = CN()
        C.num_workers = 4
        C.batch_size = 64
        C.learning_rate = 3e-4
        return C
'''

CHARGPT = '''import sys
from mingpt.trainer import Trainer
from mingpt.utils import CfgNode as CN

def get_config():
    C = CN()
    C.system = CN()
    C.system.seed = 3407
    C.model = CN()
    C.model.model_type = 'gpt-mini'
    C.trainer = Trainer.get_default_config()
    C.trainer.learning_rate = 5e-4
    return C

if __name__ == '__main__':
    config = get_config()
    config.merge_from_args(sys.argv[1:])
'''


def _read(source: str, root: Path) -> dict[str, tuple[object, str | None, str]]:
    return {s.key: (s.default, s.type, s.token) for s in read_cfgnode(source, cst.parse_module(source), root)
            if s.convention == "cfgnode" and s.passing == "flag-equals" and s.has_default}


def test_the_builders_leaves_and_an_imported_default_config_are_read(tmp_path: Path) -> None:
    (tmp_path / "mingpt").mkdir()
    (tmp_path / "mingpt" / "__init__.py").write_text("")
    (tmp_path / "mingpt" / "trainer.py").write_text(TRAINER)
    assert _read(CHARGPT, tmp_path) == {
        "system.seed": (3407, "int", "--system.seed"),
        "model.model_type": ("gpt-mini", "str", "--model.model_type"),
        "trainer.num_workers": (4, "int", "--trainer.num_workers"),
        "trainer.batch_size": (64, "int", "--trainer.batch_size"),
        "trainer.learning_rate": (5e-4, "float", "--trainer.learning_rate"),  # the builder's override wins
    }


def test_a_default_config_in_a_module_not_in_the_repo_is_skipped(tmp_path: Path) -> None:
    keys = _read(CHARGPT, tmp_path)
    assert "trainer.batch_size" not in keys
    assert keys["system.seed"] == (3407, "int", "--system.seed")


def test_no_merge_from_args_means_no_settings(tmp_path: Path) -> None:
    source = CHARGPT.replace("config.merge_from_args(sys.argv[1:])", "pass")
    assert _read(source, tmp_path) == {}


def test_a_config_not_built_by_a_function_of_the_script_gives_no_settings(tmp_path: Path) -> None:
    source = "import sys\nconfig = load()\nconfig.merge_from_args(sys.argv[1:])\n"
    assert _read(source, tmp_path) == {}
