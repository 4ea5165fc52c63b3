"""A scripted stand-in for a coding agent: no model, no API key, same contract.

loopwarden runs it once per iteration with the iteration's prompt on stdin (the task, plus
the feedback from the last iteration's failed checks) and LOOPWARDEN_* variables in its
environment. Like a real agent it edits files and says what it did on stdout:

* iteration 1 starts from a fresh copy of template/ in work/ (so the demo can be re-run);
* each iteration it fixes ONE bug: the first one the test failures in the feedback point at
  (with no feedback yet, the first one it spots by reading the code);
* it ends with <promise>COMPLETE</promise> only when the failures it was told about are all
  fixed, and with <promise>BLOCKED</promise> when the feedback reports failures it cannot fix.

loopwarden, not the agent, decides whether the work is done: it runs the tests after every
iteration and accepts the promise only when they pass.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
TEMPLATE = HERE / "template"
WORK = HERE / "work"

# function name -> (what is wrong, the buggy code, the fixed code), in file order
FIXES = {
    "word_count": (
        "word_count split on single spaces instead of any whitespace",
        'return len(text.split(" "))',
        "return len(text.split())",
    ),
    "average_word_length": (
        "average_word_length divided by zero when there are no words",
        "    return sum(len(w) for w in words) / len(words)",
        "    if not words:\n        return 0.0\n    return sum(len(w) for w in words) / len(words)",
    ),
    "most_common": (
        "most_common returned the least frequent word",
        "return min(counts, key=lambda w: counts[w])",
        "return max(counts, key=lambda w: counts[w])",
    ),
}


def main() -> int:
    prompt = sys.stdin.read()
    iteration = int(os.environ.get("LOOPWARDEN_ITERATION", "1"))
    if iteration == 1 or not WORK.is_dir():
        shutil.rmtree(WORK, ignore_errors=True)
        shutil.copytree(TEMPLATE, WORK, ignore=shutil.ignore_patterns("__pycache__"))
        print("Started from a fresh copy of template/ in work/.")

    # The feedback loopwarden appended to the task after the last iteration, if any.
    feedback = prompt.split("\n---\n", 1)[1] if "\n---\n" in prompt else ""
    path = WORK / "textstats.py"
    source = path.read_text(encoding="utf-8")
    broken = [name for name, (_, bug, _) in FIXES.items() if bug in source]
    reported = [name for name in FIXES if name in feedback]

    if feedback:
        targets = [name for name in reported if name in broken]
        if reported and not targets:
            print("The tests still fail, but not in a way I know how to fix.")
            print("<promise>BLOCKED</promise> the remaining failures are beyond this script")
            return 0
    else:
        targets = broken[:1]
    if targets:
        name = targets[0]
        what, bug, fix = FIXES[name]
        path.write_text(source.replace(bug, fix), encoding="utf-8")
        print(f"Iteration {iteration}: fixed one bug: {what}.")
    left = [name for name in reported if name not in targets[:1]]
    if feedback and not left:
        print("Every failure I was told about is fixed; I believe the tests pass now.")
        print("<promise>COMPLETE</promise>")
    elif not feedback:
        print("I have not seen the test results yet; let loopwarden run them.")
    else:
        print(f"Still failing according to the feedback: {', '.join(left)}.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
