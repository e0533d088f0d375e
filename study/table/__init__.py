"""A paper table as one study (``python -m study.run TABLE.yaml``): its ``spec`` (arms × cells), the ``search`` that gives every cell its budget, the ``run``, its live ``progress`` and ``status``."""
