#!/usr/bin/env bash
# Build a local, registry-free Redis image from this machine's own redis-server.
#
# The image is `FROM scratch` and contains only the redis-server binary, the
# shared libraries it links (as reported by ldd, including the dynamic loader),
# a minimal /etc/passwd and /etc/group, and empty /data and /tmp directories.
# It is tagged `redlease-test/redis:<version>` and `redlease-test/redis:local`.
#
# Usage: scripts/redis-image.sh [--print-tag] [--force]
#   --print-tag  only print the tag that would be built (no Docker needed)
#   --force      rebuild even if the tag already exists
#
# On success the last line printed on stdout is the image tag, so callers can do
#   REDLEASE_REDIS_IMAGE="$(scripts/redis-image.sh | tail -n1)"
# Progress messages go to stderr.
set -euo pipefail

print_tag=0
force=0
for arg in "$@"; do
    case "$arg" in
        --print-tag) print_tag=1 ;;
        --force) force=1 ;;
        -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
        *) echo "redis-image.sh: unknown argument: $arg" >&2; exit 2 ;;
    esac
done

log() { echo "redis-image.sh: $*" >&2; }

server="$(command -v redis-server || true)"
if [[ -z "$server" ]]; then
    log "redis-server not found on PATH (install it, e.g. scripts/install-deps.sh)"
    exit 1
fi
# e.g. "Redis server v=7.0.15 sha=... malloc=jemalloc-5.3.0 bits=64 build=..."
version="$("$server" --version | sed -n 's/.* v=\([0-9][0-9.]*\).*/\1/p')"
if [[ -z "$version" ]]; then
    log "could not parse the version of $server"
    exit 1
fi
tag="redlease-test/redis:${version}"
if [[ "$print_tag" == 1 ]]; then
    echo "$tag"
    exit 0
fi

docker_bin="${DOCKER:-docker}"
if ! "$docker_bin" info >/dev/null 2>&1; then
    log "no Docker engine answers; cannot build $tag"
    exit 1
fi

if [[ "$force" == 0 ]] && "$docker_bin" image inspect "$tag" >/dev/null 2>&1; then
    log "$tag already exists (use --force to rebuild)"
    "$docker_bin" tag "$tag" redlease-test/redis:local
    echo "$tag"
    exit 0
fi

ctx="$(mktemp -d "${TMPDIR:-/tmp}/redlease-redis-image.XXXXXX")"
trap 'rm -rf "$ctx"' EXIT
root="$ctx/rootfs"
mkdir -p "$root/usr/local/bin" "$root/data" "$root/tmp" "$root/etc"
chmod 1777 "$root/tmp"

# The Debian binary is a symlink (redis-server -> redis-check-rdb); redis picks
# its mode from argv[0], so copy the real file under the name redis-server.
cp -L "$server" "$root/usr/local/bin/redis-server"

# Every shared library ldd resolves (absolute paths), plus the loader.
mapfile -t libs < <(ldd "$server" | awk '
    $2 == "=>" && $3 ~ /^\// { print $3 }
    $1 ~ /^\// { print $1 }' | sort -u)
if [[ "${#libs[@]}" -eq 0 ]]; then
    log "ldd found no libraries for $server (static binary?)"
fi
for lib in "${libs[@]}"; do
    dest="$root$lib"
    mkdir -p "$(dirname "$dest")"
    cp -L "$lib" "$dest"
    # Also provide the library under its resolved path's directory when the
    # loader path is a symlink into another directory (e.g. /lib64 -> /lib/x86_64-linux-gnu).
    real="$(readlink -f "$lib")"
    if [[ "$real" != "$lib" && ! -e "$root$real" ]]; then
        mkdir -p "$(dirname "$root$real")"
        cp -L "$lib" "$root$real"
    fi
done

cat >"$root/etc/passwd" <<'PASSWD'
root:x:0:0:root:/root:/sbin/nologin
redis:x:999:999:redis:/data:/sbin/nologin
nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin
PASSWD
cat >"$root/etc/group" <<'GROUP'
root:x:0:
redis:x:999:
nogroup:x:65534:
GROUP

cat >"$ctx/Dockerfile" <<DOCKERFILE
FROM scratch
COPY rootfs/ /
ENV PATH=/usr/local/bin
WORKDIR /data
VOLUME /data
EXPOSE 6379
LABEL org.opencontainers.image.title="redlease-test/redis" \\
      org.opencontainers.image.description="redis-server ${version} copied from the build host, for redlease tests" \\
      org.opencontainers.image.version="${version}"
# Same convention as the official image: the command starts with redis-server.
CMD ["redis-server"]
DOCKERFILE

log "building $tag from $server (${#libs[@]} libraries)"
# The legacy builder is enough for COPY-only Dockerfiles and works with old
# engines and without buildx.
DOCKER_BUILDKIT=0 "$docker_bin" build -q -t "$tag" -t redlease-test/redis:local "$ctx" >&2

# Smoke test: the binary runs inside the image.
if ! "$docker_bin" run --rm --entrypoint "" "$tag" redis-server --version >&2; then
    log "the image was built but redis-server does not run in it"
    exit 1
fi
echo "$tag"
