#!/usr/bin/env python3
"""check_doc_figures.py — the figures and examples the docs quote from streampool-bench must be
what streampool-bench prints (issue 31).

Usage: check_doc_figures.py STREAMPOOL_BENCH REPO_ROOT

It runs a small fixed set of commands (COMMANDS below: `tune`, `replay` and `config` on the
shared trace tests/data/encoder_varlen.trace.csv.gz and on a few config strings; about a second
in all on the sim driver) and checks every marked place in README.md and docs/**/*.md against the
output of the commands the marker names. Standard library only. Registered as the ctest
`docs.figures` (label `sim`, tests/CMakeLists.txt).

Markers are HTML comments, invisible when the Markdown is rendered:

* `<!-- checked: NAME [NAME...] -->` on a line of its own checks the block that follows it:
  - a fenced code block: quoted output. Lines starting with `$ ` (the command, with its `\\`-continued lines) are skipped; a
    line `...` stands for output left out, and `...` inside a line for part of a line left out.
    Whitespace runs count as one space. With one NAME the quoted lines must be consecutive lines
    of its output, and a run not cut by `...` must begin and end where the output's paragraph
    does (so a list that misses its first or last entry fails); with several NAMEs each line
    must be a line of one of their outputs.
  - anything else (a table, a paragraph, up to the next blank line): every number in it, outside
    `code spans`, must be a number the commands print (compared as values: 24366 = 24366.0).
    In a table row the first cell is the row's key (its `code span`, or its text; `default`
    matches `(default)`): the numbers of the other cells must all be on one output line that
    has the key as a word, so a figure of another row does not pass.
* `<!-- checked: NAME [NAME...] -->` inside a line opens a span that `<!-- /checked -->` closes
  (on the same or a later line of its paragraph): every number between them, outside `code spans`, must be a
  number the commands print. For figures in prose: mark the figures, not the whole paragraph.

On a mismatch it prints the doc file and line, the quoted figure or line, and what the program
printed nearest to it, and exits 1. It also fails (1) when a marker names an unknown command,
when a span is not closed, and when a command of COMMANDS is used by no marker (a marker deleted
from the docs must not silently turn the check off); 2 on bad usage or a command that cannot run.
"""

import difflib
import os
import re
import subprocess
import sys
import time

TRACE = "tests/data/encoder_varlen.trace.csv.gz"

# The docs quote config_error::what(); streampool-bench prints it after this prefix, which is
# taken off the start of each output line of the commands that name it.
ERR = "streampool-bench config: "

# name -> (arguments after the binary, extra environment[, prefix taken off each output line]).
# Keep them few and fast: the whole check must stay well under a minute on a busy two-core machine
# (measured: 0.4 s). They run without the config variables of the caller's environment.
COMMANDS = {
    # docs/tuning.md's worked example and table: the default candidates on the shared trace.
    "tune-encoder": (["tune", "--trace", TRACE, "--sim-capacity", "141GiB", "-q"], {}),
    # docs/tuning.md: expandable segments alone and combined with other keys (not default candidates).
    "tune-encoder-expandable": (["tune", "--trace", TRACE, "--sim-capacity", "141GiB", "-q",
                                 "--config", "expandable_segments:True,roundup_power2_divisions:4",
                                 "--config", "expandable_segments:True,large_segment_size_mb:64",
                                 "--config", "expandable_segments:True,max_split_size_mb:256",
                                 "--config", "expandable_segments:True"], {}),
    # the trace itself: events, peak requested, PyTorch's recorded segments.
    "replay-encoder": (["replay", "--trace", TRACE, "--driver", "sim", "--sim-capacity", "141GiB", "-q",
                        "--backends", "native,native=expandable_segments:True"], {}),
    # docs/harness.md: the default candidates of `tune`.
    "tune-help": (["tune", "--help"], {}),
    # docs/config.md: the effective configuration (the roundup table printed in full or as one number).
    "config-default": (["config", ""], {}),
    "config-roundup4": (["config", "roundup_power2_divisions:4"], {}),
    # docs/config.md: the parser's error messages.
    "config-error-env": (["config"], {"STREAMPOOL_ALLOC_CONF": "max_split_size_mb:2"}, ERR),
    "config-error-range": (["config", "garbage_collection_threshold:1.2"], {}, ERR),
    "config-error-list": (["config", "roundup_power2_divisions:[256:1,3:2]"], {}, ERR),
    "config-error-unknown": (["config", "max_split_size:20"], {}, ERR),
    "config-error-pooled": (["config", "pooled:True"], {}, ERR),
    "config-error-native": (["config", "native"], {}, ERR),
}

