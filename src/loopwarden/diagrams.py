"""The machine drawn from the machine itself: Mermaid, Graphviz DOT and a self-contained SVG.

Every edge comes from ``machine.MACHINE.events``, so a diagram can never disagree with the
code. Given ``counts`` (how often each ``(source, trigger, dest)`` fired in one loop, see
:func:`transition_counts`), the visited states are highlighted and each edge carries its count.

``python -m loopwarden.diagrams DIR`` rewrites ``DIR/loop.mmd`` and ``DIR/loop.svg``; a test
fails when the committed files are stale.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from html import escape
from itertools import pairwise
from pathlib import Path

from loopwarden.machine import MACHINE
from loopwarden.model import CheckpointInfo, State

__all__ = ["Edge", "dot", "edges", "mermaid", "svg", "transition_counts", "write_diagrams"]

Counts = Mapping[tuple[str, str, str], int]


@dataclass(frozen=True, slots=True)
class Edge:
    """One transition of the machine: source, trigger, destination and its guard names."""

    source: str
    trigger: str
    dest: str
    conditions: tuple[str, ...]

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.source, self.trigger, self.dest)

    def label(self) -> str:
        if not self.conditions:
            return self.trigger
        return f"{self.trigger} [{', '.join(self.conditions)}]"


def edges() -> list[Edge]:
    """Every transition, in the order the machine declares them."""
    out: list[Edge] = []
    for trigger, event in MACHINE.events.items():
        for source, transitions in event.transitions.items():
            for t in transitions:
                if t.dest is None:  # internal transitions: this machine declares none
                    continue
                names = tuple(getattr(c.func, "__name__", str(c.func)) for c in t.conditions)
                out.append(Edge(source, trigger, t.dest, names))
    return out


def transition_counts(checkpoints: Sequence[CheckpointInfo]) -> dict[tuple[str, str, str], int]:
    """How often each transition fired, from a loop's checkpoints (consecutive pairs)."""
    counts: dict[tuple[str, str, str], int] = {}
    for prev, cur in pairwise(checkpoints):
        key = (prev.state.value, cur.trigger, cur.state.value)
        counts[key] = counts.get(key, 0) + 1
    return counts


def _states() -> list[str]:
    return [s.value for s in State]


def _visited(counts: Counts | None) -> set[str]:
    if not counts:
        return set()
    seen = {State.INITIALIZED.value}
    for (source, _trigger, dest), n in counts.items():
        if n:
            seen.update((source, dest))
    return seen


def mermaid(counts: Counts | None = None) -> str:
    """A Mermaid ``stateDiagram-v2``; with counts, visited states styled and edges counted."""
    lines = ["stateDiagram-v2", f"    [*] --> {State.INITIALIZED.value}"]
    for e in edges():
        label = e.label()
        if counts is not None:
            label += f" ({counts.get(e.key, 0)}x)"
        lines.append(f"    {e.source} --> {e.dest}: {label}")
    for s in State:
        if s is State.COMPLETED:
            lines.append(f"    {s.value} --> [*]")
    visited = _visited(counts)
    if visited:
        lines.append("    classDef visited fill:#d8f0d8,stroke:#2a7a2a,stroke-width:2px")
        lines.extend(f"    class {s} visited" for s in _states() if s in visited)
    return "\n".join(lines) + "\n"


def dot(counts: Counts | None = None) -> str:
    """A Graphviz DOT digraph; with counts, visited states filled and edges counted."""
    visited = _visited(counts)
    lines = [
        "digraph loopwarden {",
        "    rankdir=LR;",
        '    node [shape=box, style="rounded"];',
        '    start [shape=point, label=""];',
    ]
    for s in State:
        attrs = ["peripheries=2"] if s.terminal else []
        if s.value in visited:
            attrs.append('style="rounded,filled", fillcolor="#d8f0d8"')
        suffix = f" [{', '.join(attrs)}]" if attrs else ""
        lines.append(f"    {s.value}{suffix};")
    lines.append(f"    start -> {State.INITIALIZED.value};")
    for e in edges():
        label = e.label()
        if counts is not None:
            label += f" ({counts.get(e.key, 0)}x)"
        lines.append(f'    {e.source} -> {e.dest} [label="{label}"];')
    lines.append("}")
    return "\n".join(lines) + "\n"


# ----- SVG: a fixed layered layout computed from the edges ------------------------------------

_W, _H = 150, 44  # node box
_COL, _ROW = 290, 120  # spacing
_MARGIN = 40
_TOP = 90  # room above the middle row for the arcs that go back


def _layout() -> dict[str, tuple[int, int]]:
    """Live states left to right in machine order on the middle row; terminal states in the
    last column, completed above and escalated below blocked."""
    live = [s.value for s in State if not s.terminal]
    place = {name: (col, 1) for col, name in enumerate(live)}
    last = len(live)
    place[State.COMPLETED.value] = (last, 0)
    place[State.BLOCKED.value] = (last, 1)
    place[State.ESCALATED.value] = (last, 2)
    return place


