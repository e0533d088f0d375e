"""``search.select_on: {mean_last: k}`` averages a trial's last k epochs: k above ``train.epochs`` is refused at load
in one line naming the key and both values (it would be named ``mean_last_k`` and average fewer)."""

from __future__ import annotations

import pytest

from harness.driver import tiny_spec
from study.intake.spec_reader import parse_spec
from trainables.schema.errors import SpecError


@pytest.mark.parametrize(("k", "epochs"), [(9, 7), (4, 3)])
def test_mean_last_above_the_epochs_is_refused_in_one_line(k, epochs):
    raw = tiny_spec("t_mean_last", epochs, 2)
    raw["search"]["select_on"] = {"mean_last": k}
    with pytest.raises(SpecError) as caught:
        parse_spec(raw)
    text = str(caught.value)
    assert "\n" not in text.strip()
    assert f"search.select_on.mean_last {k} must be at most train.epochs {epochs}" in text


def test_mean_last_up_to_the_epochs_is_accepted():
    raw = tiny_spec("t_mean_last", 3, 2)
    raw["search"]["select_on"] = {"mean_last": 3}
    assert parse_spec(raw).search.select_on.mean_last == 3  # type: ignore[union-attr]
