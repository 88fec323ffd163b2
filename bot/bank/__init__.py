"""The experience bank's bot side: sharing it through a git remote."""
