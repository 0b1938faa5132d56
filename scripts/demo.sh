#!/usr/bin/env bash
# The main job: installs what is missing, builds tessel and runs `tessel demo` on built-in data.
#
# Usage: scripts/demo.sh [demo options, e.g. --n 30000]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

scripts/setup.sh
scripts/build.sh
echo
exec build/tessel demo "$@"
