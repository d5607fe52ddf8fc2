# shellcheck shell=bash
# Builds, when missing, the real kube-apiserver and etcd 3.6 the Kubernetes
# Lease tests start (issue #38), kubectl (which applies deploy/kubernetes
# as users do) and the client-go elector leaderd is measured against
# (tests/k8s/elector, issue #39), with `go` from their published modules
# (tests/k8s/go.mod, tests/k8s/etcd/go.mod), into a cache outside the
# repository keyed by those files, the elector and this script, so a
# reused machine pays nothing and a fresh one pays once (about 9 minutes
# and 750 MB of modules on 2 cores). Nothing is committed but the module
# files and the elector's source. Sourced: it exports
#   LEADERD_KUBE_APISERVER  the kube-apiserver binary
#   LEADERD_KUBE_ETCD       the etcd binary
#   LEADERD_KUBECTL         kubectl, the same version
#   LEADERD_KUBE_ELECTOR    the client-go elector
# Run directly, it prints them.
ensure_kube_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
ensure_kube_key="$(cat "$ensure_kube_root"/tests/k8s/go.mod "$ensure_kube_root"/tests/k8s/go.sum \
  "$ensure_kube_root"/tests/k8s/etcd/go.mod "$ensure_kube_root"/tests/k8s/etcd/go.sum \
  "$ensure_kube_root"/tests/k8s/elector/*.go "$ensure_kube_root"/scripts/lib/ensure-kube.sh |
  sha256sum | cut -c1-16)"
ensure_kube_dir="${XDG_CACHE_HOME:-$HOME/.cache}/leaderd/k8s-$ensure_kube_key"
ensure_kube_build() {
  local version minor partial="$ensure_kube_dir.partial"
  if ! command -v go >/dev/null 2>&1; then
    echo "ensure-kube: go is needed to build kube-apiserver and etcd from their modules" >&2
    return 1
  fi
  # `require k8s.io/kubernetes vX` alone, or a line of a require block.
  version="$(awk '$1 == "k8s.io/kubernetes" { print $2 } $1 == "require" && $2 == "k8s.io/kubernetes" { print $3 }' \
    "$ensure_kube_root/tests/k8s/go.mod" | head -n 1)"
  case "$version" in
  v1.*) ;;
  *)
    echo "ensure-kube: no k8s.io/kubernetes version in tests/k8s/go.mod" >&2
    return 1
    ;;
  esac
  minor="$(echo "$version" | cut -d. -f2)"
  echo "ensure-kube: building kube-apiserver $version, kubectl, the client-go elector and etcd into $ensure_kube_dir (once per machine)" >&2
  mkdir -p "$partial"
  # The version kube-apiserver and kubectl report (`/version`, logs), as
  # the release build sets it.
  local ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$version -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor"
  (cd "$ensure_kube_root/tests/k8s" &&
    go build -trimpath -o "$partial/kube-apiserver" -ldflags "$ldflags" k8s.io/kubernetes/cmd/kube-apiserver &&
    go build -trimpath -o "$partial/kubectl" -ldflags "$ldflags" k8s.io/kubernetes/cmd/kubectl &&
    go build -trimpath -o "$partial/elector" -ldflags "-s -w" ./elector) || return 1
  (cd "$ensure_kube_root/tests/k8s/etcd" &&
    go build -trimpath -ldflags "-s -w" -o "$partial/etcd" go.etcd.io/etcd/server/v3) || return 1
  rm -rf "$ensure_kube_dir"
  mv "$partial" "$ensure_kube_dir"
}
if [ ! -x "$ensure_kube_dir/kube-apiserver" ] || [ ! -x "$ensure_kube_dir/etcd" ] ||
  [ ! -x "$ensure_kube_dir/kubectl" ] || [ ! -x "$ensure_kube_dir/elector" ]; then
  ensure_kube_build || echo "ensure-kube: the build failed" >&2
fi
export LEADERD_KUBE_APISERVER="$ensure_kube_dir/kube-apiserver"
export LEADERD_KUBE_ETCD="$ensure_kube_dir/etcd"
export LEADERD_KUBECTL="$ensure_kube_dir/kubectl"
export LEADERD_KUBE_ELECTOR="$ensure_kube_dir/elector"
if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  echo "LEADERD_KUBE_APISERVER=$LEADERD_KUBE_APISERVER"
  echo "LEADERD_KUBE_ETCD=$LEADERD_KUBE_ETCD"
  echo "LEADERD_KUBECTL=$LEADERD_KUBECTL"
  echo "LEADERD_KUBE_ELECTOR=$LEADERD_KUBE_ELECTOR"
fi