CONFIG_VARIABLES = ("STREAMPOOL_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF")

MARKER = re.compile(r"<!--\s*checked:\s*([^>]*?)\s*-->")
CLOSE = re.compile(r"<!--\s*/checked\s*-->")
COMMENT = re.compile(r"<!--.*?-->")
CODE_SPAN = re.compile(r"`[^`]*`")
# Doc numbers may group thousands ("82,319"); program output does not ("[256:1,512:2" is two).
DOC_NUMBER = re.compile(r"(?<![\w.])(\d{1,3}(?:,\d{3})+(?![\d.])|\d+(?:\.\d+)?)")
OUT_NUMBER = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)")

failures = []


def fail(path, line, what, quoted, printed):
    failures.append(f"{path}:{line}: {what}\n  docs say:        {quoted}\n  program printed: {printed}")


def squeeze(text):
    return " ".join(text.split())


def doc_numbers(text):
    text = CODE_SPAN.sub(" ", COMMENT.sub(" ", text))
    return [m.group(1) for m in DOC_NUMBER.finditer(text)]


def value(number):
    return float(number.replace(",", ""))


class Output:
    def __init__(self, name, text):
        self.name = name
        self.lines = [squeeze(line) for line in text.splitlines()]
        self.numbers = []  # (value, number as printed, line)
        for line in self.lines:
            for m in OUT_NUMBER.finditer(line):
                self.numbers.append((value(m.group(1)), m.group(1), line))


def run_commands(bench, root, names):
    outputs = {}
    for name in names:
        args, env, *prefix = COMMANDS[name]
        try:
            base = {k: v for k, v in os.environ.items() if k not in CONFIG_VARIABLES}
            proc = subprocess.run([bench] + args, cwd=root, env=dict(base, **env), capture_output=True,
                                  text=True, timeout=120)
        except (OSError, subprocess.TimeoutExpired) as e:
            print(f"check_doc_figures: cannot run {bench} {' '.join(args)}: {e}", file=sys.stderr)
            sys.exit(2)
        text = proc.stdout + proc.stderr
        if prefix:
            text = "\n".join(l[len(prefix[0]):] if l.startswith(prefix[0]) else l for l in text.splitlines())
        outputs[name] = Output(name, text)
    return outputs


def nearest_number(outs, number):
    v = value(number)
    best = min((n for o in outs for n in o.numbers), key=lambda n: abs(n[0] - v), default=None)
    return f"no numbers at all ({', '.join(o.name for o in outs)})" if best is None else \
        f"{best[1]} (the nearest number, in: {best[2][:150]})"


def check_numbers(path, line_no, text, outs):
    values = {n[0] for o in outs for n in o.numbers}
    for number in doc_numbers(text):
        if value(number) not in values:
            fail(path, line_no, f"figure {number} is not in the output of {' '.join(o.name for o in outs)}",
                 squeeze(COMMENT.sub("", text))[:150], nearest_number(outs, number))


def row_key(cell):
    code = CODE_SPAN.search(cell)
    return (code.group(0).strip("`") if code else cell).strip()


