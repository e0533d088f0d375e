from __future__ import annotations

from pathlib import Path

import pytest

from dashboards.build import build_dashboard
from tests.dashboards.page import Page, read_page
from tests.dashboards.synthetic import NAME, Synthetic, make_running_store, make_synthetic


@pytest.fixture(scope="session")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Synthetic, Path, Page]:
    """One synthetic store and its page, shared by the tests that only read them."""
    tmp_path = tmp_path_factory.mktemp("synthetic")
    synthetic = make_synthetic(tmp_path)
    page_path = build_dashboard([NAME], synthetic.uri, tmp_path / "out")
    return synthetic, page_path, read_page(page_path)


@pytest.fixture
def running_store(tmp_path: Path) -> tuple[str, str]:
    return make_running_store(tmp_path)
