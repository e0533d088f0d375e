"""Runs read by name in MLflow's own UI (issue 60, item 13): runs written by the study's tracking code, served by
``mlflow server`` on 127.0.0.1 (:func:`study.tracking.server.serve`), opened in headless Chromium like the dashboard's
screenshot test; the browser's DOM (``--dump-dom``, after the page's requests settle) must show the readable names in
the experiment's run list and, in the parent run's description, a link to each child."""

from __future__ import annotations

import html
import re
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from study.tracking.callback import MlflowTrialCallback, ParentRun
from study.tracking.server import serve
from study.tracking.store import TrackingStore
from tests.dashboards.test_screenshot import CHROMIUM
from trainables.schema import record as R
from trainables.schema.trial import CELL_KEY, FINAL_KEY, SPEC_KEY

pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists(), reason="needs Debian's chromium at /usr/bin/chromium (apt-get install -y chromium)"
)

NAMES = ["ms.p0.2 · trial 0", "ms.p0.2 · trial 1", "ms.p0.2 · trial 10", "ms.p0.2 · final · seed 3"]


def describe(config: dict) -> tuple[dict, dict]:
    return {"lr": 0.01}, {R.STAGE: R.STAGE_FINAL if FINAL_KEY in config else R.STAGE_SEARCH}


def numbered(trial_id: str, run_id: str) -> dict[str, str]:
    """Optuna's link, played: a search trial ``t_<n>`` is Optuna trial n."""
    return {R.OPTUNA_TRIAL_NUMBER: trial_id.removeprefix("t_")}


def write_table_runs(directory: Path) -> tuple[str, str, dict[str, str]]:
    """A table's parent, three search trials of cell ``ms.p0.2`` and one final seed, through the driver's callback;
    returns the experiment, the parent and the children's run ids by name."""
    store = TrackingStore(R.sqlite_uri(directory / R.MLFLOW_DB), "tbl")
    parent = store.start_parent("tbl", {}, {})
    callback = MlflowTrialCallback(ParentRun(store.uri, store.experiment_id, parent), describe, 1, on_run=numbered)
    config = {SPEC_KEY: {"name": "tbl"}, CELL_KEY: "ms.p0.2"}
    trials = [SimpleNamespace(trial_id=f"t_{i}", config=config) for i in (10, 0, 1)]
    point = {R.GROUP: "ms.p0.2", R.SOURCE_TRIAL: "t_0", "params": {"seed": 3}}
    trials.append(SimpleNamespace(trial_id="30dda6ba", config={SPEC_KEY: {"name": "tbl"}, FINAL_KEY: point}))
    runs = {trial.trial_id: callback.run_id(trial) for trial in trials}
    callback.on_experiment_end(trials)  # the end of the stage: the parent's description is written
    ids = [runs["t_0"], runs["t_1"], runs["t_10"], runs["30dda6ba"]]
    return store.experiment_id, parent, dict(zip(NAMES, ids))


def dump_dom(url: str, profile: Path) -> str:
    """The page's DOM once its scripts and requests have run (``--virtual-time-budget``), by the screenshot test's
    headless Chromium with no network side channels."""
    proc = subprocess.run(
        [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run"]
        + ["--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars"]
        + [f"--user-data-dir={profile}", "--window-size=1400,1000", "--virtual-time-budget=20000", "--dump-dom", url],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def text_of(dom: str) -> str:
    """The page's text, one space between its elements."""
    text = re.sub(r"<[^>]+>", " ", re.sub(r"<(script|style)\b.*?</\1>", "", dom, flags=re.S))
    return html.unescape(re.sub(r"\s+", " ", text))


@pytest.mark.e2e
def test_the_mlflow_ui_shows_readable_run_names_and_the_parents_links(tmp_path):
    experiment, parent, children = write_table_runs(tmp_path)
    with serve(tmp_path) as server:
        # Ordered by name, the run list is flat (by date, MLflow folds the children under their parent).
        runs = dump_dom(f"{server.uri}/#/experiments/{experiment}/runs?orderByKey=attributes.run_name", tmp_path / "a")
        page = dump_dom(f"{server.uri}/#/experiments/{experiment}/runs/{parent}", tmp_path / "b")
    listed = text_of(runs)
    listed = listed[listed.find("Run Name") :]  # the run list, after the page's menus
    assert "matching runs" in listed, text_of(runs)[-2000:]  # the run list rendered
    for name in [*NAMES, "tbl"]:
        assert f" {name} " in listed, (name, listed[:1000])
    assert not re.search(r"\bt_\d+\b|30dda6ba", listed)  # no Ray trial id in place of a name
    # The parent's description (markdown, whose links open a new tab; MLflow's own "Child runs" list has plain ones):
    # each child by name, a link to its run's page, search trials by number, then the final stage.
    anchors = re.findall(r"<a ([^>]*)>([^<]+)</a>", page)
    described = [
        (re.search(r'href="([^"]*)"', a), html.unescape(text)) for a, text in anchors if 'target="_blank"' in a
    ]
    assert [(href.group(1) if href else None, name) for href, name in described] == [
        (f"#/experiments/{experiment}/runs/{children[name]}", name) for name in NAMES
    ], anchors
    assert "4 runs of this study" in text_of(page)
