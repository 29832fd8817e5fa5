#!/usr/bin/env bash
# Client instructions per renewal of many auto-renewed locks and of many elections in one
# `ElectionGroup`, redlease against a raw redis-rs `PEXPIRE` pipeline, counted by
# `valgrind --tool=callgrind` (repeatable on a noisy machine).
#
# Starts a redis-server on 127.0.0.1:$PORT (default 6398), builds the `cycle_instructions`
# bench target, and runs `redlease-many` (auto-renewed locks through one `Locker`),
# `group-many` (elections of one `ElectionGroup`, all led by this member) and `raw-many`
# under callgrind holding $REDLEASE_BENCH_MANY keys (default 2000; TTL 3 s, renewed every 1 s)
# for LOW and HIGH seconds; $CLIENTS picks some of them (default: all three).
# Each run prints the renewals the server made (`PEXPIRE` calls) during its hold; the script
# prints (Ir(HIGH) - Ir(LOW)) / (renewals(HIGH) - renewals(LOW)), Ir counted over the hold
# alone (see `run`; the two `INFO` calls that bound it cancel out), and one renewal per lock per
# second makes it the instructions per lock-second (election-second). KEEP=<dir> keeps the
# callgrind outputs of the holds there (for `callgrind_annotate`); BIN=<path> runs that build
# of the bench instead of building it (to compare two builds).
#
# Usage: scripts/callgrind-many.sh [LOW HIGH]   (default 2 6)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
low="${1:-2}" high="${2:-6}" port="${PORT:-6398}"
command -v valgrind >/dev/null || { echo "callgrind-many.sh: valgrind is not installed (apt-get install valgrind)" >&2; exit 1; }
bin="${BIN:-$(cargo bench -p redlease --bench cycle_instructions --no-run --message-format=json 2>/dev/null \
    | sed -n 's/.*"executable":"\([^"]*cycle_instructions[^"]*\)".*/\1/p' | tail -n1)}"
[[ -x "$bin" ]] || { echo "callgrind-many.sh: could not build the bench" >&2; exit 1; }
dir=$(mktemp -d)
trap 'redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || true; rm -rf "$dir"' EXIT
redis-server --port "$port" --save '' --appendonly no --daemonize yes --dir "$dir" >/dev/null
for _ in $(seq 50); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
export REDLEASE_BENCH_URL="redis://127.0.0.1:$port"
# Prints "<Ir of the hold> <renewals>". The bench passes `hold_mark` at the start and at the
# end of its hold: `--dump-before` splits the counts there, so $dir/<client>-<secs>.out.2 holds
# the hold alone (the start-up, whose cost varies from run to run with how the obtains and
# acquires fall into turns, is in .out.1; the shutdown in .out).
run() {
    valgrind --tool=callgrind --dump-before='*hold_mark' --callgrind-out-file="$dir/$1-$2.out" \
        "$bin" "$1" "$2" >"$dir/stdout" 2>"$dir/log"
    echo "$(sed -n 's/^totals: \([0-9]*\)$/\1/p' "$dir/$1-$2.out.2") $(sed -n 's/^renewals \([0-9]*\)$/\1/p' "$dir/stdout")"
    [[ -n "${KEEP:-}" ]] && cp "$dir/$1-$2.out.2" "$KEEP/$1-$2.out" || true
}
printf '%-14s %14s %10s %14s %10s %18s\n' client "Ir($low s)" renewals "Ir($high s)" renewals "Ir per renewal"
for client in ${CLIENTS:-redlease-many group-many raw-many}; do
    read -r a ra < <(run "$client" "$low")
    read -r b rb < <(run "$client" "$high")
    printf '%-14s %14s %10s %14s %10s %18s\n' "$client" "$a" "$ra" "$b" "$rb" "$(( (b - a) / (rb - ra) ))"
done
