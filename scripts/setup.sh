#!/usr/bin/env bash
# Installs what the build and tests need on Debian/Ubuntu; does nothing when all is there.
#
# Usage: scripts/setup.sh [--build-only] [extra-package ...]
# --build-only: only what builds the library and the `tessel` command (scripts/demo.sh), no
# GoogleTest or Python, which a first demo on a new machine would otherwise wait for.
# Runs apt-get as root, or through sudo when not root. Prints only what it installs.
set -euo pipefail

build_only=0
if [[ ${1:-} == --build-only ]]; then
  build_only=1
  shift
fi
packages=(cmake ninja-build g++)
# Doxygen and Chromium: the documentation site's C++ reference and its browser check.
((build_only)) || packages+=(googletest libgtest-dev libgmock-dev python3 python3-venv python3-pip
                             python3-numpy doxygen chromium)
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
