"""Fixtures of the deploy tests."""

from __future__ import annotations

import pytest

from tests.deploy.k8s_support import Doc
from tools import k8s_validate


@pytest.fixture(params=k8s_validate.kustomizations(), ids=str)
def docs(request: pytest.FixtureRequest) -> list[Doc]:
    """The rendering of each kustomization (overlays and variants), one test each."""
    docs: list[Doc] = k8s_validate.render(request.param)
    return docs
