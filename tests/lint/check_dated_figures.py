#!/usr/bin/env python3
"""check_dated_figures.py — the figures README.md quotes from measurements that no test can rerun
(an H200, a training, a build's wall time) are dated and are what the benchmark reference says
(ctest `docs.dated_figures`; issue 31: README's figures had no markers).

Usage: check_dated_figures.py REPO_ROOT [--self-test]

A figure measured once is marked with an HTML comment, invisible when the Markdown is rendered:

* `<!-- measured: DATE TARGET -->` on a line of its own marks the block that follows it (up to
  the next blank line: a table or a paragraph);
* `<!-- measured: DATE TARGET -->` inside a line opens a span that `<!-- /measured -->` closes
  (on the same or a later line of its paragraph).

DATE is YYYY-MM-DD; TARGET a relative link to the section that holds the measurement
(`docs/benchmarks.md#anchor`, relative to the marked file). The check, for every marked place of
README.md and docs/**/*.md: the date is a real day, not in the future, and is written in the
target section; the target resolves (file and heading, GitHub's anchors); and every number of the
marked text (outside `code spans`; in a table row, outside its first cell) is a number of that
section, equal or equal once the section's figure is rounded to as many decimals as the marked
one shows (97 for 97.4, 1.003 for 1.0027). Figures that a program prints are checked by
check_doc_figures.py (`<!-- checked: ... -->`) instead.

README.md also must not quote a figure unmarked: every number with a unit (ns, µs, ms, s, min,
minutes, KiB, MiB, GiB, M, k, x, ×, %) outside fenced code, code spans and comments must be inside
a `measured` or a `checked` place.

Exit 1 listing each problem (file:line, what, the figure, the section's nearest figure); 2 on bad
usage. `--self-test` runs the check on a small tree it writes and exits 1 unless it reports
exactly that tree's problems. Standard library only.
"""

import datetime
import os
import re
import sys

import tempfile

import lint_cli  # tests/lint/lint_cli.py: the command line and report every check shares

MEASURED = re.compile(r"<!--\s*measured:\s*(\S+)\s+(\S+)\s*-->")
CHECKED = re.compile(r"<!--\s*checked:[^>]*-->")
CLOSE_MEASURED = re.compile(r"<!--\s*/measured\s*-->")
CLOSE_CHECKED = re.compile(r"<!--\s*/checked\s*-->")
COMMENT = re.compile(r"<!--.*?-->")
CODE_SPAN = re.compile(r"`[^`]*`")
NUMBER = re.compile(r"(?<![\w.])(\d{1,3}(?:,\d{3})+(?![\d.])|\d+(?:\.\d+)?)")
UNIT_FIGURE = re.compile(r"(?<![\w.])\d+(?:[.,]\d+)*\s?(?:ns|µs|us|ms|s|min|minutes|KiB|MiB|GiB|M|k|x|×|%)(?![\w])")


