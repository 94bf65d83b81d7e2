#!/usr/bin/env python3
"""check_doc_links.py — every relative Markdown link in README.md and docs/ points at a file that
exists, and its `#anchor`, if any, at a heading of that file (ctest `docs.links`).

Usage: check_doc_links.py REPO_ROOT [--self-test]

Links are `[text](target)` outside fenced code blocks and `code spans`; web links (a scheme such
as https:) are not followed. Anchors are GitHub's: the heading lowercased, every character that
is not a letter, digit, `_`, `-` or space dropped, spaces made `-`; the second heading with the
same anchor gets `-1`, the third `-2`. An explicit `<a id="...">` or `<a name="...">` counts too.
This is what keeps the links into docs/benchmarks.md and docs/benchmarks-history.md (which link
to each other's sections) from breaking when a page is split or a heading renamed.

Exit 1 naming each broken link (file:line, the target, why); 2 on bad usage. `--self-test` runs
the check on a small tree it writes, with one good and one broken link of each kind, and exits 1
unless exactly the broken ones are reported (the check itself can fail). Standard library only.
"""

import os
import re
import sys

import tempfile

import lint_cli  # tests/lint/lint_cli.py: the command line and report every check shares

LINK = re.compile(r"\[(?:[^\]\[]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
CODE_SPAN = re.compile(r"`[^`]*`")
EXPLICIT = re.compile(r"<a\s+(?:id|name)=\"([^\"]+)\"")
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def slug(heading):
    text = re.sub(r"<[^>]+>", "", heading).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def lines_outside_fences(path):
    """(line number, text) of the lines that are not inside a fenced code block."""
    fence = None
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            stripped = line.lstrip()
            if fence is None and (stripped.startswith("```") or stripped.startswith("~~~")):
                fence = stripped[:3]
                continue
            if fence is not None:
                if stripped.startswith(fence):
                    fence = None
                continue
            yield n, line.rstrip("\n")


_anchor_cache = {}


def anchors(path):
    if path not in _anchor_cache:
        seen, out = {}, set()
        for _, line in lines_outside_fences(path):
            out.update(EXPLICIT.findall(line))
            m = re.match(r"^(#{1,6})\s+(.*?)\s*#*\s*$", line)
            if not m:
                continue
            base = slug(m.group(2))
            count = seen.get(base, 0)
            seen[base] = count + 1
            out.add(base if count == 0 else f"{base}-{count}")
        _anchor_cache[path] = out
    return _anchor_cache[path]


def doc_files(root):
    files = [os.path.join(root, "README.md")]
    for base, _, names in os.walk(os.path.join(root, "docs")):
        files += [os.path.join(base, n) for n in names if n.endswith(".md")]
    return sorted(f for f in files if os.path.isfile(f))


def check(root):
    problems = []
    for path in doc_files(root):
        rel = os.path.relpath(path, root)
        for n, line in lines_outside_fences(path):
            for m in LINK.finditer(CODE_SPAN.sub("", line)):
                target = m.group(1)
                if SCHEME.match(target):
                    continue
                file_part, _, anchor = target.partition("#")
                dest = path if not file_part else os.path.normpath(os.path.join(os.path.dirname(path), file_part))
                if not os.path.exists(dest):
                    problems.append(f"{rel}:{n}: link to {target}: {os.path.relpath(dest, root)} does not exist")
                    continue
                if anchor and dest.endswith(".md") and anchor not in anchors(dest):
                    near = sorted(a for a in anchors(dest) if a[:12] == anchor[:12])[:3]
                    hint = f" (headings starting alike: {', '.join(near)})" if near else ""
                    problems.append(f"{rel}:{n}: link to {target}: no heading '#{anchor}' in "
                                    f"{os.path.relpath(dest, root)}{hint}")
    return problems


def self_test():
    with tempfile.TemporaryDirectory() as root:
        os.makedirs(os.path.join(root, "docs", "sub"))
        files = {
            "README.md": "[ok](docs/a.md) [ok](docs/a.md#the-second-part--b) [bad](docs/missing.md)\n"
                         "[web](https://example.com/x.md#y) `[code](docs/none.md)`\n",
            "docs/a.md": "# A\n\n## The second part — b\n\n## Twice\n\n## Twice\n\n<a id=\"here\"></a>\n"
                         "[ok](#twice-1) [ok](#here) [bad](#twice-2) [ok](sub/c.md)\n"
                         "```\n[in a fence](nowhere.md)\n# not a heading\n```\n[bad](#not-a-heading)\n",
            "docs/sub/c.md": "# C\n[ok](../a.md#a) [bad](../a.md#b) [ok](../../README.md)\n",
        }
        for name, text in files.items():
            with open(os.path.join(root, name), "w", encoding="utf-8") as f:
                f.write(text)
        got = sorted(p.split(": link to ")[0] + " " + p.split(": link to ")[1].split(":")[0] for p in check(root))
        want = sorted(["README.md:1 docs/missing.md", "docs/a.md:10 #twice-2", "docs/a.md:15 #not-a-heading",
                       "docs/sub/c.md:2 ../a.md#b"])
        return lint_cli.expect_report("check_doc_links", got, want, "the 4 broken links of its test tree")


def check_root(root):
    problems = check(root)
    return (problems, f"check_doc_links: {len(problems)} broken link(s) in README.md and docs/",
            f"check_doc_links: every relative link in README.md and docs/ resolves ({len(doc_files(root))} files)")


def main(argv):
    return lint_cli.run(argv, __doc__, self_test, check_root)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
