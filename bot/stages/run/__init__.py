"""Stage 3, run: trials, the search loop and verification."""
