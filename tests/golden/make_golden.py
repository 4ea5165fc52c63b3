"""Make the golden database of a released schema version: ``python tests/golden/make_golden.py``.

Run it once per released schema version with that release's code, and commit the file it
writes (``schema-vN.db``). It holds a few loops, one in each state a resume must handle, and a
task with stop hooks; tests/test_migrations.py opens a copy, upgrades it and resumes them.
Never regenerate an existing file: it stands for databases users already have.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from _driver import leave_in  # noqa: E402
from loopwarden import LoopConfig, LoopEngine, rules  # noqa: E402
from loopwarden.store import SCHEMA_VERSION  # noqa: E402

DONE = "OK <promise>COMPLETE</promise> golden"


def main() -> None:
    path = HERE / f"schema-v{SCHEMA_VERSION}.db"
    if path.exists():
        raise SystemExit(f"{path} exists; golden databases are never regenerated")
    url = f"sqlite:///{path}"
    config = LoopConfig(max_iterations=4, rules=[rules.pattern("says-ok", r"\bOK\b")])
    engine = LoopEngine(url, owner="golden")
    try:
        engine.hooks.register("golden-hooks", "default", metadata={"by": "golden"})
        engine.create("golden", config, prompt="initialized", loop_id="g-initialized")
        ex = engine.start("golden", config, prompt="executing", loop_id="g-executing")
        engine.submit(ex.id, "not yet")
        for state in ("validating", "deciding"):
            loop = engine.start("golden", config, prompt=state, loop_id=f"g-{state}")
            engine.submit(loop.id, "not yet")
            leave_in(url, loop.id, state, DONE)
        done = engine.start("golden-hooks", config, prompt="completed", loop_id="g-completed")
        engine.submit(done.id, "not yet")
        engine.submit(done.id, DONE)
        blocked = engine.start("golden", config, prompt="blocked", loop_id="g-blocked")
        engine.block(blocked.id, "waiting for a human")
    finally:
        engine.close()
    print(path)


if __name__ == "__main__":
    main()
