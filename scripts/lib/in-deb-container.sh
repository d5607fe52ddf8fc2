#!/usr/bin/env bash
# Runs inside a throwaway minimal Debian container (scripts/lib/check-deb.sh):
# installs /tmp/leaderd.deb with dpkg and checks what a user gets.
# usage: in-deb-container.sh VERSION    exit: 0 passed, 1 failed
set -uo pipefail
version=$1
fails=0
check() { # check DESCRIPTION COMMAND...
  local what=$1
  shift
  if "$@" >/tmp/out 2>&1; then
    echo "  ok   $what"
  else
    echo "  FAIL $what:"
    sed 's/^/       /' /tmp/out | tail -n 10
    fails=$((fails + 1))
  fi
}
unit() { # where the package put the unit
  for f in /lib/systemd/system/leaderd.service /usr/lib/systemd/system/leaderd.service; do
    [ -e "$f" ] && echo "$f" && return
  done
  echo /nonexistent/leaderd.service
}

check "dpkg -i installs the package (with its postinst)" dpkg -i /tmp/leaderd.deb
check "leaderd --version prints 'leaderd $version'" test "$(leaderd --version)" = "leaderd $version"
offline() { # as the unit runs it: the env file, then the config
  # shellcheck source=/dev/null
  (set -a && . /etc/leaderd/leaderd.env && set +a && leaderd check --offline --config /etc/leaderd/leaderd.toml)
}
check "leaderd check --offline accepts /etc/leaderd/leaderd.toml and leaderd.env" offline
check "the system user leaderd exists, without a login shell" \
  bash -c 'getent passwd leaderd | grep -q ":/usr/sbin/nologin$" && getent group leaderd'
check "/etc/leaderd/leaderd.env (the Redis password) is 0600 root" \
  test "$(stat -c '%a %U' /etc/leaderd/leaderd.env)" = "600 root"
check "the systemd unit runs /usr/bin/leaderd as leaderd" \
  bash -c "grep -q '^ExecStart=/usr/bin/leaderd run --config /etc/leaderd/leaderd.toml$' $(unit) && grep -q '^User=leaderd$' $(unit)"
check "the unit is not enabled by the install (it needs the Redis URL first)" \
  test ! -e /etc/systemd/system/multi-user.target.wants/leaderd.service
check "man pages: leaderd(1), leaderd-run(1), leaderd-status(1)" \
  test -s /usr/share/man/man1/leaderd.1.gz -a -s /usr/share/man/man1/leaderd-run.1.gz -a -s /usr/share/man/man1/leaderd-status.1.gz
check "shell completions for bash, zsh and fish" test -s /usr/share/bash-completion/completions/leaderd \
  -a -s /usr/share/zsh/vendor-completions/_leaderd -a -s /usr/share/fish/vendor_completions.d/leaderd.fish
check "the bash completion offers leaderd's commands" grep -q "status" /usr/share/bash-completion/completions/leaderd
check "alert rules and the Grafana dashboard under /usr/share/leaderd" \
  test -s /usr/share/leaderd/prometheus/leaderd-alerts.yml -a -s /usr/share/leaderd/grafana/leaderd-dashboard.json
check "the two files in /etc/leaderd are conffiles" \
  bash -c "dpkg-query -W -f='\${Conffiles}' leaderd | grep -q /etc/leaderd/leaderd.toml && dpkg-query -W -f='\${Conffiles}' leaderd | grep -q /etc/leaderd/leaderd.env"
check "dpkg -r removes the binary and keeps the configuration" \
  bash -c 'dpkg -r leaderd && test ! -e /usr/bin/leaderd && test -e /etc/leaderd/leaderd.toml'
check "dpkg --purge removes the configuration" bash -c 'dpkg --purge leaderd && test ! -e /etc/leaderd/leaderd.toml'
[ $fails = 0 ]
