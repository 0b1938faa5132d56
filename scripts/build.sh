#!/usr/bin/env bash
# Configures (Release, Ninja) and builds tessel, its tests and the `tessel` command in build/.
#
# Usage: scripts/build.sh [extra cmake -D options ...]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# Tools and tests are switched on explicitly: a build/ configured earlier without them would
# otherwise keep its cached OFF.
# The Python module is built for .venv's python when scripts/python_env.sh has made it.
python_opts=()
[[ -x .venv/bin/python ]] && python_opts=(-DPython_EXECUTABLE="$PWD/.venv/bin/python")
# Through ccache where it is installed (scripts/setup.sh installs it for the tests): rebuilds,
# and the test command's wheel build of the same sources, take the objects compiled before. Its
# cache is kept in build/ccache: always writable where the build is (ccache fails the compile
# when its cache directory cannot be made), and gone with the build.
launcher=()
command -v ccache > /dev/null 2>&1 &&
  launcher=("-DCMAKE_CXX_COMPILER_LAUNCHER=env;CCACHE_DIR=$PWD/build/ccache;ccache")
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DTESSEL_BUILD_TOOLS=ON \
  -DTESSEL_BUILD_TESTS=ON "${launcher[@]}" "${python_opts[@]}" "$@" > /dev/null
cmake --build build
