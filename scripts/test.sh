#!/usr/bin/env bash
# Installs what is missing, builds, and runs the whole test suite: ctest (C++), then pytest.
#
# Usage: scripts/test.sh [extra ctest options, e.g. -R cli]
# Passed tests are not listed; failures are shown with their output, then ctest's summary.
# The full ctest output is kept in build/ctest.log.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

scripts/setup.sh
python=$(scripts/python_env.sh)
scripts/build.sh
echo "test: running ctest (full log in build/ctest.log)"
set +e
ctest --test-dir build --output-on-failure -j2 "$@" 2>&1 | tee build/ctest.log |
  grep -vE '^ *(Start +[0-9]+: |[0-9]+/[0-9]+ Test +#[0-9]+: .*Passed)'
rc=${PIPESTATUS[0]}
echo "test: running pytest on tests/python"
TESSEL_CACHE_DIR="$PWD/build/test-cache" PYTHONPATH="$PWD/build/python" \
  "$python" -m pytest -q -p no:cacheprovider tests/python
py_rc=$?
set -e
((rc == 0)) || exit "$rc"
exit "$py_rc"
