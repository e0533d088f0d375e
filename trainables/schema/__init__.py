"""The schema layer: what a study is (typed spec models), the errors a user can cause, the metric names.

It sits below everything else and imports nothing of ours: ``schema`` ← ``trainables`` (families, data, models,
loop) ← ``study`` (validation against the registries, tuning, tracking, CLI) ← ``dashboards``. Check with
``python -m harness.layering``.
"""
