"""A paper table as one study (``python -m study.run TABLE.yaml``): its ``spec`` (arms × cells), the ``search`` that gives every cell its budget, the ``run``, its live ``progress`` and ``status``."""

from __future__ import annotations

from study.runtime.face import face_of

#: The wing's face: each public name → the module that holds it, resolved when first asked for
#: (:mod:`study.runtime.face`: importing the wing imports none of them; harness/layering.py draws the real import).
FACE: dict[str, str] = {
    "CellStatus": "study.table.status",
    "EDGE_SHARE": "study.table.status",
    "RunSpec": "study.table.spec",
    "SlotUse": "study.table.status",
    "Table": "study.table.spec",
    "TableCell": "study.table.spec",
    "asymptotic_share": "study.table.asha_cost",
    "edge_flag": "study.table.status",
    "expected_share": "study.table.asha_cost",
    "halving_share": "study.table.asha_cost",
    "is_table": "study.table.spec",
    "load_run": "study.table.spec",
    "load_table": "study.table.spec",
    "milestones": "study.table.asha_cost",
    "parse_table": "study.table.spec",
    "print_table_status": "study.table.status",
    "run_plan": "study.table.run",
    "run_table": "study.table.run",
    "slot_use": "study.table.status",
    "table_status": "study.table.status",
}
__getattr__, __dir__ = face_of(__name__, FACE)
__all__ = sorted(FACE)
