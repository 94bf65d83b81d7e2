#!/usr/bin/env bash
# scripts_bench_test.sh — scripts/bench, the README's first command (issue 31): `--help` answers
# before building (into an empty build folder it creates nothing), and a run builds the target
# streampool-bench only, not all ~300, with the build's output shown. cmake is replaced by a stub
# that logs its arguments; the real streampool-bench of this build ($1) then runs `compare --quick`.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
built=$(cd "$(dirname "$1")/.." && pwd)  # <build>/perf/streampool-bench -> <build>
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

help=$(STREAMPOOL_BUILD="$work/none" "$root/scripts/bench" --help)
[ ! -e "$work/none" ] || fail "--help created the build folder"
grep -q "^usage: scripts/bench" <<<"$help" || fail "--help printed no usage: $help"
grep -q "not built yet" <<<"$help" || fail "--help without a binary does not say it builds first: $help"
help=$(STREAMPOOL_BUILD="$built" "$root/scripts/bench" --help)
grep -q "^usage: streampool-bench compare" <<<"$help" || fail "--help with a binary shows no compare options"

mkdir "$work/bin"
cat >"$work/bin/cmake" <<STUB
#!/usr/bin/env bash
echo "cmake \$*" >>"$work/cmake.log"
[ "\${1:-}" = --build ] && echo "[1/1] stub build step"
exit 0
STUB
chmod +x "$work/bin/cmake"
out=$(PATH="$work/bin:$PATH" STREAMPOOL_BUILD="$built" "$root/scripts/bench" --driver sim --quick)
grep -q -- "--build .* --target streampool-bench" "$work/cmake.log" || fail "not built with --target streampool-bench: $(cat "$work/cmake.log")"
grep -q "^\[1/1\] stub build step" <<<"$out" || fail "the build's progress is not shown: $out"
grep -q "^config: " <<<"$out" || fail "no config summary line: $out"
grep -q "simulated device" <<<"$out" || fail "does not say it runs on the simulated device: $out"
grep -q "^native  *default" <<<"$out" || fail "no result table: $out"
echo "ok"
