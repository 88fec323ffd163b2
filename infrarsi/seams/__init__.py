"""The seams: every Protocol the bot implements (executor, workspace, proposer, forge, bank)."""