def _centre(place: tuple[int, int]) -> tuple[float, float]:
    col, row = place
    return _MARGIN + col * _COL + _W / 2, _MARGIN + _TOP + row * _ROW + _H / 2


def _route(
    a: tuple[int, int], b: tuple[int, int]
) -> tuple[float, float, float, float, float, float]:
    """Start, control and end points of an edge's quadratic curve."""
    (x1, y1), (x2, y2) = _centre(a), _centre(b)
    span = abs(b[0] - a[0])
    if a[1] == b[1] and b[0] == a[0] + 1:
        return x1 + _W / 2, y1, (x1 + x2) / 2, y1, x2 - _W / 2, y2
    if a[1] == b[1] and b[0] < a[0]:  # back along the row: arc above
        sx, ex = x1 - 20, x2 + 20
        return sx, y1 - _H / 2, (sx + ex) / 2, y1 - _H / 2 - 50 * span, ex, y2 - _H / 2
    if a[1] == b[1]:  # forward, skipping states: arc below
        sx, ex = x1 + 20, x2 - 20
        return sx, y1 + _H / 2, (sx + ex) / 2, y1 + _H / 2 + 45 * span, ex, y2 + _H / 2
    if b[0] < a[0]:  # back from another row: sweep below
        return x1 - _W / 2, y1, (x1 + x2) / 2, max(y1, y2) + 70, x2, y2 + _H / 2
    return x1 + _W / 2, y1, (x1 + x2) / 2 + 30, (y1 + y2) / 2, x2 - _W / 2, y2


def svg(counts: Counts | None = None) -> str:
    """A standalone SVG of the machine (no Graphviz needed)."""
    place = _layout()
    cols = max(c for c, _ in place.values()) + 1
    rows = max(r for _, r in place.values()) + 1
    width = _MARGIN * 2 + (cols - 1) * _COL + _W
    height = _MARGIN * 2 + _TOP + (rows - 1) * _ROW + _H + 80
    visited = _visited(counts)
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">',
        '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" '
        'markerWidth="7" markerHeight="7" orient="auto-start-reverse">'
        '<path d="M 0 0 L 10 5 L 0 10 z" fill="#444"/></marker></defs>',
        f'<rect width="{width}" height="{height}" fill="white"/>',
    ]
    grouped: dict[tuple[str, str], list[str]] = {}
    for e in edges():
        label = e.label()
        if counts is not None:
            label += f" ({counts.get(e.key, 0)}x)"
        grouped.setdefault((e.source, e.dest), []).append(label)
    for (source, dest), labels in grouped.items():
        sx, sy, cx, cy, ex, ey = _route(place[source], place[dest])
        out.append(
            f'<path d="M {sx:.1f} {sy:.1f} Q {cx:.1f} {cy:.1f} {ex:.1f} {ey:.1f}" fill="none" '
            'stroke="#444" stroke-width="1.2" marker-end="url(#arrow)"/>'
        )
        lx, ly = (sx + 2 * cx + ex) / 4, (sy + 2 * cy + ey) / 4
        for k, text in enumerate(labels):
            out.append(
                f'<text x="{lx:.1f}" y="{ly - 5 + 13 * k:.1f}" text-anchor="middle" '
                f'fill="#222" stroke="white" stroke-width="3" paint-order="stroke">'
                f"{escape(text)}</text>"
            )
    for s in State:
        x, y = _centre(place[s.value])
        fill = "#d8f0d8" if s.value in visited else ("#f3f3f3" if s.terminal else "#ffffff")
        stroke = "#2a7a2a" if s.value in visited else "#333"
        out.append(
            f'<rect x="{x - _W / 2:.1f}" y="{y - _H / 2:.1f}" width="{_W}" height="{_H}" '
            f'rx="10" fill="{fill}" stroke="{stroke}" stroke-width="{2 if s.terminal else 1.4}"/>'
        )
        out.append(
            f'<text x="{x:.1f}" y="{y + 5:.1f}" text-anchor="middle" font-size="14" '
            f'font-weight="bold">{s.value}</text>'
        )
    out.append("</svg>")
    return "\n".join(out) + "\n"


def write_diagrams(directory: str | Path) -> list[Path]:
    """Write loop.mmd and loop.svg (the machine itself) into ``directory``."""
    target = Path(directory)
    target.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in (("loop.mmd", mermaid()), ("loop.svg", svg())):
        path = target / name
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written


def _main(argv: Iterable[str]) -> int:
    args = list(argv)
    for path in write_diagrams(args[0] if args else "diagrams"):
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(_main(sys.argv[1:]))
