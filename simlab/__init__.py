"""Simulators the benchmarks and tests run the engine against; not part of the shipped package.

- :mod:`simlab.cluster`: the cluster-scale workload simulator (docs/simulator.md), ``python -m simlab.cluster``;
- :mod:`simlab.synthetic`: synthetic search problems with known optima;
- :mod:`simlab.ab`: Monte Carlo of the A/B decision rule (:func:`infrarsi.stats.compare.decide`).
"""
