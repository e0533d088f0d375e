"""A comparison's conclusion under one run, and the two agreement rules between runs (:func:`agrees`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from dashboards.compare.cells import Row

#: A comparison: (family, noise kind, noise ratio, subset).
Key = tuple[str, str, float, str]


@dataclass(frozen=True)
class Conclusion:
    """What one table says about one comparison: Δ (arm − reference) and whether it is significant (Holm)."""

    delta: float
    significant: bool

    @property
    def sign(self) -> int:
        return (self.delta > 0) - (self.delta < 0)

    def text(self) -> str:
        return f"{self.delta:+.4f}{'*' if self.significant else ' '}"


def agrees(a: Conclusion, b: Conclusion) -> tuple[bool, bool]:
    """``(match, no flip)`` of two conclusions on one comparison. Match: the same sign of Δ, and significant under
    both or under neither. No flip: a Δ significant under either has the same (non-zero) sign under the other; a
    sign change of a Δ significant under neither is no different conclusion."""
    match = a.sign == b.sign and a.significant == b.significant
    no_flip = not (a.significant or b.significant) or (a.sign == b.sign != 0)
    return match, no_flip


def _key(row: Row) -> Key:
    c = row.cell
    return c.family, c.noise_kind, c.noise_ratio, c.subset


def _conclusions_of(rows: list[Row]) -> dict[Key, Conclusion]:
    return {_key(r): Conclusion(r.diff.delta, bool(r.significant)) for r in rows if r.diff is not None}


def _key_text(key: Key) -> str:
    family, kind, ratio, subset = key
    return f"{family} {kind} p={ratio:g}{'' if subset == 'all' else ' ' + subset}"


def conclusions(
    first: list[Row], second: list[Row], names: tuple[str, str] = ("fifo", "asha")
) -> tuple[bool, list[str]]:
    """Whether two comparisons draw the same conclusions under the no-flip rule of :func:`agrees`, and one line per
    difference against the reference that both hold."""
    other = _conclusions_of(second)
    same, lines = True, []
    for key, a in _conclusions_of(first).items():
        if (b := other.get(key)) is None:
            continue
        no_flip = agrees(a, b)[1]
        same &= no_flip
        lines.append(
            f"  {_key_text(key):<30} Δ {names[0]} {a.delta:+.4f}{' *' if a.significant else '  '}  "
            f"Δ {names[1]} {b.delta:+.4f}{' *' if b.significant else '  '}  {'same' if no_flip else 'DIFFERS'}"
        )
    return same, lines


def agreement(
    a: Sequence[dict[Key, Conclusion]], b: Sequence[dict[Key, Conclusion]] | None, key: Key
) -> list[tuple[bool, bool]]:
    """:func:`agrees` over replicate pairs on one comparison: every (a's replicate i, b's replicate j) pair, or, with
    ``b`` None, every pair i < j of a's own replicates; pairs where either lacks the comparison are left out."""
    if b is None:
        pairs = [(a[i], a[j]) for i in range(len(a)) for j in range(i + 1, len(a))]
    else:
        pairs = [(x, y) for x in a for y in b]
    return [agrees(x[key], y[key]) for x, y in pairs if key in x and key in y]


def _pairings(modes: list[str]) -> list[tuple[str, str | None]]:
    """Each scheduler against itself (its replicates), each other one against FIFO."""
    out: list[tuple[str, str | None]] = [(m, None) for m in modes]
    return out + [(m, "fifo") for m in modes if m != "fifo" and "fifo" in modes]


def _share(pairs: list[tuple[bool, bool]]) -> str:
    n = len(pairs)
    return f"match {sum(m for m, _ in pairs)}/{n}, no flip {sum(f for _, f in pairs)}/{n}" if n else "no pairs"
