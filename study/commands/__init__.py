"""The command layer: what a researcher types, on top of the engine (``study.search``, ``study.final``, ...) and the
dashboards. Nothing below imports it.

- :mod:`study.commands.run`: ``python -m study.run SPEC`` (``dmlstudy run``): plan, bill, run or resume, report;
- :mod:`study.commands.invocation`: its options and the continue line it prints;
- :mod:`study.commands.status`: ``python -m study.status`` (``dmlstudy status``): where a run stands;
- :mod:`study.commands.mlflow_server`: ``dmlstudy mlflow-server DIR``;
- :mod:`study.commands.head`: ``dmlstudy up`` / ``down``, the warm local Ray head;
- :mod:`study.commands.cli`: ``dmlstudy``, which dispatches to every command.

``python -m study.run`` and ``python -m study.status`` stay as they are (continue lines, rendered job scripts and
requeued jobs call them): :mod:`study.run` and :mod:`study.status` are their entry points.
"""
