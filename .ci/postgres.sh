#!/usr/bin/env bash
# PostgreSQL for the tests of the PostgreSQL store (127.0.0.1:5432, trust auth, database
# "test"). Idempotent: starts an installed cluster that is stopped; where none is installed
# and apt-get can run as root, installs Debian's server and sets it up for local tests.
# Never fails the build: without a server those tests skip and say why.
set -uo pipefail

if ! command -v pg_lsclusters >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "installing PostgreSQL for the store tests"
        (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql) \
            >/dev/null 2>&1 || echo "could not install PostgreSQL; its tests will skip"
        fresh=1
    else
        echo "PostgreSQL is not installed; its tests will skip"
        exit 0
    fi
fi
command -v pg_lsclusters >/dev/null 2>&1 || exit 0

pg_lsclusters --no-header | while read -r version name port status _; do
    if [ "${fresh:-0}" = 1 ]; then
        hba="/etc/postgresql/$version/$name/pg_hba.conf"
        # Local test server only: trust loopback connections, as the tests expect.
        grep -q "^host all all 127.0.0.1/32 trust" "$hba" \
            || sed -i '1i host all all 127.0.0.1/32 trust' "$hba"
    fi
    case "$status" in
        online*) ;;
        *) pg_ctlcluster --skip-systemctl-redirect "$version" "$name" start \
            || echo "could not start PostgreSQL $version/$name; its tests will skip" ;;
    esac
done

if command -v psql >/dev/null 2>&1; then
    if ! psql -h 127.0.0.1 -U postgres -tAc "SELECT 1 FROM pg_database WHERE datname = 'test'" \
        postgres 2>/dev/null | grep -q 1; then
        su postgres -c "createdb test" >/dev/null 2>&1 \
            || psql -h 127.0.0.1 -U postgres -c "CREATE DATABASE test" postgres >/dev/null 2>&1 \
            || echo "could not create the database 'test'; the PostgreSQL tests will skip"
    fi
fi
exit 0
