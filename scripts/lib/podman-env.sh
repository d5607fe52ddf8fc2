# shellcheck shell=bash
# Sourced by scripts/lib/check-image.sh and scripts/lib/check-deb.sh:
# `podman_env DIR` gives this shell a podman of its own: storage in DIR (vfs
# works without overlay support), runc (Debian's crun refuses this
# sandbox's hybrid cgroups), the limits the sandbox allows (podman's default
# nofile is above them), and netavark, whose DNS lets compose services find
# each other. Through the environment, so podman-compose's podman calls get
# the same.
podman_env() {
  local dir=$1
  printf '[storage]\ndriver = "vfs"\ngraphroot = "%s"\nrunroot = "%s"\n' \
    "$dir/storage" "$dir/run" >"$dir/storage.conf"
  {
    echo '[containers]'
    echo 'default_ulimits = ["nofile=1024:1024", "nproc=1024:1024"]'
    if command -v runc >/dev/null 2>&1; then printf '[engine]\nruntime = "runc"\n'; fi
    if [ -x /usr/lib/podman/netavark ]; then printf '[network]\nnetwork_backend = "netavark"\n'; fi
  } >"$dir/containers.conf"
  export CONTAINERS_STORAGE_CONF=$dir/storage.conf CONTAINERS_CONF=$dir/containers.conf
}
