#!/usr/bin/env bash
# Builds the parser's libFuzzer target with clang (ASan + UBSan) in build-fuzz/ and runs it.
#
# Usage: scripts/fuzz.sh [--seconds N (default 600)] [--runs N] [extra libFuzzer options]
# Exit code 77 when clang or libFuzzer is missing (`scripts/setup.sh clang-14 libclang-rt-14-dev` installs them).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

seconds=600 runs=-1 extra=()
while (($#)); do
  case "$1" in
    --seconds) seconds=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    *) extra+=("$1"); shift ;;
  esac
done

cxx=$(command -v clang++ || command -v clang++-14 || true)
if [[ -z $cxx ]]; then
  echo "fuzz: skipped, no clang++ (scripts/setup.sh clang-14 libclang-rt-14-dev installs it)"
  exit 77
fi
probe=$(mktemp -d)
trap 'rm -rf "$probe"' EXIT
echo 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }' \
  > "$probe/p.cpp"
if ! "$cxx" -fsanitize=fuzzer "$probe/p.cpp" -o "$probe/p" 2> "$probe/err"; then
  echo "fuzz: skipped, $cxx has no libFuzzer runtime (libclang-rt-14-dev): $(head -1 "$probe/err")"
  exit 77
fi

flags="-O1 -g -fno-omit-frame-pointer -fsanitize=fuzzer-no-link,address,undefined"
flags+=" -fno-sanitize-recover=undefined"
# Only the build type's NDEBUG: its -O2 -g come after CMAKE_CXX_FLAGS and would override them.
cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER="$cxx" \
  -DCMAKE_CXX_FLAGS="$flags" -DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-DNDEBUG \
  -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" \
  -DTESSEL_FUZZ=ON -DTESSEL_BUILD_TESTS=OFF -DTESSEL_BUILD_TOOLS=OFF -DTESSEL_BUILD_PYTHON=OFF \
  -DCMAKE_CXX_COMPILER_LAUNCHER="${TESSEL_CCACHE:-}" > /dev/null
cmake --build build-fuzz --target fuzz_parser > build-fuzz/build.log 2>&1 ||
  { tail -30 build-fuzz/build.log; exit 1; }

# The seed corpus: the bad-input corpus, one file per line, and the valid formulas printed by the
# tests are found by the fuzzer from these quickly.
seeds=build-fuzz/seeds
rm -rf "$seeds" && mkdir -p "$seeds" build-fuzz/corpus
n=0
while IFS= read -r line; do
  [[ -z $line || $line == \#* ]] && continue
  printf '%b' "${line%%$'\t'*}" > "$seeds/$((n++))"
done < tests/corpus/bad_formulas.txt
for f in "Exp(-G*SqDist(X,Y))*B" "LogSumExp(X)" "TensorDot(X,Y,(3),(3),(0),(0))" "Rat(1,3)*Pow(X,2)"; do
  printf '%s' "$f" > "$seeds/$((n++))"
done
echo "fuzz: running fuzz_parser for ${seconds}s (max ${runs} runs) from $n seeds"
ASAN_OPTIONS=detect_leaks=0 build-fuzz/fuzz_parser -max_total_time="$seconds" -runs="$runs" \
  -max_len=4096 -timeout=10 -rss_limit_mb=4096 -print_final_stats=1 "${extra[@]}" \
  build-fuzz/corpus "$seeds"
