# shellcheck shell=bash
# Sourced by scripts/test and scripts/bench: installs redis-server (Debian's
# package) when it is missing, since tests and benchmarks start real servers.
if ! command -v redis-server >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing redis-server (Debian package)"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null
  else
    echo "redis-server is not installed; install it (e.g. 'sudo apt-get install redis-server') and run again" >&2
    exit 1
  fi
fi
