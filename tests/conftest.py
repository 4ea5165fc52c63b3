"""Shared fixtures. Hypothesis profiles: ``dev`` (default) and ``ci`` (chosen when CI is set)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

import pytest
import structlog
from hypothesis import HealthCheck, settings

from loopwarden import LoopEngine

settings.register_profile("dev", max_examples=60, deadline=None)
settings.register_profile(
    "ci",
    max_examples=150,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile("ci" if os.environ.get("CI") else os.environ.get("HYPOTHESIS_PROFILE", "dev"))


@pytest.fixture(autouse=True)
def _quiet_logs() -> Iterator[None]:
    """Keep structlog's default console output out of test runs; tests capture when they care."""

    def drop(_logger: object, _name: str, _event: object) -> NoReturn:
        raise structlog.DropEvent

    # Events reach processors (so structlog.testing.capture_logs sees them) and are dropped.
    structlog.configure(
        processors=[drop],
        wrapper_class=structlog.make_filtering_bound_logger(10),
        cache_logger_on_first_use=False,
    )
    yield
    structlog.reset_defaults()


@pytest.fixture(autouse=True)
def _own_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """A private HOME: a developer's ~/.loopwarden/settings.json hooks never run in tests."""
    monkeypatch.setenv("HOME", str(tmp_path_factory.mktemp("home")))


@pytest.fixture
def db_url(tmp_path: Path) -> str:
    """A fresh SQLite database file in a temporary directory."""
    return f"sqlite:///{tmp_path / 'loopwarden.db'}"


@pytest.fixture
def engine(db_url: str, tmp_path: Path) -> Iterator[LoopEngine]:
    """An engine on a fresh SQLite file; closed after the test."""
    eng = LoopEngine(db_url)
    yield eng
    eng.close()
