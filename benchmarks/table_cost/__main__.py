"""``python -m benchmarks.table_cost``: :func:`benchmarks.table_cost.main`."""

from __future__ import annotations

from benchmarks.table_cost import main

if __name__ == "__main__":
    raise SystemExit(main())
