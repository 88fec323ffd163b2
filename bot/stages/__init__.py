"""The five stages, one package each: init, doctor, run, report, apply."""
