#!/usr/bin/env bash
# Installs Debian's chromium for the browser tests of the HTML pages, if it is missing and
# this machine can install it (root with apt). Prints one line either way; never fails the
# caller: without a browser those tests skip and say why.
set -u
if command -v chromium >/dev/null 2>&1; then
  echo "chromium: $(command -v chromium)"; exit 0
fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "chromium: installing Debian's chromium for the browser tests (about a minute)"
  if DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/tmp/ensure-chromium.log 2>&1 ||
     { apt-get update -qq >>/tmp/ensure-chromium.log 2>&1 &&
       DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >>/tmp/ensure-chromium.log 2>&1; }; then
    echo "chromium: installed $(command -v chromium)"; exit 0
  fi
  echo "chromium: apt-get failed (see /tmp/ensure-chromium.log); browser tests will skip"
  exit 0
fi
echo "chromium: not installed and cannot install here (needs root and apt); browser tests will skip"