def slug(heading):
    text = re.sub(r"<[^>]+>", "", heading).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def sections(path):
    """anchor -> the section's text (its heading up to the next heading of the same or a higher level)."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    heads, seen, fence = [], {}, False
    for i, line in enumerate(lines):
        if line.lstrip().startswith("```"):
            fence = not fence
        m = None if fence else re.match(r"^(#{1,6})\s+(.*?)\s*#*\s*$", line)
        if m:
            base = slug(m.group(2))
            count = seen.get(base, 0)
            seen[base] = count + 1
            heads.append((i, len(m.group(1)), base if count == 0 else f"{base}-{count}"))
    out = {}
    for k, (i, level, anchor) in enumerate(heads):
        end = next((j for j, lv, _ in heads[k + 1:] if lv <= level), len(lines))
        out[anchor] = "\n".join(lines[i:end])
    return out


def value(number):
    return float(number.replace(",", ""))


def numbers(text):
    return [m.group(1) for m in NUMBER.finditer(CODE_SPAN.sub(" ", COMMENT.sub(" ", text)))]


def matches(number, section_numbers):
    decimals = len(number.split(".")[1]) if "." in number else 0
    v = value(number)
    return any(v == s or round(s, decimals) == v for s in section_numbers)


def marked_text_numbers(text):
    """Numbers of a marked text; table rows without their first cell (the row's name)."""
    out = []
    for line in text.split("\n"):
        if line.lstrip().startswith("|"):
            cells = line.strip().strip("|").split("|")
            if set("".join(cells)) <= set("-: "):
                continue
            line = "|".join(cells[1:])
        out += numbers(line)
    return out


def places(path):
    """(line, date, target, text) of each measured place; and the set of (line, start, end) masked."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    found, problems = [], []
    i = 0
    while i < len(lines):
        line = lines[i]
        ms = list(MEASURED.finditer(line))
        if len(ms) == 1 and line.strip() == ms[0].group(0):
            j = i + 1
            while j < len(lines) and not lines[j].strip():
                j += 1
            k = j
            while k < len(lines) and lines[k].strip():
                k += 1
            found.append((j + 1, ms[0].group(1), ms[0].group(2), "\n".join(lines[j:k])))
            i = k
            continue
        for m in ms:
            text, k, rest = "", i, line[m.end():]
            while True:
                close = CLOSE_MEASURED.search(rest)
                if close:
                    text += rest[:close.start()]
                    break
                text += rest + "\n"
                k += 1
                if k >= len(lines) or not lines[k].strip():
                    problems.append(f"{i + 1}: '{m.group(0)}' is not closed by '<!-- /measured -->' in its paragraph")
                    text = None
                    break
                rest = lines[k]
            if text is not None:
                found.append((i + 1, m.group(1), m.group(2), text))
        i += 1
    return found, problems


def unmarked_figures(path):
    """Figures with a unit outside fences, code spans, comments and marked places: (line, figure)."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    # Blank out marked blocks and spans, then fences, comments and code spans.
    def blank(m):
        return re.sub(r"[^\n]", " ", m.group(0))
    text = re.sub(r"^[ \t]*<!--\s*(?:measured|checked):[^>]*-->[ \t]*\n(?:[ \t]*\n)*(?:.*\S.*\n?)+", blank, text, flags=re.M)
    text = re.sub(r"<!--\s*measured:[^>]*-->.*?<!--\s*/measured\s*-->", blank, text, flags=re.S)
    text = re.sub(r"<!--\s*checked:[^>]*-->.*?<!--\s*/checked\s*-->", blank, text, flags=re.S)
    text = re.sub(r"^[ \t]*```.*?^[ \t]*```", blank, text, flags=re.S | re.M)
    text = re.sub(r"<!--.*?-->", blank, text, flags=re.S)
    text = re.sub(r"`[^`\n]*`", blank, text)
    out = []
    for n, line in enumerate(text.split("\n"), 1):
        out += [(n, m.group(0)) for m in UNIT_FIGURE.finditer(line)]
    return out


def doc_files(root):
    files = [os.path.join(root, "README.md")]
    for base, _, names in os.walk(os.path.join(root, "docs")):
        files += [os.path.join(base, n) for n in names if n.endswith(".md")]
    return sorted(f for f in files if os.path.isfile(f))


def check(root, today):
    problems, count = [], 0
    cache = {}
    for path in doc_files(root):
        rel = os.path.relpath(path, root)
        found, bad = places(path)
        problems += [f"{rel}:{b}" for b in bad]
        for line, date, target, text in found:
            count += 1
            try:
                day = datetime.date.fromisoformat(date)
                if day > today:
                    problems.append(f"{rel}:{line}: measured on {date}, a day still to come")
            except ValueError:
                problems.append(f"{rel}:{line}: '{date}' is not a date (YYYY-MM-DD)")
            file_part, _, anchor = target.partition("#")
            dest = os.path.normpath(os.path.join(os.path.dirname(path), file_part)) if file_part else path
            if not os.path.isfile(dest) or not anchor:
                problems.append(f"{rel}:{line}: the target {target} is not a file#section")
                continue
            if dest not in cache:
                cache[dest] = sections(dest)
            section = cache[dest].get(anchor)
            if section is None:
                problems.append(f"{rel}:{line}: no section #{anchor} in {os.path.relpath(dest, root)}")
                continue
            if date not in section:
                problems.append(f"{rel}:{line}: the section #{anchor} does not say {date}")
            section_values = [value(n) for n in numbers(section)]
            for number in marked_text_numbers(text):
                if not matches(number, section_values):
                    near = min(section_values, key=lambda s: abs(s - value(number)), default=None)
                    problems.append(f"{rel}:{line}: figure {number} is not in the section #{anchor} of "
                                    f"{os.path.relpath(dest, root)} (its nearest: {near:g})" if near is not None else
                                    f"{rel}:{line}: figure {number}: the section #{anchor} has no figures")
    readme = os.path.join(root, "README.md")
    if os.path.isfile(readme):
        for n, figure in unmarked_figures(readme):
            problems.append(f"README.md:{n}: figure '{figure}' is neither checked nor dated: mark it "
                            "<!-- measured: DATE docs/benchmarks.md#section --> (or <!-- checked: ... -->)")
    return problems, count


def self_test():
    with tempfile.TemporaryDirectory() as root:
        os.makedirs(os.path.join(root, "docs"))
        files = {
            "docs/benchmarks.md": "# B\n\n## Latency (H200)\n\n2026-11-30: 97.4 ns and 1.0027, 12,345 pairs.\n\n"
                                  "### Inner\n\n2026-11-30 66.7 ns\n\n## Other\n\n2026-12-01: 5 s\n",
            "README.md": "<!-- measured: 2026-11-30 docs/benchmarks.md#latency-h200 -->\n"
                         "| case 64 MiB | 97 ns | 1.003 | 12,345 | 66.7 ns |\n\n"
                         "Fast: <!-- measured: 2026-11-30 docs/benchmarks.md#latency-h200 -->97.5 ns<!-- /measured -->,\n"
                         "<!-- measured: 2026-12-01 docs/benchmarks.md#latency-h200 -->5 s<!-- /measured --> and\n"
                         "<!-- measured: 2030-01-01 docs/benchmarks.md#other -->5 s<!-- /measured --> and\n"
                         "<!-- measured: 2026-12-01 docs/benchmarks.md#gone -->5 s<!-- /measured --> but 3 ms "
                         "unmarked, `4 ms` in code, 2 cores.\n"
                         "<!-- checked: x -->\n| a | 7 MiB |\n\n```\n9 ns\n```\n",
        }
        for name, text in files.items():
            with open(os.path.join(root, name), "w", encoding="utf-8") as f:
                f.write(text)
        problems, _ = check(root, datetime.date(2026, 12, 2))
        got = sorted(p.split(" (its nearest")[0] for p in problems)
        want = sorted([
            "README.md:4: figure 97.5 is not in the section #latency-h200 of docs/benchmarks.md",
            "README.md:5: the section #latency-h200 does not say 2026-12-01",
            "README.md:5: figure 5 is not in the section #latency-h200 of docs/benchmarks.md",
            "README.md:6: measured on 2030-01-01, a day still to come",
            "README.md:6: the section #other does not say 2030-01-01",
            "README.md:7: no section #gone in docs/benchmarks.md",
            "README.md:7: figure '3 ms' is neither checked nor dated: mark it <!-- measured: DATE "
            "docs/benchmarks.md#section --> (or <!-- checked: ... -->)",
        ])
        return lint_cli.expect_report("check_dated_figures", got, want, f"the {len(want)} problems of its test tree")


def check_root(root):
    problems, count = check(root, datetime.date.today())
    return (problems, f"check_dated_figures: {len(problems)} problem(s) with measured figures in README.md and docs/",
            f"check_dated_figures: {count} dated places in README.md and docs/ match their sections; "
            "README.md quotes no unmarked figure")


def main(argv):
    return lint_cli.run(argv, __doc__, self_test, check_root)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
