"""The probe a test job writes its steps through: one JSON line a step to the executor's probe channel."""

PROBE = """
import json, os
_fd = int(os.environ["INFRARSI_PROBE_FD"]) if "INFRARSI_PROBE_FD" in os.environ else \\
    os.open(os.environ["INFRARSI_PROBE_FILE"], os.O_WRONLY | os.O_APPEND)
_rank = {"rank": int(os.environ["RANK"])} if "RANK" in os.environ else {}
def step(i, **kw):
    os.write(_fd, (json.dumps({"event": "step", "step": i, **_rank, **kw}) + "\\n").encode())
"""
