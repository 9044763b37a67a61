#!/usr/bin/env bash
# The ClusterFuzzLite build on this machine, without Docker, then a short
# libFuzzer run of every target: what .ci/run does, and how to try the
# OSS-Fuzz build before sending it there.
#
#   .clusterfuzzlite/local.sh [-time SECONDS] [-jobs N] [-keep DIR]
#
# It copies the repository (the files git knows, committed or not), puts
# go-118-fuzz-build from the Go module proxy (the version build.sh names)
# and a compile_native_go_fuzzer of its own on PATH (the two build lines of
# OSS-Fuzz's helper: go-118-fuzz-build, then the link with clang and
# libFuzzer), and runs build.sh on the copy. Then every binary runs for
# -time seconds (default 10) on its seed corpus, -jobs at once (default:
# the number of processors), and the script fails when a target does not
# build or a run does not end cleanly (a crash, a leak of memory past
# libFuzzer's limit, a timeout). The binaries and a crash's input stay in
# the -keep directory when one is given, and in the work directory when a
# run fails. Needs go, clang and Debian's libclang-rt-14-dev (libFuzzer),
# zip and unzip (.ci/setup installs them).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)

secs=10
jobs=$(nproc)
keep=""
while [ $# -gt 0 ]; do
  case "$1" in
    -time) secs=$2; shift 2 ;;
    -jobs) jobs=$2; shift 2 ;;
    -keep) keep=$2; shift 2 ;;
    -h | -help | --help) sed -n '2,/^set -euo/p' "$0" | sed -e '/^set -euo/d' -e 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "local.sh: unknown argument $1 (see -h)" >&2; exit 2 ;;
  esac
done
case "$secs$jobs" in
  *[!0-9]*) echo "local.sh: -time and -jobs take whole numbers" >&2; exit 2 ;;
esac
if [ "$secs" -lt 1 ] || [ "$jobs" -lt 1 ]; then
  echo "local.sh: -time and -jobs must be at least 1" >&2
  exit 2
fi
for tool in go clang++ zip unzip git; do
  command -v "$tool" >/dev/null || { echo "local.sh: $tool is missing (.ci/setup installs it)" >&2; exit 1; }
done

version=$(sed -n 's/^go118fuzzbuild=//p' "$repo/.clusterfuzzlite/build.sh")
[ -n "$version" ] || { echo "local.sh: build.sh names no go118fuzzbuild version" >&2; exit 1; }

work=$(mktemp -d)
cleanup() { rm -rf "$work"; }
trap cleanup EXIT
export SRC="$work/src" OUT="$work/out" WORK="$work/work"
mkdir -p "$SRC/replaysafe" "$OUT" "$WORK" "$work/bin" "$work/corpus" "$work/logs"

# The copy: build.sh changes go.mod, and go-118-fuzz-build moves a
# target's file aside while it builds (and leaves it so when a build fails).
(cd "$repo" && git ls-files -z --cached --others --exclude-standard |
  while IFS= read -r -d '' f; do [ -e "$f" ] && printf '%s\0' "$f"; done |
  xargs -0 cp --parents -t "$SRC/replaysafe")

GOBIN="$work/bin" GOFLAGS=-mod=mod go install "github.com/AdamKorcz/go-118-fuzz-build@$version"

cat >"$work/bin/compile_native_go_fuzzer" <<'SHIM'
#!/usr/bin/env bash
# compile_native_go_fuzzer PACKAGE FUNCTION FUZZER, as OSS-Fuzz's helper
# of that name builds a fuzzer (its non-coverage build), except that it
# fails where that helper only prints that it found no target.
set -euo pipefail
path=$1 function=$2 fuzzer=$3
dir=$(go list -tags gofuzz -f '{{.Dir}}' "$path")
# The helper finds the target's file by grepping the package directory,
# testdata included, for the name, and wants one func NAME(f *testing.F).
files=$(grep -r -l -s "$function" "$dir" || true)
if [ "$(printf '%s\n' "$files" | grep -c .)" -ne 1 ] ||
  [ "$(grep "func $function" "$files" | grep -c 'testing.F')" -ne 1 ]; then
  echo "compile_native_go_fuzzer: want one file under $dir with func $function(f *testing.F), found: ${files:-none}" >&2
  exit 1
fi
go-118-fuzz-build -tags gofuzz -o "$WORK/$fuzzer.a" -func "$function" "$dir"
# shellcheck disable=SC2086 # CXXFLAGS and LIB_FUZZING_ENGINE are lists of flags
$CXX $CXXFLAGS $LIB_FUZZING_ENGINE "$WORK/$fuzzer.a" -o "$OUT/$fuzzer"
SHIM
chmod +x "$work/bin/compile_native_go_fuzzer"

start=$(date +%s)
if ! (
  export PATH="$work/bin:$PATH" CXX=clang++ CXXFLAGS="" LIB_FUZZING_ENGINE=-fsanitize=fuzzer
  cd "$SRC/replaysafe"
  bash "$repo/.clusterfuzzlite/build.sh"
); then
  echo "local.sh: build.sh failed: the seeds did not convert or a target did not build (above)" >&2
  exit 1
fi
echo "local.sh: built $(find "$OUT" -maxdepth 1 -type f -perm -u+x | wc -l) fuzzers in $(($(date +%s) - start))s"

# run FUZZER: unpack its seeds and fuzz for $secs seconds; the exit code
# is libFuzzer's (0 when nothing was found).
run() {
  local fuzzer=$1 corpus="$work/corpus/$1"
  mkdir -p "$corpus"
  unzip -q "$OUT/${fuzzer}_seed_corpus.zip" -d "$corpus"
  "$OUT/$fuzzer" -max_total_time="$secs" -timeout=60 -print_final_stats=1 \
    -artifact_prefix="$work/crash-$fuzzer-" "$corpus" >"$work/logs/$fuzzer" 2>&1
}

start=$(date +%s)
fuzzers=$(cd "$OUT" && find . -maxdepth 1 -type f -perm -u+x -printf '%f\n' | sort)
declare -A pid_of
failed=()
for fuzzer in $fuzzers; do
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do
    wait -n || true
  done
  run "$fuzzer" &
  pid_of[$fuzzer]=$!
done
for fuzzer in $fuzzers; do
  if ! wait "${pid_of[$fuzzer]}"; then
    failed+=("$fuzzer")
  fi
  log="$work/logs/$fuzzer"
  printf '%-28s seeds %-4s %s; %s\n' "$fuzzer" \
    "$(sed -n 's/^INFO: seed corpus: files: \([0-9]*\).*/\1/p' "$log")" \
    "$(sed -n 's/^Done \(.*\)/\1/p' "$log")" \
    "$(sed -n 's/^INFO: Seed: \(.*\)/seed \1/p' "$log")"
done
echo "local.sh: ran ${#pid_of[@]} fuzzers for ${secs}s each, $jobs at a time, in $(($(date +%s) - start))s"

if [ -n "$keep" ]; then
  mkdir -p "$keep"
  cp -r "$OUT/." "$keep/"
  cp "$work"/crash-* "$keep/" 2>/dev/null || true
fi
if [ "${#failed[@]}" -gt 0 ]; then
  for fuzzer in "${failed[@]}"; do
    echo "== $fuzzer failed; the end of its log:"
    tail -n 40 "$work/logs/$fuzzer"
  done
  trap - EXIT
  echo "local.sh: failed: ${failed[*]}; the binaries, logs and crashing inputs are in $work" >&2
  echo "local.sh: replay one with $work/out/FUZZER $work/crash-FUZZER-..." >&2
  exit 1
fi
