#!/bin/bash -eu
# Builds every fuzz target of fuzz/ as a libFuzzer binary in $OUT, with
# its seeds as $OUT/<fuzzer>_seed_corpus.zip. ClusterFuzzLite and OSS-Fuzz
# run it in their Go builder image (Dockerfile), which sets $SRC, $OUT and
# $WORK and provides compile_native_go_fuzzer; .clusterfuzzlite/local.sh
# runs it on a machine of our own, as .ci/run does. It changes the tree it
# builds (go.mod, and go-118-fuzz-build rewrites a target's file while it
# builds it): run it on a copy.
#
# The targets are internal/harness/campaign/targets.txt, the list the
# campaign runs; a fuzzer is named after its target in snake case
# (FuzzMachineModel: fuzz_machine_model).

# go-118-fuzz-build's testing package replaces "testing" in a target's
# file, and its F decodes each libFuzzer input into the fuzz function's
# arguments. The seed conversion (fuzz/libfuzzer.go) writes the inputs
# this version decodes; local.sh installs the builder of the same version.
go118fuzzbuild=v0.0.0-20250520111509-a70c2aa677fa

# OSS-Fuzz runs this script as bash -eux build.sh, local.sh as bash
# build.sh: neither reads the options on the first line, so set them here.
set -euo pipefail

cd "$SRC/replaysafe"
GOFLAGS=-mod=mod go get "github.com/AdamKorcz/go-118-fuzz-build/testing@$go118fuzzbuild"

# Every seed of every target (the committed corpora under
# fuzz/testdata/fuzz and the f.Add arguments), converted from Go's corpus
# format to libFuzzer inputs.
seeds="$WORK/replaysafe-seeds"
rm -rf "$seeds"
go test ./fuzz/ -run '^TestLibFuzzerSeeds$' -count=1 -libfuzzer-seeds="$seeds"

targets=$(sed -e 's/#.*//' internal/harness/campaign/targets.txt | awk 'NF { print $1 }')
for target in $targets; do
  fuzzer=$(printf '%s' "$target" | sed -E 's/([a-z0-9])([A-Z])/\1_\2/g' | tr '[:upper:]' '[:lower:]')
  compile_native_go_fuzzer github.com/replaysafe/replaysafe/fuzz "$target" "$fuzzer"
  # OSS-Fuzz's helper only says so when it finds no target to build.
  if [ ! -x "$OUT/$fuzzer" ]; then
    echo "build.sh: $target did not build into $OUT/$fuzzer" >&2
    exit 1
  fi
  rm -f "$OUT/${fuzzer}_seed_corpus.zip"
  (cd "$seeds/$target" && zip -q -X "$OUT/${fuzzer}_seed_corpus.zip" ./*)
  echo "build.sh: $OUT/$fuzzer, $(ls "$seeds/$target" | wc -l) seeds"
done
