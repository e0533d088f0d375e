"""The points of a grid search: every combination of a categorical search space's choices, ``when:`` honoured.

Pure (no Optuna): the spec check counts the grid (:mod:`study.intake.validation`) and the grid sampler visits it
(:class:`study.search.space.ConditionalGridSampler`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from trainables.schema.space import condition_holds

if TYPE_CHECKING:
    from trainables.schema.space import ParamSpec

__all__ = ["grid_points"]


def grid_points(space: dict[str, ParamSpec]) -> list[dict[str, Any]]:
    """Every combination of the categorical ``space``, in declaration order, honouring ``when:``.

    A conditional parameter is expanded only under the earlier values that activate it, so
    ``family: [triplet, marginal]`` with ``mining`` (when triplet) over two rules gives 3 points, not 4.
    """
    points: list[dict[str, Any]] = [{}]
    for name, param in space.items():
        grown: list[dict[str, Any]] = []
        for point in points:
            if condition_holds(param.when, point):
                grown.extend({**point, name: choice} for choice in param.choices)  # type: ignore[union-attr]
            else:
                grown.append(point)
        points = grown
    return points
