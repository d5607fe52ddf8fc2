#!/usr/bin/env bash
# Builds leaderd's Debian package from the debug build (scripts/package-deb
# --dev) and installs it in a throwaway container of a minimal Debian 12
# (debootstrap --variant=minbase, made once and kept as a tarball under
# target/deploy-tools/), where scripts/lib/in-deb-container.sh checks what it
# installed, runs `leaderd --version` and `leaderd check --offline`, then
# removes and purges it.
#
# usage: scripts/lib/check-deb.sh
# exit: 0 passed, 1 failed, 77 the package cannot be checked on this machine
#       (no podman, no debootstrap, or containers cannot start here)
set -euo pipefail

version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)
if ! command -v podman >/dev/null 2>&1; then
  echo "podman is not installed (Debian: apt-get install podman)"
  exit 77
fi

rm -f target/debian/leaderd_*.deb
if ! scripts/package-deb --dev >target/package-deb.log 2>&1; then
  echo "  FAIL scripts/package-deb --dev:"
  tail -n 20 target/package-deb.log
  exit 1
fi
deb=$(ls target/debian/leaderd_"$version"-1_*.deb)
echo "  ok   scripts/package-deb built $deb ($(du -h "$deb" | cut -f1))"

rootfs=target/deploy-tools/debian-bookworm-minbase.tar
if [ ! -s "$rootfs" ]; then
  if ! command -v debootstrap >/dev/null 2>&1; then
    echo "debootstrap is not installed (Debian: apt-get install debootstrap)"
    exit 77
  fi
  staging=$(mktemp -d "${TMPDIR:-/tmp}/leaderd-debootstrap.XXXXXX")
  if ! debootstrap --variant=minbase bookworm "$staging/root" http://deb.debian.org/debian \
    >"$staging/log" 2>&1; then
    echo "debootstrap could not make a Debian root here: $(tail -n 3 "$staging/log")"
    rm -rf "$staging"
    exit 77
  fi
  mkdir -p "$(dirname "$rootfs")"
  tar -C "$staging/root" -cf "$rootfs.part" . && mv "$rootfs.part" "$rootfs"
  rm -rf "$staging"
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/leaderd-deb.XXXXXX")
. scripts/lib/podman-env.sh
podman_env "$work"
# shellcheck disable=SC2317 # called by the EXIT trap
cleanup() {
  podman rm -a -f >/dev/null 2>&1 || true
  podman rmi -a -f >/dev/null 2>&1 || true
  rm -rf "$work" 2>/dev/null || true
}
trap cleanup EXIT

if ! podman import --quiet "$rootfs" localhost/leaderd-debian:check >/dev/null 2>"$work/import.err"; then
  echo "podman cannot import a root file system here: $(tail -n 3 "$work/import.err")"
  exit 77
fi
set +e
podman run --rm --network none \
  -v "$PWD/$deb:/tmp/leaderd.deb:ro" \
  -v "$PWD/scripts/lib/in-deb-container.sh:/tmp/check.sh:ro" \
  localhost/leaderd-debian:check bash /tmp/check.sh "$version" 2>"$work/run.err"
rc=$?
set -e
if [ $rc = 0 ]; then exit 0; fi
if [ $rc = 1 ]; then exit 1; fi
echo "a container could not start here (podman run exited $rc): $(tail -n 3 "$work/run.err")"
exit 77
