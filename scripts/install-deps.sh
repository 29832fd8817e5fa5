#!/usr/bin/env bash
# Install the servers the test kit needs, if they are missing (idempotent).
#
#   redis-server, redis-cli   (Debian/Ubuntu packages: redis-server, redis-tools)
#   initdb, postgres          (Debian/Ubuntu package: postgresql; found on PATH or in
#                              /usr/lib/postgresql/<version>/bin)
#   iptables, ip              (fault tests: blackholed ports, network namespaces)
#
# Usage: scripts/install-deps.sh [--check]
#   --check   only report what is missing (exit 1 if anything is)
# Installs with apt-get, as root or through passwordless sudo. Used by .ci/run and
# `cargo xtask test`.
set -euo pipefail

check_only=0
case "${1:-}" in
    --check) check_only=1 ;;
    "") ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    *) echo "install-deps.sh: unknown argument: $1" >&2; exit 2 ;;
esac

have() { command -v "$1" >/dev/null 2>&1; }

have_postgres() {
    if [[ -n "${REDLEASE_PG_BINDIR:-}" && -x "$REDLEASE_PG_BINDIR/initdb" && -x "$REDLEASE_PG_BINDIR/postgres" ]]; then
        return 0
    fi
    if have initdb && have postgres; then
        return 0
    fi
    local dir
    for dir in /usr/lib/postgresql/*/bin; do
        [[ -x "$dir/initdb" && -x "$dir/postgres" ]] && return 0
    done
    return 1
}

missing=()
have redis-server || missing+=(redis-server)
have redis-cli || missing+=(redis-tools)
have_postgres || missing+=(postgresql)
# Fault tests: blackholed ports (iptables) and network namespaces (ip).
have iptables || missing+=(iptables)
have ip || missing+=(iproute2)

if [[ ${#missing[@]} -eq 0 ]]; then
    echo "install-deps.sh: redis-server, redis-cli, postgres, iptables and ip are installed"
    exit 0
fi

echo "install-deps.sh: missing packages: ${missing[*]}"
if [[ "$check_only" == 1 ]]; then
    exit 1
fi

if [[ "$(id -u)" == 0 ]]; then
    sudo=()
elif have sudo && sudo -n true 2>/dev/null; then
    sudo=(sudo -n)
else
    echo "install-deps.sh: not root and no passwordless sudo; install them with:" >&2
    echo "    sudo apt-get install -y ${missing[*]}" >&2
    exit 1
fi
if ! have apt-get; then
    echo "install-deps.sh: apt-get not found; install ${missing[*]} with your package manager" >&2
    exit 1
fi

export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -q
"${sudo[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"

# The packages may start system services (redis on 6379, a postgres cluster on
# 5432); the kit never uses those ports, so they are left alone.
have redis-server && have redis-cli && have_postgres || {
    echo "install-deps.sh: installation finished but something is still missing" >&2
    exit 1
}
echo "install-deps.sh: installed ${missing[*]}"
