"""The Slurm executor: one trial = one batch job, run on the compute node under our own agent.

See docs/distributed.md ("Slurm") for the design and :mod:`.executor` for the bot side.
"""

from bot.executors.slurm.executor import SlurmExecutor

__all__ = ["SlurmExecutor"]
