"""InfraRSI bot: the CLI, executors, git and forges that drive the engine."""