def check_table_row(path, line_no, row, outs):
    cells = [c.strip() for c in row.strip().strip("|").split("|")]
    numbers = [n for c in cells[1:] for n in doc_numbers(c)]
    if not numbers or set(cells[0]) <= set("-: "):
        return
    key = row_key(cells[0])
    lines = [l for o in outs for l in o.lines if key in (w.strip("()") for w in l.split())]
    if not lines:
        fail(path, line_no, f"row '{key}' is not in the output of {' '.join(o.name for o in outs)}",
             squeeze(row)[:150], "no line with that word")
        return
    for line in lines:
        line_values = {value(m.group(1)) for m in OUT_NUMBER.finditer(line)}
        missing = [n for n in numbers if value(n) not in line_values]
        if not missing:
            return
    best = min(lines, key=lambda l: len([n for n in numbers if value(n) not in
                                         {value(m.group(1)) for m in OUT_NUMBER.finditer(l)}]))
    missing = [n for n in numbers if value(n) not in {value(m.group(1)) for m in OUT_NUMBER.finditer(best)}]
    fail(path, line_no, f"row '{key}': {', '.join(missing)} not on its output line", squeeze(row)[:150], best[:170])


def line_matches(quoted, line):
    """The quoted line, where `...` marks left-out text, against one output line."""
    pieces = quoted.split("...")
    if len(pieces) == 1:
        return quoted == line
    pos = 0
    for i, piece in enumerate(pieces):
        piece = piece.strip()
        if not piece:
            continue
        if i == 0:
            if not line.startswith(piece):
                return False
            pos = len(piece)
            continue
        found = line.find(piece, pos)
        if found < 0:
            return False
        pos = found + len(piece)
    return quoted.endswith("...") or line.endswith(pieces[-1].strip())


def closest_line(outs, quoted):
    lines = [l for o in outs for l in o.lines if l]
    return max(lines, key=lambda l: difflib.SequenceMatcher(None, quoted, l).ratio(), default="(nothing)")[:170]


def check_fenced(path, start, body, outs):
    """body: (line number, text) of the lines inside the fence."""
    quoted, in_command = [], False
    for n, t in body:  # the command, `$ ...` and its `\`-continued lines, is not output
        if t.lstrip().startswith("$ ") or in_command:
            in_command = t.rstrip().endswith("\\")
            continue
        quoted.append((n, squeeze(t)))
    if len(outs) > 1:
        for n, q in quoted:
            if q != "..." and not any(line_matches(q, l) for o in outs for l in o.lines):
                fail(path, n, f"line not in the output of {' '.join(o.name for o in outs)}", q,
                     closest_line(outs, q))
        return
    out = outs[0].lines
    segments, current, gap_before = [], [], False
    for n, q in quoted + [(None, "...")]:
        if q == "...":
            if current:
                segments.append((gap_before, current, n is not None))
            current, gap_before = [], True
        else:
            current.append((n, q))
    pos = 0
    for gap_before, lines, gap_after in segments:
        found = None
        for i in range(pos, len(out) - len(lines) + 1):
            if all(line_matches(q, out[i + k]) for k, (_, q) in enumerate(lines)):
                if not gap_before and i > 0 and out[i - 1]:
                    continue
                end = i + len(lines)
                if not gap_after and end < len(out) and out[end]:
                    continue
                found = i
                break
        if found is None:
            # Name the first line that does not follow: the longest matching prefix.
            best_k, best_i = 0, pos
            for i in range(pos, len(out)):
                k = 0
                while k < len(lines) and i + k < len(out) and line_matches(lines[k][1], out[i + k]):
                    k += 1
                if k > best_k:
                    best_k, best_i = k, i
            if best_k == len(lines):
                edge = "begins" if not gap_before and best_i > 0 and out[best_i - 1] else "ends"
                n, q = lines[0] if edge == "begins" else lines[-1]
                printed = out[best_i - 1] if edge == "begins" else out[best_i + len(lines)]
                fail(path, n, f"the quoted output of {outs[0].name} {edge} inside a paragraph of the output "
                     "(an entry missing? mark left-out output with a line '...')", q,
                     f"{'before' if edge == 'begins' else 'after'} it: {printed[:150]}")
            else:
                n, q = lines[best_k]
                printed = out[best_i + best_k] if best_k and best_i + best_k < len(out) else closest_line(outs, q)
                fail(path, n, f"line not in the output of {outs[0].name} (where the quote has it)", q, printed[:170])
            return
        pos = found + len(lines)


