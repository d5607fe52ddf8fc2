"""Checks of the deployment files that need more than a linter, run by
scripts/check-deploy:

  manifests LEADERD DIR   every kustomization under DIR rendered (resources
                          and JSON 6902 patches, the subset of kustomize these
                          files use), validated against the Kubernetes schemas
                          with kubernetes-validate, and checked for what
                          README promises: native sidecar, restricted security
                          context, probes, grace period, config accepted by
                          `leaderd check --offline`.
  compose LEADERD FILE    docker-compose.yml: the services, and every leaderd
                          command line accepted by `leaderd check --offline`.

Exits 1 with one line per problem.
"""

import copy
import os
import re
import subprocess
import sys
import tempfile
import tomllib

import yaml

KUBERNETES_VERSION = "1.37.0"
problems = []


def problem(message):
    problems.append(message)
    print(f"  FAIL {message}")


def ok(message):
    print(f"  ok   {message}")


def load_docs(path):
    with open(path, encoding="utf-8") as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


def duration_seconds(text):
    match = re.fullmatch(r"(\d+)(ms|s|m)", text)
    if not match:
        raise ValueError(f"unexpected duration {text!r}")
    value, unit = int(match[1]), match[2]
    return value / 1000 if unit == "ms" else value * (60 if unit == "m" else 1)


