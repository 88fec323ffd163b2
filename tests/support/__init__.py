"""Test helpers: builders of real repositories, findings and a replaying Messages API server (not shipped)."""
