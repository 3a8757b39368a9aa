#!/usr/bin/env bash
# Installs what dsv4 needs to build and test, and only what is missing.
# Idempotent; runs unattended as root on a fresh Debian 12 machine.
#   Debian packages: toolchain, libraries named in docs/architecture.md, and
#   headless Chromium with its driver (the chat page's browser tests).
#   Python packages the tests need: into the project-local venv .venv/ (never the system).
set -euo pipefail
cd "$(dirname "$0")/.."

APT_PACKAGES=(
  build-essential cmake ninja-build ccache git python3 python3-venv
  libhwy-dev nlohmann-json3-dev libcpp-httplib-dev libcli11-dev libfmt-dev
  libpcre2-dev libicu-dev zlib1g-dev libgtest-dev libgmock-dev libbenchmark-dev
  clang clang-format clang-tidy libclang-rt-14-dev
  chromium chromium-driver
  libopenmpi-dev openmpi-bin
)

missing=()
for p in "${APT_PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing Debian packages: ${missing[*]}"
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# Python test dependencies (pytest; the server tests add openai/anthropic later).
PY_REQS=tests/integration/requirements.txt
if [ -f "$PY_REQS" ]; then
  PY=python3
  if [ ! -x .venv/bin/python ]; then
    "$PY" -m venv .venv
  fi
  stamp=.venv/.reqs-$(sha256sum "$PY_REQS" | cut -c1-16)
  if [ ! -f "$stamp" ]; then
    .venv/bin/pip install -q --disable-pip-version-check -r "$PY_REQS"
    rm -f .venv/.reqs-* && touch "$stamp"
  fi
fi
