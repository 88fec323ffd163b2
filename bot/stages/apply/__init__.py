"""Stage 5, apply: the promotion commit, the one pull request, approval and merge."""
