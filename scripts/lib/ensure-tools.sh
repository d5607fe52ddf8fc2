# shellcheck shell=bash
# Sourced by scripts/test and scripts/bench: installs what tests and
# benchmarks run for real, from Debian's packages, when it is missing:
#   redis-server  (redis-server) the servers the fixtures start
#   promtool, prometheus (prometheus)  lints the /metrics scrapes, tests the
#                 alert rules, and runs the Prometheus server the alert and
#                 dashboard test starts
#   tmux          (tmux)         the real terminal `status --watch` is tested in
#   initdb, postgres, psql (postgresql)  the PostgreSQL servers the fixtures
#                 start (Debian keeps them in /usr/lib/postgresql/VERSION/bin)
#   pgbouncer     (pgbouncer)    the transaction pooler the PostgreSQL tests
#                 put in the path
#   etcd, etcdctl (etcd-server, etcd-client)  the etcd members the fixtures
#                 start, and the fixtures' own requests
#   zookeeper.jar, java (zookeeper, default-jre-headless)  the ZooKeeper
#                 servers the fixtures start (QuorumPeerMain, on Java)
#   curl          (curl)         the Kubernetes fixture's own requests to the
#                 kube-apiserver it starts (scripts/lib/ensure-kube.sh builds that)
#   faketime      (faketime)     a candidate's wall clock an hour off, in the
#                 Kubernetes Lease's clock-skew test
# The packages' own services are never used: the tests start their own
# servers on free loopback ports.
ensure_tools_missing=()
for tool in redis-server:redis-server promtool:prometheus prometheus:prometheus tmux:tmux \
  etcd:etcd-server etcdctl:etcd-client curl:curl faketime:faketime; do
  command -v "${tool%%:*}" >/dev/null 2>&1 || ensure_tools_missing+=("${tool##*:}")
done
# As root the fixtures run the server as the `postgres` user, which the
# package creates.
if { ! command -v initdb >/dev/null 2>&1 && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; } ||
  { [ "$(id -u)" = 0 ] && ! id postgres >/dev/null 2>&1; }; then
  ensure_tools_missing+=(postgresql)
fi
if ! command -v pgbouncer >/dev/null 2>&1 && [ ! -x /usr/sbin/pgbouncer ]; then
  ensure_tools_missing+=(pgbouncer)
fi
if [ ! -f /usr/share/java/zookeeper.jar ]; then
  ensure_tools_missing+=(zookeeper)
fi
if ! command -v java >/dev/null 2>&1; then
  ensure_tools_missing+=(default-jre-headless)
fi
if [ ${#ensure_tools_missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing Debian packages: ${ensure_tools_missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      "${ensure_tools_missing[@]}" >/dev/null
  else
    echo "missing ${ensure_tools_missing[*]}; install them (Debian: sudo apt-get install ${ensure_tools_missing[*]}) and run again" >&2
    exit 1
  fi
fi
