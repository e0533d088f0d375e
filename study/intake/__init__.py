"""Intake: a spec file read, checked, given its directory and its plan. After :func:`study.intake.load.load_plan`
nothing asks "study or table?" again: a study is a table of one arm and one condition, and every consumer reads the
plan's data (its cells, their arms and replicates, the noun it calls itself by).

- :mod:`study.intake.spec_reader`: YAML → a validated :class:`~trainables.schema.spec.StudySpec` (``--set`` overrides, a
  study's directory);
- :mod:`study.intake.validation`: the checks that need the machine (data roots, weights, resources);
- :mod:`study.intake.layout`: where a study keeps what (its directory, stores, files);
- :mod:`study.intake.cells`: a table spec expanded into its cells (arm × condition × replicate), pure;
- :mod:`study.intake.plan`: :class:`~study.intake.plan.StudyPlan`, what one run searches and how its trials group;
- :mod:`study.intake.asha_cost`: what early stopping is expected to leave of a cell's search;
- :mod:`study.intake.load`: ``load_plan``, the one place a spec file becomes a plan.

Pure over validated specs: no Ray, no stores (a plan is built before anything starts).
"""
