"""The locked task contract: records, strict loading, scope checks and the lock file."""

from infrarsi.contract.errors import ContractError
from infrarsi.contract.load import load_contract, parse_contract
from infrarsi.contract.model import Contract, Knob, KnobValue

__all__ = ["Contract", "ContractError", "Knob", "KnobValue", "load_contract", "parse_contract"]