def leaderd_check(leaderd, args, env, what):
    """Runs `leaderd check --offline ARGS`; True when accepted."""
    full_env = {"PATH": os.environ.get("PATH", "")} | env
    result = subprocess.run(
        [leaderd, "check", "--offline", *args],
        env=full_env,
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode == 0:
        ok(f"{what}: accepted by leaderd check --offline")
        return True
    problem(f"{what}: leaderd check --offline refused it: {result.stderr.strip()}")
    return False


# --- Kubernetes -------------------------------------------------------------


def pointer_parts(path):
    return [p.replace("~1", "/").replace("~0", "~") for p in path.split("/")[1:]]


def apply_json_patch(obj, operations, where):
    for op in operations:
        *parents, last = pointer_parts(op["path"])
        node = obj
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
        if op["op"] in ("add", "replace"):
            if op["op"] == "replace" and (last not in node if isinstance(node, dict) else False):
                problem(f"{where}: replace of missing {op['path']}")
            if isinstance(node, list):
                if last == "-":
                    node.append(op["value"])
                else:
                    node.insert(int(last), op["value"])
            else:
                node[last] = op["value"]
        elif op["op"] == "remove":
            del node[int(last) if isinstance(node, list) else last]
        else:
            problem(f"{where}: patch op {op['op']!r} is not supported by this check")


def render(directory):
    """The objects `kubectl kustomize DIRECTORY` would produce, and the files it read.

    With the kubectl scripts/lib/ensure-kube.sh builds (LEADERD_KUBECTL), the
    objects are kubectl's own rendering: components, strategic-merge patches
    and replacements are beyond the subset in render_subset."""
    files = render_files(directory)
    kubectl = os.environ.get("LEADERD_KUBECTL")
    if not (kubectl and os.access(kubectl, os.X_OK)):
        return render_subset(directory), files
    result = subprocess.run(
        [kubectl, "kustomize", directory], capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        problem(f"{directory}: kubectl kustomize refused it: {result.stderr.strip()}")
        return [], files
    return [o for o in yaml.safe_load_all(result.stdout) if o], files


def render_subset(directory):
    """Without kubectl: resources and inline JSON patches only."""
    kustomization = load_docs(os.path.join(directory, "kustomization.yaml"))[0]
    objects = []
    for resource in kustomization.get("resources", []):
        path = os.path.normpath(os.path.join(directory, resource))
        objects += render_subset(path) if os.path.isdir(path) else load_docs(path)
    for patch in kustomization.get("patches", []):
        target = patch["target"]
        hits = [
            o
            for o in objects
            if o["kind"] == target.get("kind", o["kind"])
            and o["metadata"]["name"] == target.get("name", o["metadata"]["name"])
        ]
        if not hits:
            problem(f"{directory}: a patch targets {target}, which no resource is")
        for obj in hits:
            apply_json_patch(obj, yaml.safe_load(patch["patch"]), directory)
    return objects


def render_files(directory):
    """The files a kustomization (or component) in DIRECTORY reads."""
    kustomization = load_docs(os.path.join(directory, "kustomization.yaml"))[0]
    files = {os.path.join(directory, "kustomization.yaml")}
    for entry in kustomization.get("resources", []) + kustomization.get("components", []):
        path = os.path.normpath(os.path.join(directory, entry))
        files |= render_files(path) if os.path.isdir(path) else {path}
    for patch in kustomization.get("patches", []):
        if "path" in patch:
            files.add(os.path.normpath(os.path.join(directory, patch["path"])))
    return files


def validate_schemas(objects, what):
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        yaml.safe_dump_all(objects, f)
        name = f.name
    try:
        result = subprocess.run(
            ["kubernetes-validate", "--strict", "--quiet", "-k", KUBERNETES_VERSION, name],
            capture_output=True,
            text=True,
            check=False,
        )
    finally:
        os.unlink(name)
    return result.returncode == 0, (result.stdout + result.stderr).strip()


def pod_containers(spec):
    return spec.get("initContainers", []) + spec.get("containers", [])


def check_restricted(name, pod):
    """The Pod Security Standard "restricted", as far as these manifests use it."""
    spec = pod["spec"]
    pod_sc = spec.get("securityContext", {})
    for c in pod_containers(spec):
        sc = c.get("securityContext", {})
        where = f"{name}/{c['name']}"
        non_root = sc.get("runAsNonRoot", pod_sc.get("runAsNonRoot"))
        seccomp = sc.get("seccompProfile", pod_sc.get("seccompProfile", {})).get("type")
        faults = []
        if non_root is not True:
            faults.append("runAsNonRoot is not true")
        if sc.get("allowPrivilegeEscalation") is not False:
            faults.append("allowPrivilegeEscalation is not false")
        if sc.get("capabilities", {}).get("drop") != ["ALL"]:
            faults.append("capabilities.drop is not [ALL]")
        if seccomp not in ("RuntimeDefault", "Localhost"):
            faults.append("no RuntimeDefault seccomp profile")
        if sc.get("readOnlyRootFilesystem") is not True:
            faults.append("root filesystem not read-only")
        if "resources" not in c or "requests" not in c["resources"]:
            faults.append("no resource requests")
        if faults:
            problem(f"{where}: " + "; ".join(faults))
        else:
            ok(f"{where}: restricted security context, resource requests")


def env_value(container, name):
    for e in container.get("env", []):
        if e["name"] == name:
            return e
    return None


SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


def check_lease_identity(name, spec, sidecar, objects):
    """With no store URL, leaderd elects with a Lease as the pod's
    ServiceAccount: the account exists, a RoleBinding gives it a Role that
    names the leases, and its token is mounted into leaderd alone."""
    account = spec.get("serviceAccountName")
    if not any(o["kind"] == "ServiceAccount" and o["metadata"]["name"] == account for o in objects):
        problem(f"{name}: serviceAccountName {account!r} is no ServiceAccount of these manifests")
        return
    roles = [
        o["roleRef"]["name"]
        for o in objects
        if o["kind"] == "RoleBinding"
        and any(s.get("kind") == "ServiceAccount" and s.get("name") == account for s in o.get("subjects", []))
    ]
    rules = [
        r
        for o in objects
        if o["kind"] == "Role" and o["metadata"]["name"] in roles
        for r in o.get("rules", [])
        if "leases" in r.get("resources", [])
    ]
    verbs = {v for r in rules for v in r.get("verbs", [])}
    if {"get", "update", "patch", "watch", "create"} <= verbs and all(r.get("resourceNames") or r["verbs"] == ["create"] for r in rules):
        ok(f"{name}: ServiceAccount {account} may get, update, patch and watch its named Leases and create leases")
    else:
        problem(f"{name}: ServiceAccount {account} lacks the Role of docs/kubernetes.md (has {sorted(verbs)})")
    if spec.get("automountServiceAccountToken") is not False:
        problem(f"{name}: the token is mounted into every container (set automountServiceAccountToken: false)")
    mounted = [
        c["name"]
        for c in pod_containers(spec)
        if any(m["mountPath"] == SERVICE_ACCOUNT_DIR for m in c.get("volumeMounts", []))
    ]
    if mounted == [sidecar["name"]]:
        ok(f"{name}: the service account token is mounted into leaderd only")
    else:
        problem(f"{name}: the service account token is mounted into {mounted}, not leaderd alone")


def check_leaderd_pod(leaderd, name, pod, objects, cargo_version):
    spec = pod["spec"]
    sidecars = [c for c in spec.get("initContainers", []) if c["name"] == "leaderd"]
    if len(sidecars) != 1:
        problem(f"{name}: no init container named leaderd")
        return
    sidecar = sidecars[0]
    if sidecar.get("restartPolicy") == "Always":
        ok(f"{name}: leaderd is a native sidecar (init container, restartPolicy: Always)")
    else:
        problem(f"{name}: leaderd init container lacks restartPolicy: Always")
    if sidecar.get("livenessProbe", {}).get("httpGet", {}).get("path") == "/healthz":
        ok(f"{name}: liveness probe on /healthz")
    else:
        problem(f"{name}: leaderd's liveness probe is not GET /healthz")
    for c in pod_containers(spec):
        image = c["image"]
        if image.startswith("leaderd") and not image.endswith(f":{cargo_version}"):
            problem(f"{name}/{c['name']}: image {image} is not tagged {cargo_version} (Cargo.toml)")
    pod_name = env_value(sidecar, "POD_NAME") or env_value(sidecar, "LEADERD_ID")
    if pod_name and pod_name.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath") == "metadata.name":
        ok(f"{name}: the candidate id is the pod name (downward API)")
    else:
        problem(f"{name}: the candidate id does not come from metadata.name")

    # What the kubelet puts in the environment of every container.
    env = {"POD_NAME": "pod-0", "KUBERNETES_SERVICE_HOST": "10.96.0.1"}
    url = env_value(sidecar, "LEADERD_REDIS_URL")
    if url is None:
        check_lease_identity(name, spec, sidecar, objects)
    else:
        ref = url.get("valueFrom", {}).get("secretKeyRef")
        secret = next(
            (o for o in objects if o["kind"] == "Secret" and ref and o["metadata"]["name"] == ref["name"]),
            None,
        )
        if secret is None or ref["key"] not in secret.get("stringData", {}):
            problem(f"{name}: LEADERD_REDIS_URL does not come from a Secret in these manifests")
        else:
            ok(f"{name}: the Redis URL comes from Secret {ref['name']}")
            env["LEADERD_REDIS_URL"] = secret["stringData"][ref["key"]]

    args = sidecar.get("args", [])
    config_mounts = {m["mountPath"]: m["name"] for m in sidecar.get("volumeMounts", [])}
    stop_timeout = 10.0
    if "--config" in args:
        path = args[args.index("--config") + 1]
        mount_dir, file_name = os.path.split(path)
        volume = next(v for v in spec["volumes"] if v["name"] == config_mounts.get(mount_dir))
        cm_name = volume["configMap"]["name"]
        cm = next(o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"] == cm_name)
        text = cm["data"][file_name]
        stop_timeout = duration_seconds(tomllib.loads(text).get("child", {}).get("stop_timeout", "10s"))
        with tempfile.TemporaryDirectory() as tmp:
            config = os.path.join(tmp, file_name)
            with open(config, "w", encoding="utf-8") as f:
                f.write(text)
            run_args = [a if a != path else config for a in args]
            if run_args[0] != "run":
                problem(f"{name}: leaderd's args do not start with run")
            leaderd_check(leaderd, run_args[1:], env, f"{name}: leaderd's args with ConfigMap {cm_name}")
    grace = spec.get("terminationGracePeriodSeconds", 30)
    if grace > stop_timeout:
        ok(f"{name}: terminationGracePeriodSeconds {grace} > stop_timeout {stop_timeout:g}s")
    else:
        problem(f"{name}: terminationGracePeriodSeconds {grace} is not longer than stop_timeout {stop_timeout:g}s")


def cargo_version():
    with open("Cargo.toml", "rb") as f:
        return tomllib.load(f)["package"]["version"]


def manifests(leaderd, directory):
    version = cargo_version()
    broken = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "broken"},
        "spec": {
            "selector": {"matchLabels": {"a": "b"}},
            "template": {
                "metadata": {"labels": {"a": "b"}},
                "spec": {"containers": [{"name": "c", "image": "i", "restartPolicyy": "Always"}]},
            },
        },
    }
    valid, _ = validate_schemas([broken], "self-test")
    if valid:
        problem("kubernetes-validate accepted a misspelt field: the schema check cannot be trusted")
    else:
        ok("kubernetes-validate refuses a misspelt field (self-test)")

    all_files = {
        os.path.normpath(os.path.join(root, f))
        for root, _, names in os.walk(directory)
        for f in names
        if f.endswith((".yaml", ".yml"))
    }
    used = set()
    for root, _, names in sorted(os.walk(directory)):
        if "kustomization.yaml" not in names:
            continue
        if load_docs(os.path.join(root, "kustomization.yaml"))[0].get("kind") == "Component":
            # Not buildable alone: checked inside each kustomization using it.
            used |= render_files(root)
            continue
        objects, files = render(root)
        used |= files
        print(f"kustomization {root}: {len(objects)} objects")
        valid, output = validate_schemas(copy.deepcopy(objects), root)
        if valid:
            ok(f"{root}: every object valid for Kubernetes {KUBERNETES_VERSION} (strict)")
        else:
            problem(f"{root}: schema validation failed:\n{output}")
        for obj in objects:
            if obj["kind"] in ("Deployment", "StatefulSet", "DaemonSet"):
                name = f"{obj['kind']}/{obj['metadata']['name']}"
                pod = obj["spec"]["template"]
                check_restricted(name, pod)
                if any(c["name"] == "leaderd" for c in pod["spec"].get("initContainers", [])):
                    check_leaderd_pod(leaderd, name, pod, objects, version)
        services = [o for o in objects if o["kind"] == "Service" and o["metadata"]["name"] == "leaderd-leader"]
        for service in services:
            selector = service["spec"]["selector"]
            pods = [
                o["spec"]["template"]
                for o in objects
                if o["kind"] == "Deployment"
                and selector.items() <= o["spec"]["template"]["metadata"]["labels"].items()
            ]
            gated = [
                c
                for p in pods
                for c in p["spec"]["containers"]
                if c.get("readinessProbe", {}).get("httpGet", {}).get("path") == "/leader"
            ]
            if pods and gated:
                ok(f"{root}: Service leaderd-leader selects pods that are Ready only while leading")
            else:
                problem(f"{root}: Service leaderd-leader selects pods not gated by readiness on /leader")
    for orphan in sorted(all_files - used):
        problem(f"{orphan} is in no kustomization, so `kubectl apply -k` would not apply it")


# --- docker compose ------------------------------------------------------


def compose(leaderd, path):
    with open(path, encoding="utf-8") as f:
        spec = yaml.safe_load(f)
    services = spec.get("services", {})
    expected = {"redis", "leaderd-1", "leaderd-2", "leaderd-3"}
    if set(services) == expected:
        ok(f"{path}: services {', '.join(sorted(services))}")
    else:
        problem(f"{path}: services are {sorted(services)}, README's demo expects {sorted(expected)}")
    with open("Dockerfile", encoding="utf-8") as f:
        stages = set(re.findall(r"(?im)^FROM\s+\S+\s+AS\s+(\S+)", f.read()))
    hostnames, ports = set(), set()
    for name, service in sorted(services.items()):
        if not name.startswith("leaderd-"):
            continue
        target = service.get("build", {}).get("target")
        if target not in stages:
            problem(f"{name}: build target {target!r} is not a Dockerfile stage ({sorted(stages)})")
        command = service.get("command", [])
        if not command or command[0] != "run":
            problem(f"{name}: the command does not start with run")
            continue
        env = {k: str(v) for k, v in (service.get("environment") or {}).items()}
        env["HOSTNAME"] = service.get("hostname", name)
        leaderd_check(leaderd, command[1:], env, f"{path} {name}: leaderd {' '.join(command)}")
        for url in [command[i + 1] for i, a in enumerate(command) if a == "--redis"]:
            host = re.match(r"redis://(?:[^@]*@)?([^:/]+)", url)
            if not host or host[1] not in services:
                problem(f"{name}: {url} does not name a service of this file")
        stop_timeout = 10.0
        if "--stop-timeout" in command:
            stop_timeout = duration_seconds(command[command.index("--stop-timeout") + 1])
        grace = duration_seconds(service.get("stop_grace_period", "10s"))
        if grace <= stop_timeout:
            problem(f"{name}: stop_grace_period {grace:g}s is not longer than --stop-timeout {stop_timeout:g}s")
        hostname = service.get("hostname")
        if not hostname or hostname in hostnames:
            problem(f"{name}: the host name (the candidate id) is missing or shared")
        hostnames.add(hostname)
        for port in service.get("ports", []):
            if port in ports:
                problem(f"{name}: port {port} is published twice")
            ports.add(port)


def main():
    if len(sys.argv) != 4 or sys.argv[1] not in ("manifests", "compose"):
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    mode, leaderd, target = sys.argv[1:]
    (manifests if mode == "manifests" else compose)(leaderd, target)
    if problems:
        print(f"{len(problems)} problem(s) in {target}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
