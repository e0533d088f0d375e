"""A ``tell`` the Optuna store refuses past ``tracking.outage_budget_s``, in a real study on a real PostgreSQL: the
driver ends with exit 1 and one line (Ray's ``OptunaSearch`` used to swallow it as a warning, leaving the trial
RUNNING in Optuna while Ray and MLflow held it as done), and ``--resume`` then loses nothing and counts nothing twice.

The fault is placed at exactly that moment by a trigger on Optuna's ``trials`` table that ends its own connection when
the second trial is told COMPLETE (the server's "terminating connection due to administrator command", as a restart
gives); every retry meets it again until the budget is spent. Skips, saying why, where PostgreSQL cannot be had."""

from __future__ import annotations

import subprocess
import sys
import tempfile

import optuna
import pytest
import yaml

from harness.driver import driver_env, mlflow_children, tiny_spec
from harness.postgres import postgres_server, postgres_unavailable_reason

pytestmark = pytest.mark.e2e
_reason = postgres_unavailable_reason()

TRIALS, EPOCHS = 3, 2
_TRAP = """
CREATE FUNCTION refuse_tell() RETURNS trigger AS $$
BEGIN
  PERFORM pg_terminate_backend(pg_backend_pid());
  RETURN NEW;
END $$ LANGUAGE plpgsql;
CREATE TRIGGER refuse_tell BEFORE UPDATE ON trials FOR EACH ROW
  WHEN (OLD.state = 'RUNNING' AND NEW.state = 'COMPLETE' AND NEW.number = 1) EXECUTE FUNCTION refuse_tell();
"""


def _run(tmp_path, ray_tmp: str, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "study.run", "spec.yaml", "--no-dashboard", *extra],
        cwd=tmp_path,
        env=driver_env(ray_tmp),
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.mark.usefixtures("on_warm_head")
@pytest.mark.skipif(_reason is not None, reason=_reason or "")
def test_a_tell_past_the_budget_ends_the_study_and_resume_loses_nothing(tmp_path):
    with postgres_server() as pg, tempfile.TemporaryDirectory(prefix="rt", dir="/tmp") as ray_tmp:
        pg.create_database("optuna")
        spec = tiny_spec("t_tell", EPOCHS, TRIALS, max_concurrent=1, sampler={"type": "random", "seed": 0})
        spec["storage"] = str(tmp_path / "runs")
        spec["tracking"] = {"optuna_uri": pg.url("optuna"), "outage_budget_s": 2}
        (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec))
        # Optuna's tables exist once the study does: create it as the driver would, then arm the trap.
        optuna.create_study(study_name="t_tell", storage=pg.url("optuna", password=pg.password), direction="maximize")
        pg.execute(_TRAP, "optuna")

        first = _run(tmp_path, ray_tmp)
        lines = [line for line in first.stderr.splitlines() if line.startswith("error:")]
        assert first.returncode == 1, first.stderr[-3000:]
        assert len(lines) == 1 and "longer than tracking.outage_budget_s" in lines[0], first.stderr[-3000:]
        assert "Traceback" not in first.stderr, first.stderr[-3000:]
        states = pg_states(pg)
        assert states.get("RUNNING") == 1 and states.get("COMPLETE") == 1, states  # trial 1 was never told

        pg.execute("DROP TRIGGER refuse_tell ON trials", "optuna")
        second = _run(tmp_path, ray_tmp, "--resume")
        assert second.returncode == 0, second.stderr[-3000:]
        states_after = pg_states(pg)

    # Optuna: every trial told once, COMPLETE; nothing lost, nothing twice.
    assert states_after == {"COMPLETE": TRIALS}, states_after
    # MLflow: one FINISHED run per trial, each epoch logged once.
    client, _, children = mlflow_children(tmp_path / "runs" / "t_tell", "t_tell")
    assert len(children) == TRIALS and all(r.info.status == "FINISHED" for r in children)
    for run in children:
        steps = [m.step for m in client.get_metric_history(run.info.run_id, "test/recall_at_1")]
        assert sorted(steps) == list(range(1, EPOCHS + 1)), (run.info.run_id, steps)


def pg_states(pg) -> dict[str, int]:
    import psycopg

    with psycopg.connect(host="127.0.0.1", port=pg.port, user="postgres", password=pg.password, dbname="optuna") as c:
        return dict(c.execute("SELECT state::text, count(*) FROM trials GROUP BY state").fetchall())
