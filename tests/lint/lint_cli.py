"""tests/lint/lint_cli.py — what the repository checks of tests/lint share: the command line
`CHECK REPO_ROOT [--self-test]` (usage on stderr and status 2 for anything else), the report of a
run (each problem on a line, then a summary; status 1 when there are problems) and the self-test's
comparison of what a check reported on its test tree with what it should have."""

from __future__ import annotations

import os
import sys
from typing import Callable, List, Sequence, Tuple


def run(argv: Sequence[str], doc: str, self_test: Callable[[], int],
        check_root: Callable[[str], Tuple[List[str], str, str]]) -> int:
    """`check_root(root)` returns (problems, the summary when there are some, the one when not)."""
    if len(argv) == 3 and argv[2] == "--self-test":
        return self_test()
    if len(argv) != 2 or argv[1] in ("-h", "--help") or not os.path.isdir(argv[1]):
        print(doc.split("\n\n")[1], file=sys.stderr)
        return 2
    problems, failed, passed = check_root(os.path.abspath(argv[1]))
    if problems:
        print("\n".join(problems))
        print(failed)
        return 1
    print(passed)
    return 0


def expect_report(tool: str, got: List[str], want: List[str], what: str) -> int:
    """The self-test's verdict: 0 (saying so) when `got` is `want`, else 1 with both lists."""
    if got != want:
        print(f"{tool} self-test: expected\n  " + "\n  ".join(want) + "\nbut got\n  " + "\n  ".join(got))
        return 1
    print(f"{tool} self-test: the check reports exactly {what}")
    return 0
