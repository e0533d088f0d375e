"""What tests/ and benchmarks/ share: fake dataset trees in the official layouts (:mod:`harness.fake_data`), a
study driver run in its own process group with readers of its stores (:mod:`harness.driver`), and the
kill-a-driver-then-resume harness (:mod:`harness.kill_resume`). Not installed; run from the repository root."""
