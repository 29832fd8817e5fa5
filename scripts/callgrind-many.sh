#!/usr/bin/env bash
# Client instructions per renewal of many auto-renewed locks, redlease against a raw redis-rs
# `PEXPIRE` pipeline, counted by `valgrind --tool=callgrind` (repeatable on a noisy machine).
#
# Starts a redis-server on 127.0.0.1:$PORT (default 6398), builds the `cycle_instructions`
# bench target, and runs `redlease-many` and `raw-many` under callgrind holding
# $REDLEASE_BENCH_MANY keys (default 2000; TTL 3 s, renewed every 1 s) for LOW and HIGH seconds.
# Each run prints the renewals the server made (`PEXPIRE` calls); the script prints
# (Ir(HIGH) - Ir(LOW)) / (renewals(HIGH) - renewals(LOW)): the start-up, connection and obtain
# costs cancel out, and one renewal per lock per second makes it the instructions per
# lock-second.
#
# Usage: scripts/callgrind-many.sh [LOW HIGH]   (default 2 6)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
low="${1:-2}" high="${2:-6}" port="${PORT:-6398}"
command -v valgrind >/dev/null || { echo "callgrind-many.sh: valgrind is not installed (apt-get install valgrind)" >&2; exit 1; }
bin=$(cargo bench -p redlease --bench cycle_instructions --no-run --message-format=json 2>/dev/null \
    | sed -n 's/.*"executable":"\([^"]*cycle_instructions[^"]*\)".*/\1/p' | tail -n1)
[[ -x "$bin" ]] || { echo "callgrind-many.sh: could not build the bench" >&2; exit 1; }
dir=$(mktemp -d)
trap 'redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true; rm -rf "$dir"' EXIT
redis-server --port "$port" --save '' --appendonly no --daemonize yes --dir "$dir" >/dev/null
for _ in $(seq 50); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
export REDLEASE_BENCH_URL="redis://127.0.0.1:$port"
# Prints "<Ir> <renewals>"; keeps the callgrind output as $dir/<client>-<secs>.out.
run() {
    valgrind --tool=callgrind --callgrind-out-file="$dir/$1-$2.out" "$bin" "$1" "$2" >"$dir/stdout" 2>"$dir/log"
    echo "$(sed -n 's/.*Collected : \([0-9]*\).*/\1/p' "$dir/log") $(sed -n 's/^renewals \([0-9]*\)$/\1/p' "$dir/stdout")"
    [[ -n "${KEEP:-}" ]] && cp "$dir/$1-$2.out" "$KEEP/$1-$2.out" || true
}
printf '%-14s %14s %10s %14s %10s %18s\n' client "Ir($low s)" renewals "Ir($high s)" renewals "Ir per renewal"
for client in redlease-many raw-many; do
    read -r a ra < <(run "$client" "$low")
    read -r b rb < <(run "$client" "$high")
    printf '%-14s %14s %10s %14s %10s %18s\n' "$client" "$a" "$ra" "$b" "$rb" "$(( (b - a) / (rb - ra) ))"
done
