#!/usr/bin/env python3
"""check_architecture_tree.py — the tree drawn at the top of docs/architecture.md names what the
repository holds (ctest `lint.architecture`; issue 26: the page had drifted from the tree).

Usage: check_architecture_tree.py REPO_ROOT [--self-test]

In the first fenced block of docs/architecture.md it requires:
- every public header (include/streampool/*) as an entry `name.hpp` at the start of a line;
- every folder of src/, nested ones included, as an entry `name/` at the start of a line
  (src/driver/cuda as `cuda/`), and every top-level folder of tests/ as a word;
- every top-level folder of the repository that git keeps (not build*, not hidden) as `name/`;
and that every entry at the start of a line names something that exists (a folder at the block's
left edge is a top-level folder, one indented under `src/` a folder of src/ or of its parent
entry). Exit 1 listing what is missing or stale; 2 on bad usage. `--self-test` runs it on a small
tree with one stale and one missing entry of each kind and exits 1 unless exactly those are found.
"""

import os
import re
import sys

import tempfile

import lint_cli  # tests/lint/lint_cli.py: the command line and report every check shares

ENTRY = re.compile(r"^( *)([\w.+-]+(?:/[\w.+-]+)*/?)(?=\s|$)")


def first_block(path):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    m = re.search(r"^```[^\n]*\n(.*?)^```", text, re.S | re.M)
    if not m:
        return 0, []
    return text[:m.start(1)].count("\n"), m.group(1).split("\n")


def check(root):
    offset, lines = first_block(os.path.join(root, "docs", "architecture.md"))
    if not lines:
        return ["docs/architecture.md: no fenced block (the tree) found"]
    problems = []
    entries = []  # (indent, name, line)
    for n, line in enumerate(lines, 1):
        m = ENTRY.match(line)
        if m:
            entries.append((len(m.group(1)), m.group(2), n + offset))
    names = {name for _, name, _ in entries} | {name.split("/")[0] + "/" for _, name, _ in entries}
    words = set(re.findall(r"[\w.+-]+", "\n".join(lines)))

    headers = sorted(os.listdir(os.path.join(root, "include", "streampool")))
    problems += [f"public header include/streampool/{h} is not in the tree" for h in headers if h not in names]
    for base, dirs, _ in os.walk(os.path.join(root, "src")):
        for d in sorted(dirs):
            if d + "/" not in names:
                problems.append(f"folder {os.path.relpath(os.path.join(base, d), root)} is not in the tree")
    for d in sorted(os.listdir(os.path.join(root, "tests"))):
        if os.path.isdir(os.path.join(root, "tests", d)) and d not in words:
            problems.append(f"folder tests/{d} is not in the tree")
    for d in sorted(os.listdir(root)):
        if os.path.isdir(os.path.join(root, d)) and not d.startswith((".", "build")) and d + "/" not in names:
            problems.append(f"top-level folder {d}/ is not in the tree")

    # Stale entries: what the block names at a line start must exist where it stands.
    src_parent = headers_parent = None
    for indent, name, n in entries:
        if indent == 0:
            src_parent = "src" if name == "src/" else None
            headers_parent = name.startswith("include/")
            target = name.rstrip("/")
            if name.endswith("/") and not os.path.isdir(os.path.join(root, target)) and \
                    not os.path.isdir(os.path.join(root, "include", target.split("/")[-1])):
                problems.append(f"docs/architecture.md tree line {n}: {name} does not exist")
        elif name.endswith("/") and src_parent:
            found = any(name.rstrip("/") == d for base, dirs, _ in os.walk(os.path.join(root, "src")) for d in dirs)
            if not found:
                problems.append(f"docs/architecture.md tree line {n}: src folder {name} does not exist")
        elif headers_parent and not name.endswith("/") and name.split(".")[-1] in ("hpp", "h") and \
                not os.path.exists(os.path.join(root, "include", "streampool", name)):
            problems.append(f"docs/architecture.md tree line {n}: header {name} does not exist")
    return problems


def self_test():
    with tempfile.TemporaryDirectory() as root:
        for d in ("include/streampool", "src/core", "src/driver/cuda", "src/new", "tests/unit", "tests/gpu", "docs",
                  "perf", "build-x", ".git"):
            os.makedirs(os.path.join(root, d))
        for h in ("a.hpp", "b.h"):
            open(os.path.join(root, "include", "streampool", h), "w").close()
        tree = ("# Architecture\n\n```\ninclude/streampool/   headers\n  a.hpp   one\n  gone.hpp   stale\nsrc/\n"
                "  core/   x\n  driver/   y\n    cuda/   z\n  old/   stale\ntests/    unit, and the rest\n"
                "docs/\nlost/   stale\n```\n")
        with open(os.path.join(root, "docs", "architecture.md"), "w") as f:
            f.write(tree)
        got = sorted(check(root))
        want = sorted(["public header include/streampool/b.h is not in the tree",
                       "folder src/new is not in the tree",
                       "folder tests/gpu is not in the tree",
                       "top-level folder perf/ is not in the tree",
                       "docs/architecture.md tree line 6: header gone.hpp does not exist",
                       "docs/architecture.md tree line 11: src folder old/ does not exist",
                       "docs/architecture.md tree line 14: lost/ does not exist"])
        return lint_cli.expect_report("check_architecture_tree", got, want, "the 7 problems of its test tree")


def check_root(root):
    problems = check(root)
    return (problems,
            f"check_architecture_tree: {len(problems)} difference(s) between docs/architecture.md's tree and the "
            "repository: update the tree",
            "check_architecture_tree: docs/architecture.md's tree names every public header, src/ and tests/ folder")


def main(argv):
    return lint_cli.run(argv, __doc__, self_test, check_root)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
