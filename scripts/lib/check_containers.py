#!/usr/bin/env python3
"""Starts the images scripts/lib/check-image.sh built, as containers, for real.

    check_containers.py VERSION WORKDIR

1. `leaderd --version` in a container of the runtime image.
2. The unchanged docker-compose.yml under podman-compose: one Redis and
   three candidates; exactly one leads and the others name it; stopping the
   leader's container hands over (another leads, with a higher fencing
   token, long before the TTL) and its log shows the stop and the release.

Nothing is pulled: the compose file's Redis image is stood in for by one
built here from Debian's redis-server (with the official image's
`--protected-mode no`), and the demo image is the one just built.
podman's configuration (storage, runc, ulimits, netavark) comes from
CONTAINERS_CONF and CONTAINERS_STORAGE_CONF, set by check-image.sh.

Exit: 0 passed, 1 failed, 77 containers cannot be started on this machine.
"""

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

PORTS = {"leaderd-1": 4041, "leaderd-2": 4042, "leaderd-3": 4043}
REDIS_IMAGE = "docker.io/library/redis:7.2-alpine"
failures = 0


def ok(what):
    print(f"  ok   {what}")


def problem(what):
    global failures
    failures += 1
    print(f"  FAIL {what}")


def run(*args, check=True, timeout=180):
    return subprocess.run(args, capture_output=True, text=True, check=check, timeout=timeout)


def leader_view(port):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/leader", timeout=2) as r:
            return json.load(r)
    except urllib.error.HTTPError as e:  # 503: a standby still answers JSON
        return json.load(e)
    except OSError:
        return None


def one_leader(exclude=(), limit=60.0):
    """(service, token) once exactly one candidate leads and every other
    running one names it with the same token; None after `limit` seconds."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        views = {s: leader_view(p) for s, p in PORTS.items() if s not in exclude}
        if all(views.values()):
            leaders = [s for s, v in views.items() if v["is_leader"]]
            if len(leaders) == 1:
                token = views[leaders[0]]["fencing_token"]
                named = {(v["leader"], v["fencing_token"]) for v in views.values()}
                if named == {(leaders[0], token)}:
                    return leaders[0], token
        time.sleep(0.1)
    return None


def stage_redis(context):
    """A FROM-scratch image with Debian's redis-server, redis-cli and a
    shell for the entrypoint, with the libraries they link."""
    rootfs = os.path.join(context, "rootfs")
    for binary, dest in [("redis-server", "usr/local/bin/redis-server"),
                         ("redis-cli", "usr/local/bin/redis-cli"), ("dash", "bin/sh")]:
        path = shutil.which(binary)
        if path is None:
            raise RuntimeError(f"{binary} is not installed")
        target = os.path.join(rootfs, dest)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copy(os.path.realpath(path), target)
        for word in run("ldd", path).stdout.split():
            if word.startswith("/"):
                lib = os.path.join(rootfs, word.lstrip("/"))
                os.makedirs(os.path.dirname(lib), exist_ok=True)
                shutil.copy(os.path.realpath(word), lib)
    for empty in ("data", "tmp"):
        os.makedirs(os.path.join(rootfs, empty), exist_ok=True)
    with open(os.path.join(context, "Containerfile"), "w") as f:
        f.write('FROM scratch\nCOPY rootfs/ /\nWORKDIR /data\n'
                # As the official image's entrypoint does: clients come from
                # other containers, so no protected mode.
                'ENTRYPOINT ["/bin/sh", "-c", "exec \\"$0\\" \\"$@\\" --protected-mode no"]\n'
                'CMD ["redis-server"]\n')


def ports_free():
    for port in PORTS.values():
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                return port
    return None


def main():
    version, workdir = sys.argv[1], sys.argv[2]
    started = run("podman", "run", "--rm", "localhost/leaderd-runtime:check", "--version", check=False)
    if started.returncode != 0:
        print(f"containers cannot be started here: {started.stderr.strip()[-300:]}")
        return 77
    if started.stdout.strip() == f"leaderd {version}":
        ok(f"podman run leaderd-runtime --version: leaderd {version}")
    else:
        problem(f"podman run leaderd-runtime --version printed {started.stdout!r}")

    if shutil.which("podman-compose") is None:
        print("podman-compose is not installed: the compose demo cannot be started")
        return 77
    busy = ports_free()
    if busy is not None:
        print(f"port {busy} is in use on 127.0.0.1: the compose demo publishes 4041-4043")
        return 77
    context = tempfile.mkdtemp(dir=workdir)
    stage_redis(context)
    run("podman", "build", "-q", "-t", REDIS_IMAGE, context)
    run("podman", "tag", "localhost/leaderd-demo:check", f"leaderd-demo:{version}")
    project = f"leaderdcheck{os.getpid()}"
    compose = ["podman-compose", "-p", project, "-f", "docker-compose.yml"]
    try:
        run(*compose, "up", "-d", "--no-build")
        first = one_leader()
        if first is None:
            problem("compose demo: no single leader among the three candidates within 60 s")
            for service in PORTS:
                print(run("podman", "logs", f"{project}_{service}_1", check=False).stderr[-800:])
            return 1
        leader, token = first
        ok(f"compose demo: {leader} leads (fencing token {token}); the other two name it")
        stopping = time.monotonic()
        run(*compose, "stop", leader)
        second = one_leader(exclude=(leader,), limit=10.0)
        took = time.monotonic() - stopping
        if second is None or second[1] <= token:
            problem(f"compose demo: no new leader within 10 s of stopping {leader}: {second}")
        else:
            ok(f"compose demo: `stop {leader}` handed over to {second[0]} (token {second[1]}) "
               f"in {took:.1f} s, the TTL being 10 s")
        log = run("podman", "logs", f"{project}_{leader}_1").stderr
        wanted = ["shutdown requested", "stopping the child", "lease released", "leaderd stopped"]
        missing = [w for w in wanted if w not in log]
        if missing:
            problem(f"compose demo: {leader}'s log lacks {missing}:\n{log[-1500:]}")
        else:
            ok(f"compose demo: {leader}'s log shows the child stopped and the lease released")
    finally:
        run(*compose, "down", "-t", "15", check=False)
        run("podman", "network", "rm", "-f", f"{project}_default", check=False)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