def doc_files(root):
    files = [os.path.join(root, "README.md")]
    for base, _, names in os.walk(os.path.join(root, "docs")):
        files += [os.path.join(base, n) for n in sorted(names) if n.endswith(".md")]
    return [f for f in sorted(files) if os.path.isfile(f)]


def collect(root):
    """The marked places: (path, line number, names, kind, payload)."""
    places = []
    for path in doc_files(root):
        rel = os.path.relpath(path, root)
        with open(path, encoding="utf-8") as f:
            lines = f.read().split("\n")
        i = 0
        while i < len(lines):
            line = lines[i]
            markers = list(MARKER.finditer(line))
            if not markers:
                i += 1
                continue
            if len(markers) == 1 and line.strip() == markers[0].group(0):
                names = markers[0].group(1).split()
                j = i + 1
                while j < len(lines) and not lines[j].strip():
                    j += 1
                if j < len(lines) and lines[j].lstrip().startswith("```"):
                    k = j + 1
                    while k < len(lines) and not lines[k].lstrip().startswith("```"):
                        k += 1
                    places.append((rel, j + 1, names, "fenced", [(n + 1, lines[n]) for n in range(j + 1, k)]))
                else:
                    k = j
                    while k < len(lines) and lines[k].strip():
                        k += 1
                    places.append((rel, j + 1, names, "block", [(n + 1, lines[n]) for n in range(j, k)]))
                i = k + 1
                continue
            # Inline spans, possibly several on a line, possibly running over lines.
            for m in markers:
                names = m.group(1).split()
                text, k, rest = "", i, line[m.end():]
                while True:
                    close = CLOSE.search(rest)
                    if close:
                        text += rest[:close.start()]
                        break
                    text += rest + "\n"
                    k += 1
                    if k >= len(lines) or not lines[k].strip():
                        failures.append(f"{rel}:{i + 1}: '{m.group(0)}' is not closed by '<!-- /checked -->' "
                                        "in its paragraph")
                        text = None
                        break
                    rest = lines[k]
                if text is not None:
                    places.append((rel, i + 1, names, "span", text))
            i += 1
    return places


def main(argv):
    if len(argv) != 3 or argv[1] in ("-h", "--help"):
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    bench, root = os.path.abspath(argv[1]), os.path.abspath(argv[2])
    if not os.access(bench, os.X_OK):
        print(f"check_doc_figures: {bench} is not an executable", file=sys.stderr)
        return 2
    started = time.monotonic()
    places = collect(root)
    used = set()
    for path, line, names, _, _ in places:
        for name in names:
            if name not in COMMANDS:
                failures.append(f"{path}:{line}: marker names '{name}', not one of {', '.join(COMMANDS)}")
            used.add(name)
    for name in COMMANDS:
        if name not in used:
            failures.append(f"command '{name}' is checked by no marker in README.md or docs/ "
                            "(a marker was removed? then remove the command too)")
    outputs = run_commands(bench, root, [n for n in COMMANDS if n in used])
    figures = 0
    for path, line, names, kind, payload in places:
        outs = [outputs[n] for n in names if n in outputs]
        if not outs:
            continue
        if kind == "fenced":
            check_fenced(path, line, payload, outs)
            figures += len(payload)
        elif kind == "block":
            for n, text in payload:
                if text.lstrip().startswith("|"):
                    check_table_row(path, n, text, outs)
                else:
                    check_numbers(path, n, text, outs)
                figures += len(doc_numbers(text))
        else:
            check_numbers(path, line, payload, outs)
            figures += len(doc_numbers(payload))
    seconds = time.monotonic() - started
    if failures:
        print("\n".join(failures))
        print(f"check_doc_figures: {len(failures)} mismatch(es) between the docs and {os.path.basename(bench)}; "
              "fix the docs to say what the program prints (or the program)")
        return 1
    print(f"check_doc_figures: {len(places)} marked places ({figures} figures and lines) in README.md and docs/ "
          f"match {len(outputs)} commands of {os.path.basename(bench)} ({seconds:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
