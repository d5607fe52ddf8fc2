#!/usr/bin/env bash
# Builds the Dockerfile's runtime and demo stages with podman from binaries
# built on this machine, then runs the binaries from the image's own files.
# No base image is pulled: `--build-context build=DIR` stands in for the
# Rust build stage, with DIR staged by scripts/stage-rootfs exactly as that
# stage stages it. The binaries first run by chroot into the mounted image,
# as its non-root user; then scripts/lib/check_containers.py starts the
# images as containers for real (runc, with ulimits this sandbox allows, and
# netavark for the compose network's DNS), compose demo included.
#
# usage: scripts/lib/check-image.sh LEADERD WORKER
# exit: 0 passed, 1 failed, 77 podman or chroot cannot work on this machine,
#       78 the image checks passed but containers cannot be started here
set -euo pipefail

leaderd=$1
worker=$2
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)

if ! command -v podman >/dev/null 2>&1; then
  echo "podman is not installed (Debian: apt-get install podman)"
  exit 77
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/leaderd-image.XXXXXX")
# A podman of our own (scripts/lib/podman-env.sh).
. scripts/lib/podman-env.sh
podman_env "$work"
podman=(podman)
mounted=()
redis_pid=
cleanup() {
  for image in "${mounted[@]}"; do "${podman[@]}" image unmount "$image" >/dev/null 2>&1 || true; done
  "${podman[@]}" rm -a -f >/dev/null 2>&1 || true
  "${podman[@]}" rmi -a -f >/dev/null 2>&1 || true
  [ -n "$redis_pid" ] && kill "$redis_pid" 2>/dev/null
  rm -rf "$work" 2>/dev/null || true
}
trap cleanup EXIT

if ! "${podman[@]}" info >/dev/null 2>"$work/info.err"; then
  echo "podman cannot run here: $(tail -n 3 "$work/info.err")"
  exit 77
fi

fails=0
check() { # check DESCRIPTION COMMAND...
  local what=$1
  shift
  if "$@"; then echo "  ok   $what"; else echo "  FAIL $what"; fails=$((fails + 1)); fi
}

# Debug builds carry ~80 MB of debug info; the image needs none of it.
mkdir -p "$work/bin"
objcopy --strip-debug "$leaderd" "$work/bin/leaderd"
objcopy --strip-debug "$worker" "$work/bin/worker"
scripts/stage-rootfs "$work/context/out" "$work/bin/leaderd" "$work/bin/worker" >/dev/null

for target in runtime demo; do
  if ! "${podman[@]}" build --quiet --pull=never --target "$target" \
    --build-context "build=$work/context" --build-arg "VERSION=$version" \
    -t "localhost/leaderd-$target:check" -f Dockerfile . >/dev/null 2>"$work/build.err"; then
    echo "  FAIL podman build --target $target:"
    cat "$work/build.err"
    exit 1
  fi
  echo "  ok   podman build --target $target"
done

inspect() { "${podman[@]}" image inspect "localhost/leaderd-$1:check" --format "$2"; }
check "runtime runs as 65532:65532" test "$(inspect runtime '{{.Config.User}}')" = "65532:65532"
check "runtime entrypoint is /usr/local/bin/leaderd" \
  test "$(inspect runtime '{{json .Config.Entrypoint}}')" = '["/usr/local/bin/leaderd"]'
check "runtime exposes 4040/tcp" grep -q '4040/tcp' <<<"$(inspect runtime '{{json .Config.ExposedPorts}}')"
check "runtime is labelled org.opencontainers.image.version=$version" \
  test "$(inspect runtime '{{index .Config.Labels "org.opencontainers.image.version"}}')" = "$version"

runtime=$("${podman[@]}" image mount localhost/leaderd-runtime:check)
mounted+=(localhost/leaderd-runtime:check)
demo=$("${podman[@]}" image mount localhost/leaderd-demo:check)
mounted+=(localhost/leaderd-demo:check)

no_shell() { [ ! -e "$runtime/bin/sh" ] && [ ! -e "$runtime/usr/bin/apt-get" ] && [ ! -e "$runtime/sbin/apk" ]; }
check "runtime has no shell and no package manager" no_shell
not_writable() { [ -z "$(find "$runtime" -xdev \( -uid 65532 -o -perm -0002 \) ! -path "$runtime/tmp" -print -quit)" ]; }
check "runtime: nothing but /tmp is writable by the leaderd user" not_writable

# The runtime image's environment (ENV lines), as a container would get it.
mapfile -t image_env < <(inspect runtime '{{range .Config.Env}}{{println .}}{{end}}' | sed '/^$/d')
# By its full path: the image's PATH replaces ours before chroot is found.
chroot=$(command -v chroot)
in_image() { # in_image ROOT COMMAND... : runs COMMAND inside ROOT as 65532
  local root=$1
  shift
  env -i "${image_env[@]}" "$chroot" --userspec=65532:65532 "$root" "$@"
}
if ! in_image "$runtime" /usr/local/bin/leaderd --version >"$work/version" 2>&1; then
  if ! chroot / true 2>/dev/null; then
    echo "chroot is not permitted here, so the image's binary cannot be run: $(cat "$work/version")"
    exit 77
  fi
fi
check "leaderd --version in the image prints 'leaderd $version'" grep -qx "leaderd $version" "$work/version" \
  || sed 's/^/       /' "$work/version"

compose_line() {
  in_image "$demo" /usr/local/bin/leaderd check --offline --redis redis://redis:6379 --key demo \
    --stop-timeout 5s -- /usr/local/bin/worker >"$work/offline.out" 2>&1 \
    && grep -q '^http.listen = "0.0.0.0:4040"  # LEADERD_HTTP' "$work/offline.out"
}
check "leaderd check --offline in the demo image accepts the compose command line, listens on 0.0.0.0" compose_line
worker_usage() {
  local usage
  usage=$(in_image "$demo" /usr/local/bin/worker --no-such-flag 2>&1) || true
  grep -q '^usage: worker' <<<"$usage"
}
check "the example worker runs in the demo image" worker_usage

# The image's leaderd against a real Redis: connects, runs its scripts.
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no >"$work/redis.log" 2>&1 &
redis_pid=$!
for _ in $(seq 50); do
  grep -q 'Ready to accept connections' "$work/redis.log" && break
  sleep 0.1
done
online_check() {
  in_image "$runtime" /usr/local/bin/leaderd check --redis "redis://127.0.0.1:$port" --key image-check \
    >"$work/check.out" 2>&1 && grep -q '^# ok: acquire, renew, release and the wait for wake-ups' "$work/check.out"
}
check "leaderd check in the image reaches a real Redis and runs its scripts" online_check

rc=1
if [ $fails = 0 ]; then
  echo "  containers, for real:"
  rc=0
  python3 scripts/lib/check_containers.py "$version" "$work" || rc=$?
  # 77 from there (containers cannot start) is 78 from here.
  if [ $rc = 77 ]; then rc=78; elif [ $rc != 0 ]; then rc=1; fi
fi
# The script's status, without `exit`: with an exit here the linter thinks
# the functions above, called indirectly, are unreachable.
[ $rc = 0 ] || (exit $rc)
