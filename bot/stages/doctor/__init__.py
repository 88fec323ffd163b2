"""Stage 2, doctor: profile the baseline (noise, phases, memory, MFU, fingerprint)."""
