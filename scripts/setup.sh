#!/usr/bin/env bash
# Installs what the build and tests need on Debian/Ubuntu; does nothing when all is there.
#
# Usage: scripts/setup.sh [--build-only] [extra-package ...]
#        scripts/setup.sh --cuda-tools
# --build-only: only what builds the library and the `tessel` command (scripts/demo.sh), no
# GoogleTest or Python, which a first demo on a new machine would otherwise wait for.
# --cuda-tools: only NVIDIA's ptxas, NVRTC and nvdisasm for `tessel bench sass`, from their pip
# wheels (no GPU and no CUDA toolkit needed) into .cuda-tools/ at the repository root.
# Runs apt-get as root, or through sudo when not root. Prints only what it installs.
set -euo pipefail

if [[ ${1:-} == --cuda-tools ]]; then
  # ptxas and NVRTC of CUDA 13.0, the release of the driver that ran the H200 measurements in
  # bench/RESULTS.md (its JIT compiled their PTX); nvdisasm's first wheel is 13.2, which reads
  # sm_90 code as well.
  root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
  dest=$root/.cuda-tools
  wheels=(nvidia-cuda-nvcc==13.0.88 nvidia-cuda-nvrtc==13.0.88 nvidia-cuda-nvdisasm==13.2.51)
  have=1
  for f in bin/ptxas bin/nvdisasm lib/libnvrtc.so.13; do
    [[ -e $dest/nvidia/cu13/$f ]] || have=0
  done
  ((have)) && exit 0
  python3 -m pip --version > /dev/null 2>&1 || "$0" python3-pip
  echo "setup: installing ${wheels[*]} into .cuda-tools"
  log=$(mktemp)
  trap 'rm -f "$log"' EXIT
  if ! python3 -m pip install --no-deps --upgrade --target "$dest" "${wheels[@]}" > "$log" 2>&1; then
    cat "$log" >&2
    echo "setup: pip failed (output above)" >&2
    exit 1
  fi
  echo "setup: done"
  exit 0
fi

build_only=0
if [[ ${1:-} == --build-only ]]; then
  build_only=1
  shift
fi
packages=(cmake ninja-build g++)
# Doxygen and Chromium: the documentation site's C++ reference and its browser check.
# ccache: the test command's wheel build (tests/python/test_pip_install.py) reuses the objects
# of the build before it instead of compiling the library a second time.
((build_only)) || packages+=(googletest libgtest-dev libgmock-dev python3 python3-venv python3-pip
                             python3-numpy doxygen chromium ccache)
packages+=("$@")

if ! command -v dpkg-query > /dev/null 2>&1; then
  # Not Debian: check the tools by name and say what is missing instead of guessing a manager.
  missing=()
  tools=(cmake ninja g++)
  also=""
  if ((!build_only)); then
    tools+=(python3)
    also=" and GoogleTest"
  fi
  for tool in "${tools[@]}"; do
    command -v "$tool" > /dev/null 2>&1 || missing+=("$tool")
  done
  if ((${#missing[@]})); then
    echo "setup: this is not a Debian-like system; please install: ${missing[*]}$also" >&2
    exit 1
  fi
  exit 0
fi

missing=()
for pkg in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$pkg" 2> /dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$pkg")
done
((${#missing[@]})) || exit 0

if [[ $(id -u) -eq 0 ]]; then
  as_root=()
elif command -v sudo > /dev/null 2>&1; then
  as_root=(sudo)
else
  echo "setup: missing packages: ${missing[*]}; run as root or install sudo" >&2
  exit 1
fi

echo "setup: installing ${missing[*]}"
# apt-get's chatter is kept in a log and shown only when something fails.
log=$(mktemp)
trap 'rm -f "$log"' EXIT
if ! { "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq &&
       "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive \
         apt-get install -y -qq --no-install-recommends "${missing[@]}"; } > "$log" 2>&1; then
  cat "$log" >&2
  echo "setup: apt-get failed (output above)" >&2
  exit 1
fi
echo "setup: done"
