#!/usr/bin/env bash
# Instructions per serial lock cycle for redlease, rslock and raw redis-rs, counted by
# `valgrind --tool=callgrind` (repeatable on a noisy machine), client side only.
#
# Starts a redis-server on 127.0.0.1:$PORT (default 6399), builds the `cycle_instructions`
# bench target, runs each client under callgrind at LOW and HIGH cycle counts and prints
# (Ir(HIGH) - Ir(LOW)) / (HIGH - LOW): the start-up and connection costs cancel out.
#
# Usage: scripts/callgrind-cycle.sh [LOW HIGH]   (default 200 1200)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
low="${1:-200}" high="${2:-1200}" port="${PORT:-6399}"
command -v valgrind >/dev/null || { echo "callgrind-cycle.sh: valgrind is not installed (apt-get install valgrind)" >&2; exit 1; }
bin=$(cargo bench -p redlease --bench cycle_instructions --no-run --message-format=json 2>/dev/null \
    | sed -n 's/.*"executable":"\([^"]*cycle_instructions[^"]*\)".*/\1/p' | tail -n1)
[[ -x "$bin" ]] || { echo "callgrind-cycle.sh: could not build the bench" >&2; exit 1; }
dir=$(mktemp -d)
trap 'redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true; rm -rf "$dir"' EXIT
redis-server --port "$port" --save '' --appendonly no --daemonize yes --dir "$dir" >/dev/null
for _ in $(seq 50); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
export REDLEASE_BENCH_URL="redis://127.0.0.1:$port"
ir() {
    valgrind --tool=callgrind --callgrind-out-file="$dir/out" "$bin" "$1" "$2" >/dev/null 2>"$dir/log"
    sed -n 's/.*Collected : \([0-9]*\).*/\1/p' "$dir/log"
}
printf '%-10s %16s %16s %14s\n' client "Ir($low)" "Ir($high)" "Ir per cycle"
for client in redlease rslock raw; do
    a=$(ir "$client" "$low"); b=$(ir "$client" "$high")
    printf '%-10s %16s %16s %14s\n' "$client" "$a" "$b" "$(( (b - a) / (high - low) ))"
done
