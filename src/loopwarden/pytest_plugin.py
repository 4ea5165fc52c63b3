"""loopwarden's pytest plugin (registered through the ``pytest11`` entry point).

Fixtures:

- ``loopwarden_engine``: a :class:`~loopwarden.LoopEngine` on a fresh SQLite file in the
  test's temporary directory, closed after the test.
- ``loopwarden_db_url``: that database's URL, to open a second engine on the same data (as a
  resumed process would).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from loopwarden.engine import LoopEngine


@pytest.fixture
def loopwarden_db_url(tmp_path: Path) -> str:
    """A fresh SQLite database URL in the test's temporary directory."""
    return f"sqlite:///{tmp_path / 'loopwarden-test.db'}"


@pytest.fixture
def loopwarden_engine(loopwarden_db_url: str) -> Iterator[LoopEngine]:
    """A LoopEngine on a fresh SQLite file, closed after the test."""
    engine = LoopEngine(loopwarden_db_url)
    try:
        yield engine
    finally:
        engine.close()
