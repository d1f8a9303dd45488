"""Fixtures of the deploy tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.deploy.k8s_support import SQL_HA, Doc, dev_with
from tools import k8s_validate


@pytest.fixture(params=k8s_validate.kustomizations(), ids=str)
def docs(request: pytest.FixtureRequest) -> list[Doc]:
    """The rendering of each kustomization (overlays and variants), one test each."""
    docs: list[Doc] = k8s_validate.render(request.param)
    return docs


@pytest.fixture(scope="package")
def ha_variant(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """overlays/dev with components/sql-ha, as a kustomization of its own."""
    return dev_with(SQL_HA, tmp_path_factory.mktemp("k8s"))


@pytest.fixture(scope="package")
def ha(ha_variant: Path) -> list[Doc]:
    """Its rendering."""
    return k8s_validate.render(ha_variant)
