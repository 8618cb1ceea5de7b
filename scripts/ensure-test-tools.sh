#!/usr/bin/env bash
# Debian packages the test suite uses, installed only when absent: shellcheck (actionlint runs
# it on the workflows' run: scripts, and the machine tests on every rendered boot script), curl
# (the boot-script scenarios run the real script, which asks its metadata server with curl)
# and chromium with its chromedriver (the HTML pages are tested in a real headless browser).
# Without root or apt-get nothing is installed, and the tests that need a missing tool skip,
# saying which.
set -euo pipefail
missing=()
command -v shellcheck >/dev/null 2>&1 || missing+=(shellcheck)
command -v curl >/dev/null 2>&1 || missing+=(curl)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v chromedriver >/dev/null 2>&1 || missing+=(chromium-driver)
if [ "${#missing[@]}" -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "note: ${missing[*]} not installed (needs root and apt-get): the tests that use them skip" >&2
  exit 0
fi
echo "installing ${missing[*]} (Debian packages, once)" >&2
if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"; } >/dev/null; then
  echo "note: could not install ${missing[*]}: the tests that use them skip" >&2
fi
