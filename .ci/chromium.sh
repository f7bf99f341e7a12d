#!/usr/bin/env bash
# Installs Debian's chromium for the dashboard's browser tests when it is missing
# (idempotent: does nothing when /usr/bin/chromium is there). Needs root and a Debian mirror.
set -euo pipefail
if command -v chromium >/dev/null 2>&1; then
    exit 0
fi
if [ "$(id -u)" != "0" ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "chromium is missing and cannot be installed here (needs root and apt-get);" \
        "the browser tests will skip" >&2
    exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq chromium >/dev/null
