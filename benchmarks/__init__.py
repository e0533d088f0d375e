"""Benchmarks of the platform: ``python -m benchmarks [--quick]`` runs the suite (:mod:`benchmarks.__main__`); the
other modules are single benchmarks, each runnable on its own. Benchmarks import from ``harness/``, never ``tests/``."""
