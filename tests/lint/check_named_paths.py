#!/usr/bin/env python3
"""check_named_paths.py — every repository path that the docs and the code's comments name
(`src/driver/sim/sim_pool.cpp`, `tests/unit/replay/...`, `docs/tuning.md`) exists (ctest
`lint.named_paths`, issue 26: comments and docs had kept the paths of files that had moved).

Usage: check_named_paths.py REPO_ROOT [--self-test]

A named path is a word that starts with one of the repository's top folders (TOPS below), followed
by `/` and at least one more part, in README.md, docs/**/*.md and the text files under include/,
src/, perf/, tests/, python/, scripts/, kernels/ and examples/. It must be a file or folder of the
tree, from the root or from the naming file's folder or one above it (perf/tests/ names perf's
tests/). Not checked: docs/benchmarks-history.md and docs/logs/ (a log keeps the names of its day),
words with a placeholder (`<...>`, `*`, `NAME`, `...`, `{`, `$`), and a path inside a longer one
(`/usr/local/cuda/include/...`, `pytorch/test/...`), tests/lint/ itself (its test trees), tests/data/,
and the few names of ELSEWHERE (build outputs, the CUDA toolkit's include/cccl). A trailing
`:LINE` or `:LINE-LINE` is ignored.

Exit 1 naming each missing path (file:line: path); 2 on bad usage. `--self-test` runs the check on
a small tree it writes and exits 1 unless exactly its missing paths are reported.
"""

import os
import re
import sys

import tempfile

import lint_cli  # tests/lint/lint_cli.py: the command line and report every check shares

TOPS = ("src", "include", "tests", "docs", "perf", "scripts", "python", "kernels", "examples")
PATH = re.compile(r"(?<![\w./\-~])((?:%s)/[\w.+\-/<>*{}$]*[\w/>*}])" % "|".join(TOPS))
PLACEHOLDER = re.compile(r"[<>*{}$]|\.\.\.|NAME|XX|/$")
TEXT_EXT = (".md", ".cpp", ".hpp", ".h", ".cu", ".cuh", ".py", ".cmake", ".txt", ".toml", ".sh", ".c", ".in")
SKIP = ("docs/benchmarks-history.md", "docs/logs/", "tests/data/", "tests/fuzz/corpus/", "python/build/", "tests/lint/")
# Named paths that are not in the tree on purpose: build outputs and the CUDA toolkit's folders.
ELSEWHERE = ("perf/streampool-bench", "include/cccl", "include/cub")


def files_to_scan(root):
    out = [os.path.join(root, "README.md")]
    for top in ("docs",) + tuple(t for t in TOPS if t != "docs"):
        for base, dirs, names in os.walk(os.path.join(root, top)):
            dirs[:] = [d for d in dirs if not d.startswith(".") and d not in ("__pycache__", "build")]
            for n in names:
                path = os.path.join(base, n)
                rel = os.path.relpath(path, root).replace(os.sep, "/")
                if any(rel.startswith(s) or rel == s for s in SKIP):
                    continue
                if n.endswith(TEXT_EXT) or n == "CMakeLists.txt" or (top == "scripts" and "." not in n):
                    out.append(path)
    return sorted(set(p for p in out if os.path.isfile(p)))


def exists_from(root, folder, named):
    """From the root, or relative to the naming file's folder or one above it (perf/tests names
    tests/... of perf/, python/README.md names tests/... of python/)."""
    while True:
        if os.path.exists(os.path.join(folder, named)):
            return True
        if os.path.samefile(folder, root):
            return False
        folder = os.path.dirname(folder)


def check(root):
    problems = []
    for path in files_to_scan(root):
        rel = os.path.relpath(path, root).replace(os.sep, "/")
        try:
            with open(path, encoding="utf-8") as f:
                lines = f.read().split("\n")
        except UnicodeDecodeError:
            continue
        for n, line in enumerate(lines, 1):
            for m in PATH.finditer(line):
                named = re.sub(r":\d+(?:-\d+)?$", "", m.group(1)).rstrip(".")
                if PLACEHOLDER.search(named):
                    continue
                if named.startswith(ELSEWHERE) or exists_from(root, os.path.dirname(path), named):
                    continue
                problems.append(f"{rel}:{n}: {named}")
    return problems


def self_test():
    with tempfile.TemporaryDirectory() as root:
        for d in ("src/core", "docs", "tests/unit"):
            os.makedirs(os.path.join(root, d))
        files = {
            "src/core/a.cpp": "// see src/core/a.cpp:12-14 and src/core/gone.cpp, docs/x.md.\n"
                              "// /usr/local/cuda/include/cuda.h, tests/unit/<layer>/NAME_test.cpp\n",
            "docs/x.md": "`src/core/a.cpp` and (tests/unit/moved_test.cpp); src/core, docs/x.md#anchor\n",
            "README.md": "[x](docs/x.md) [y](docs/y.md)\n",
        }
        for name, text in files.items():
            with open(os.path.join(root, name), "w", encoding="utf-8") as f:
                f.write(text)
        got = sorted(check(root))
        want = sorted(["README.md:1: docs/y.md", "docs/x.md:1: tests/unit/moved_test.cpp", "src/core/a.cpp:1: src/core/gone.cpp"])
        return lint_cli.expect_report("check_named_paths", got, want, "the 3 missing paths of its test tree")


def check_root(root):
    problems = check(root)
    return (problems,
            f"check_named_paths: {len(problems)} named path(s) that do not exist (moved? then name the new place)",
            f"check_named_paths: every repository path named in {len(files_to_scan(root))} files exists")


def main(argv):
    return lint_cli.run(argv, __doc__, self_test, check_root)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
