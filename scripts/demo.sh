#!/usr/bin/env bash
# The main job: installs what is missing, builds tessel and runs `tessel demo` on built-in data.
#
# Usage: scripts/demo.sh [demo options, e.g. --n 30000]
# Builds only the library and the `tessel` command (not the tests or the Python module: they
# took most of a first run's time) and prints one line per stage; the build's own output is
# shown only when it fails.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# The demo needs no GoogleTest or Python: only what builds the library and the command.
echo "demo: installing packages (if missing)"
scripts/setup.sh --build-only

log=$(mktemp)
trap 'rm -f "$log"' EXIT
# Shows the hidden output of a failed stage, then stops.
failed() {
  echo
  cat "$log" >&2
  echo "demo: $1 failed (output above)" >&2
  exit 1
}

start=$SECONDS
printf "demo: configuring"
# A build/ configured by scripts/build.sh keeps its tests switched on (the demo then builds only
# its own targets there); a new one is configured without them, so GoogleTest is not needed.
opts=(-DTESSEL_BUILD_TOOLS=ON)
[[ -f build/CMakeCache.txt ]] || opts+=(-DTESSEL_BUILD_TESTS=OFF)
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release "${opts[@]}" > "$log" 2>&1 ||
  failed "configuring"
echo " ($((SECONDS - start)) s)"

start=$SECONDS
what="demo: building the library and the tessel command"
printf "%s" "$what"
# A terminal sees ninja's step count go up on the same line; a log or pipe gets the total at the
# end (a dry run cannot count ahead: the glob check stops it before the real steps).
progress() {
  local line
  while IFS= read -r line; do
    printf '%s\n' "$line" >> "$log"
    [[ -t 1 && $line =~ ^\[([0-9]+)/([0-9]+)\] ]] &&
      printf "\r%s (%s of %s steps)" "$what" "${BASH_REMATCH[1]}" "${BASH_REMATCH[2]}"
  done
  return 0
}
: > "$log"
cmake --build build --target tessel_cli 2>&1 | progress || failed "building"
steps=$(sed -n 's|^\[\([0-9]*\)/[0-9]*\].*|\1|p' "$log" | tail -n 1)
[[ -t 1 ]] && printf "\r%s\033[K" "$what"
echo " (${steps:-0} steps, $((SECONDS - start)) s)"

rm -f "$log"
echo "demo: running build/tessel demo $*"
echo
exec build/tessel demo "$@"
