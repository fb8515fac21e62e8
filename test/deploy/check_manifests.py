#!/usr/bin/python3
"""Checks blockcsi's deployment files (deploy/) for the mistakes that break a CSI
driver only once it is on a cluster: a socket path, driver name, service account
or sidecar flag that one object changed and another did not.

What it reads:
  * the kustomize base (deploy/kubernetes) and every overlay under
    deploy/kubernetes/overlays/, rendered offline with `kubectl kustomize` by
    every kubectl it finds: the one on PATH (or each --kubectl) and, with
    --debian-kubectl-cache DIR (or $BLOCKCSI_DEBIAN_KUBECTL_CACHE), Debian 12's
    own kubectl (package kubernetes-client: kubectl 1.20.2, kustomize v2.0.3),
    fetched once with `apt-get download` + `dpkg -x` into DIR. Each render is
    checked, and the renders of one kustomization must be the same objects. If
    Debian's kubectl was asked for and cannot be had, the reason is printed
    and the run fails (a renderer is never dropped silently); only a machine
    without apt-get/dpkg at all skips it (exit 77);
  * the Helm chart (deploy/helm/blockcsi), rendered by a small Go-template
    renderer below (there is no helm binary here) for its default values and
    for the values that mirror each overlay;
  * the examples (deploy/examples), the image recipe (deploy/image) and the
    storage-host units (deploy/target-host), statically;
  * with the source tree next to deploy/: blockcsi's flags (src/cmd/plugin_flags.cc)
    and its Kubernetes API call sites in src/, counted per file against
    API_REQUESTS, the inventory the fencing grants are read off.

Modes:
  check_manifests.py --deploy-dir DIR              all checks (the ctest test)
  check_manifests.py --deploy-dir DIR --yamllint   yamllint on DIR only
  check_manifests.py --deploy-dir DIR --self-test  breaks rendered copies on
      purpose and asserts that each break is reported (the checker's own test)

Exit status: 0 all good, 1 problems found (or a requested renderer could not
be fetched), 77 a required tool (kubectl, yamllint, apt-get/dpkg for Debian's
kubectl) is missing (ctest reports that as skipped, never as passed).
Uses /usr/bin/python3 and PyYAML only.
"""

import argparse
import copy
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

import yaml

DRIVER_NAME = "blockcsi.io"
SOCKET_DIR_IN_POD = "/csi"
CSI_ENDPOINT = "unix:///csi/csi.sock"
CSI_ADDRESS = "/csi/csi.sock"
KUBELET_DIR = "/var/lib/kubelet"
NAMESPACE = "blockcsi"
CONTROLLER_SA = "blockcsi-controller"
NODE_SA = "blockcsi-node"

# The sidecar set, pinned together (docs/deploy.md says why these). A change
# here must be made in the base, the chart's values and the docs at once.
SIDECAR_IMAGES = {
    "csi-provisioner": "registry.k8s.io/sig-storage/csi-provisioner:v5.2.0",
    "csi-attacher": "registry.k8s.io/sig-storage/csi-attacher:v4.8.0",
    "csi-resizer": "registry.k8s.io/sig-storage/csi-resizer:v1.13.0",
    "csi-snapshotter": "registry.k8s.io/sig-storage/csi-snapshotter:v8.2.0",
    "node-driver-registrar": "registry.k8s.io/sig-storage/csi-node-driver-registrar:v2.13.0",
    "liveness-probe": "registry.k8s.io/sig-storage/livenessprobe:v2.15.0",
}
CONTROLLER_SIDECARS_REQUIRED = ["csi-provisioner", "csi-attacher", "csi-resizer", "liveness-probe"]
LEADER_ELECTED = ["csi-provisioner", "csi-attacher", "csi-resizer", "csi-snapshotter"]
# ClusterRole each controller sidecar needs bound to the controller's account.
SIDECAR_CLUSTER_ROLES = {
    "csi-provisioner": "blockcsi-external-provisioner",
    "csi-attacher": "blockcsi-external-attacher",
    "csi-resizer": "blockcsi-external-resizer",
    "csi-snapshotter": "blockcsi-external-snapshotter",
}
LIVENESS_PORT = {"controller": 9808, "node": 9809}

SC_PARAMETERS = {"csi.storage.k8s.io/fstype", "fsType", "chap", "mkfsOptions", "backend"}
SC_SECRET_PARAMETER = re.compile(
    r"^csi\.storage\.k8s\.io/(node-stage|controller-publish|node-expand|provisioner|controller-expand)"
    r"-secret-(name|namespace)$")
CHAP_KEYS = {"chap-username", "chap-password", "chap-mutual-username", "chap-mutual-password"}
FS_TYPES = {"ext4", "xfs"}

# blockcsi's flags: read from the program's flag parser when the source tree is
# next to deploy/ (so a renamed flag fails here, not on a node), else this list.
BLOCKCSI_FLAGS = {
    "--endpoint", "--mode", "--driver-name", "--node-id", "--state-dir", "--log-format",
    "--log-level", "--shutdown-grace", "--connector", "--max-volumes-per-node", "--backend",
    "--pool", "--tgt-control-port", "--portal", "--iqn-prefix", "--reconcile-interval",
    "--target-agent", "--tls-cert", "--tls-key", "--tls-ca", "--insecure",
}
PLUGIN_FLAGS_SOURCE = os.path.join("src", "cmd", "plugin_flags.cc")


def load_program_flags(deploy_dir):
    """Replaces BLOCKCSI_FLAGS by the flags src/cmd/plugin_flags.cc declares."""
    global BLOCKCSI_FLAGS
    path = os.path.join(os.path.dirname(os.path.abspath(deploy_dir)), PLUGIN_FLAGS_SOURCE)
    try:
        with open(path) as f:
            found = set(re.findall(r'add_(?:option|flag)\(\s*"(--[a-z0-9-]+)"', f.read()))
    except OSError:
        return "built-in list"
    if len(found) >= 5:
        BLOCKCSI_FLAGS = found
        return PLUGIN_FLAGS_SOURCE
    return "built-in list"
TARGET_FLAGS = {
    "--listen", "--pool", "--target", "--tgt-control-port", "--portal", "--iqn-prefix",
    "--reconcile-interval", "--tls-cert", "--tls-key", "--tls-ca", "--insecure", "--metrics-address",
}

# Fencing (docs/deploy.md, "Fencing"): exactly the requests the code makes of
# the API server, as (scope, apiGroup, resource, verb); scope "*" is
# cluster-wide, FENCE_NS the namespace of --fence-namespace. The controller:
# src/controller/node_fence_watcher.cc lists Nodes (GET /api/v1/nodes), patches
# the taint (PATCH /api/v1/nodes/NAME) and posts Events to namespace default;
# src/controller/fence_leases.cc gets, creates, patches and deletes the Lease
# blockcsi-fence-NODE. The node plugin (src/cmd/blockcsi_main.cc, FenceMonitor)
# gets its Lease and patches its cleanup report onto it. A request added there
# without a grant here fails on a cluster with 403; keep them together.
FENCE_NS = "<fence namespace>"
FENCING_CONTROLLER_GRANTS = {
    ("*", "", "nodes", "list"),
    ("*", "", "nodes", "patch"),
    ("default", "", "events", "create"),
    (FENCE_NS, "coordination.k8s.io", "leases", "get"),
    (FENCE_NS, "coordination.k8s.io", "leases", "create"),
    (FENCE_NS, "coordination.k8s.io", "leases", "patch"),
    (FENCE_NS, "coordination.k8s.io", "leases", "delete"),
}
FENCING_NODE_GRANTS = {
    (FENCE_NS, "coordination.k8s.io", "leases", "get"),
    (FENCE_NS, "coordination.k8s.io", "leases", "patch"),
}
# Every request the plugin makes of the Kubernetes API, by source file
# (src/, tests aside): its call sites' methods and how many of each. The
# grants above (and the base's csinodes get, k8s_node_directory.cc) are read
# off these; a request added, moved or dropped in the code changes the count
# here and fails the check, so the RBAC is revisited with it instead of
# failing with HTTP 403 on a cluster.
API_REQUESTS = {
    "src/cmd/blockcsi_main.cc": {"GET": 1, "PATCH": 1},  # the node's Lease: read, report
    "src/controller/fence_leases.cc": {"GET": 2, "PATCH": 1, "POST": 1, "DELETE": 1},  # the fences' Leases
    "src/controller/k8s_node_directory.cc": {"GET": 1},  # one CSINode
    "src/controller/node_fence_watcher.cc": {"GET": 1, "PATCH": 2, "POST": 1},  # Nodes, taint on/off, events
}
API_CALL = re.compile(r'\b(?:api|api_|client|client_)->(?:Get\(|Send\(\s*"([A-Z]+)")')
# The controller's fencing grants are the roles named so; the sidecars' own
# grants (events, leader-election Leases) overlap them and are not fencing's.
FENCING_ROLE_PREFIXES = ("blockcsi-fencing", "blockcsi-node-fencing")
# Where blockcsi's in-cluster client reads the token and the API server's CA.
SA_TOKEN_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
# Durations as blockcsi's flags read them (src/common/duration.cc): one unit.
DURATION = re.compile(r"\d+(ms|s|m|h)")

# Helm variants: values overrides, and the kustomize render each must match.
HELM_VARIANTS = [
    ("default", {}, "base"),
    ("userspace-connector",
     {"node": {"connector": "userspace",
               "resources": {"blockcsi": {"requests": {"cpu": "100m", "memory": "128Mi"},
                                          "limits": {"memory": "512Mi"}}}}},
     "overlays/userspace-connector"),
    ("single-host-local", {"backend": {"type": "local"}}, "overlays/single-host-local"),
    ("no-snapshotter", {"sidecars": {"snapshotter": {"enabled": False}}}, None),
    ("snapshot-class-chap",
     {"volumeSnapshotClass": {"create": True},
      "storageClasses": [{"name": "blockcsi-chap", "isDefault": True, "fsType": "ext4",
                          "mkfsOptions": "", "chap": {"enabled": True, "secretName": "blockcsi-chap"},
                          "backend": "", "reclaimPolicy": "Retain", "allowVolumeExpansion": True,
                          "volumeBindingMode": "WaitForFirstConsumer"}]},
     None),
    ("service-monitor", {"metrics": {"serviceMonitor": {"enabled": True, "labels": {"release": "prometheus"}}}}, None),
    ("no-metrics", {"metrics": {"enabled": False}}, None),
    ("fencing", {"fencing": {"enabled": True}}, "overlays/fencing"),
    ("fencing-own-namespace-and-interval",
     {"fencing": {"enabled": True, "namespace": "blockcsi-fences", "checkInterval": "10s",
                  "taintFencedNodes": False}},
     None),
    ("fencing-local", {"fencing": {"enabled": True}, "backend": {"type": "local"}}, None),
]
# Values that the chart must refuse.
HELM_BAD_VALUES = [
    ("unknown backend", {"backend": {"type": "nfs"}}, "backend.type"),
    ("unknown connector", {"node": {"connector": "nbd"}}, "node.connector"),
    ("remote without TLS", {"backend": {"remote": {"tlsSecretName": ""}}}, "tlsSecretName"),
    ("snapshot class without the snapshotter",
     {"sidecars": {"snapshotter": {"enabled": False}}, "volumeSnapshotClass": {"create": True}},
     "snapshotter.enabled"),
    ("CHAP without a secret",
     {"storageClasses": [{"name": "x", "isDefault": False, "fsType": "ext4", "mkfsOptions": "",
                          "chap": {"enabled": True, "secretName": ""}, "backend": "",
                          "reclaimPolicy": "Delete", "allowVolumeExpansion": True,
                          "volumeBindingMode": "Immediate"}]},
     "chap.secretName"),
    # blockcsi itself refuses --taint-fenced-nodes without --fence-dead-nodes-after.
    ("taint without the watcher", {"fencing": {"enabled": True, "deadNodesAfter": ""}},
     "fencing.taintFencedNodes needs fencing.deadNodesAfter"),
    ("taint with a zero watcher", {"fencing": {"enabled": True, "deadNodesAfter": "0s"}},
     "fencing.taintFencedNodes needs fencing.deadNodesAfter"),
    ("fencing without the watcher",
     {"fencing": {"enabled": True, "deadNodesAfter": "", "taintFencedNodes": False}}, "fencing.deadNodesAfter"),
    ("a duration blockcsi cannot read", {"fencing": {"enabled": True, "deadNodesAfter": "1m30s"}},
     "fencing.deadNodesAfter must be"),
    ("a number without a unit", {"fencing": {"enabled": True, "deadNodesAfter": 300}},
     "fencing.deadNodesAfter must be"),
    ("nodes that never look at their fence", {"fencing": {"enabled": True, "checkInterval": "0s"}},
     "fencing.checkInterval"),
    ("two controllers with the watcher", {"fencing": {"enabled": True}, "controller": {"replicas": 2}},
     "controller.replicas must be 1"),
]


class Problems:
    """Collects findings; each names the bundle and object it is about."""

    def __init__(self):
        self.items = []

    def add(self, where, message):
        self.items.append(f"{where}: {message}")

    def __len__(self):
        return len(self.items)


# --------------------------------------------------------------------------
# Small helpers over Kubernetes objects.

def obj_id(doc):
    md = doc.get("metadata") or {}
    ns = md.get("namespace")
    return f"{doc.get('kind')}/{(ns + '/') if ns else ''}{md.get('name')}"


def find(docs, kind, name=None):
    return [d for d in docs if d.get("kind") == kind
            and (name is None or (d.get("metadata") or {}).get("name") == name)]


def one(docs, kind, name, where, problems):
    found = find(docs, kind, name)
    if len(found) != 1:
        problems.add(where, f"expected exactly one {kind} {name}, found {len(found)}")
        return None
    return found[0]


def pod_spec(workload):
    return (((workload.get("spec") or {}).get("template") or {}).get("spec")) or {}


def containers(workload):
    return pod_spec(workload).get("containers") or []


def container(workload, name):
    for c in containers(workload):
        if c.get("name") == name:
            return c
    return None


def flags(c):
    """--flag=value arguments as {flag: [values]}; a bare --flag maps to [None]."""
    out = {}
    for arg in c.get("args") or []:
        arg = str(arg)
        if not arg.startswith("--"):
            continue
        key, sep, value = arg.partition("=")
        out.setdefault(key, []).append(value if sep else None)
    return out


def flag(c, name):
    values = flags(c).get(name)
    return values[-1] if values else None


def volume(workload, name):
    for v in pod_spec(workload).get("volumes") or []:
        if v.get("name") == name:
            return v
    return None


def mount_at(c, path):
    for m in c.get("volumeMounts") or []:
        if m.get("mountPath") == path:
            return m
    return None


def env_var(c, name):
    for e in c.get("env") or []:
        if e.get("name") == name:
            return e
    return None


def env_source(c, name, kind):
    """What env var `name` of container `c` is taken from (its valueFrom's `kind`: fieldRef,
    configMapKeyRef, ...); {} when it is not set that way."""
    return ((env_var(c, name) or {}).get("valueFrom") or {}).get(kind) or {}


def port_number(c, port):
    """A probe's port (number or the name of a containerPort) as a number."""
    if isinstance(port, int):
        return port
    for p in c.get("ports") or []:
        if p.get("name") == port:
            return p.get("containerPort")
    return None


# --------------------------------------------------------------------------
# The checks on one rendered set of objects (a "bundle").

def check_bundle(name, docs, problems):
    where = name
    check_objects(where, docs, problems)
    driver = check_csidriver(where, docs, problems)
    ctrl = one(docs, "Deployment", "blockcsi-controller", where, problems)
    node = one(docs, "DaemonSet", "blockcsi-node", where, problems)
    for workload in (ctrl, node):
        if workload is not None:
            check_every_container(where, workload, problems)
            check_env_references(where, workload, problems)
            check_ports_unique(where, workload, problems)
    if ctrl is not None:
        check_controller(where, ctrl, driver, docs, problems)
    if node is not None:
        check_node(where, node, driver, problems)
    check_rbac(where, docs, ctrl, node, problems)
    check_fencing(where, docs, ctrl, node, problems)
    for ns in find(docs, "Namespace"):
        labels = (ns.get("metadata") or {}).get("labels") or {}
        if labels.get("pod-security.kubernetes.io/enforce") != "privileged":
            problems.add(where, f"{obj_id(ns)}: the node plugin is privileged; the namespace must "
                                "carry pod-security.kubernetes.io/enforce: privileged")
    check_storage_objects(where, docs, problems)


def check_objects(where, docs, problems):
    seen = set()
    for d in docs:
        if not isinstance(d, dict):
            problems.add(where, f"a document is not a mapping: {str(d)[:60]!r}")
            continue
        for key in ("apiVersion", "kind"):
            if not d.get(key):
                problems.add(where, f"{obj_id(d)}: no {key}")
        if not (d.get("metadata") or {}).get("name"):
            problems.add(where, f"{obj_id(d)}: no metadata.name")
        oid = obj_id(d)
        if oid in seen:
            problems.add(where, f"{oid}: defined twice")
        seen.add(oid)


def check_csidriver(where, docs, problems):
    drivers = find(docs, "CSIDriver")
    if len(drivers) != 1:
        problems.add(where, f"expected one CSIDriver, found {len(drivers)}")
        return None
    d = drivers[0]
    name = d["metadata"].get("name")
    if name != DRIVER_NAME:
        problems.add(where, f"CSIDriver is named {name!r}, the driver is {DRIVER_NAME!r}")
    want = {"attachRequired": True, "podInfoOnMount": False, "fsGroupPolicy": "File",
            "volumeLifecycleModes": ["Persistent"], "storageCapacity": True}
    spec = d.get("spec") or {}
    for key, value in want.items():
        if spec.get(key) != value:
            problems.add(where, f"CSIDriver spec.{key} is {spec.get(key)!r}, want {value!r}")
    return d


def check_every_container(where, workload, problems):
    wid = obj_id(workload)
    all_containers = containers(workload) + (pod_spec(workload).get("initContainers") or [])
    for c in all_containers:
        cid = f"{wid} container {c.get('name')}"
        res = c.get("resources") or {}
        for kind, keys in (("requests", ("cpu", "memory")), ("limits", ("memory",))):
            for key in keys:
                if not (res.get(kind) or {}).get(key):
                    problems.add(where, f"{cid}: no resources.{kind}.{key}")
        probe = c.get("livenessProbe")
        if not probe or not any(k in probe for k in ("httpGet", "tcpSocket", "exec", "grpc")):
            problems.add(where, f"{cid}: no livenessProbe")
        elif "httpGet" in probe or "tcpSocket" in probe:
            port = (probe.get("httpGet") or probe.get("tcpSocket")).get("port")
            if port_number(c, port) is None:
                problems.add(where, f"{cid}: livenessProbe port {port!r} is not a port of the container")
        image = str(c.get("image") or "")
        tag = image.rsplit("/", 1)[-1].partition(":")[2]
        if not tag or tag == "latest":
            problems.add(where, f"{cid}: image {image!r} is not pinned to a version")
        if c.get("name") in SIDECAR_IMAGES and image != SIDECAR_IMAGES[c["name"]]:
            problems.add(where, f"{cid}: image {image!r}, the pinned sidecar is "
                                f"{SIDECAR_IMAGES[c['name']]!r}")
        if c.get("name") in SIDECAR_IMAGES or c.get("name") == "blockcsi":
            m = mount_at(c, SOCKET_DIR_IN_POD)
            if m is None:
                problems.add(where, f"{cid}: the CSI socket directory is not mounted at {SOCKET_DIR_IN_POD}")
        for key in ("--csi-address",):
            value = flag(c, key)
            if value is not None and value != CSI_ADDRESS:
                problems.add(where, f"{cid}: {key}={value}, the driver listens on {CSI_ADDRESS}")
        if "--insecure" in flags(c):
            problems.add(where, f"{cid}: --insecure (plaintext to the storage agent) in a shipped manifest")


def check_env_references(where, workload, problems):
    for c in containers(workload):
        defined = {e.get("name") for e in c.get("env") or []}
        for arg in c.get("args") or []:
            for ref in re.findall(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", str(arg)):
                if ref not in defined:
                    problems.add(where, f"{obj_id(workload)} container {c.get('name')}: argument "
                                        f"{arg!r} uses $({ref}), which is not in its env")


def check_ports_unique(where, workload, problems):
    seen = {}
    for c in containers(workload):
        for p in c.get("ports") or []:
            n = p.get("containerPort")
            if n in seen:
                problems.add(where, f"{obj_id(workload)}: port {n} used by {seen[n]} and {c.get('name')}")
            seen[n] = c.get("name")
        for arg in c.get("args") or []:
            m = re.match(r"--http-endpoint=.*:(\d+)$", str(arg))
            if m and int(m.group(1)) not in [p.get("containerPort") for p in c.get("ports") or []] \
                    and c.get("name") != "liveness-probe":
                problems.add(where, f"{obj_id(workload)} container {c.get('name')}: serves on "
                                    f"{m.group(1)} but declares no such containerPort")


def socket_volume_name(c):
    m = mount_at(c, SOCKET_DIR_IN_POD)
    return m.get("name") if m else None


def check_driver_container(where, workload, c, mode, driver, problems):
    wid = obj_id(workload)
    f = flags(c)
    for key in f:
        if key not in BLOCKCSI_FLAGS:
            problems.add(where, f"{wid}: blockcsi has no flag {key}")
    if flag(c, "--mode") != mode:
        problems.add(where, f"{wid}: blockcsi --mode={flag(c, '--mode')}, want {mode}")
    if flag(c, "--endpoint") != CSI_ENDPOINT:
        problems.add(where, f"{wid}: blockcsi --endpoint={flag(c, '--endpoint')}, want {CSI_ENDPOINT}")
    name = flag(c, "--driver-name")
    want = driver["metadata"]["name"] if driver else DRIVER_NAME
    if name != want:
        problems.add(where, f"{wid}: blockcsi --driver-name={name}, but the CSIDriver is {want}")
    if flag(c, "--log-format") not in ("text", "json"):
        problems.add(where, f"{wid}: blockcsi --log-format must be text or json")
    # Its liveness probe is answered by the livenessprobe sidecar, over the socket.
    probe = (c.get("livenessProbe") or {}).get("httpGet") or {}
    port = port_number(c, probe.get("port"))
    lp = container(workload, "liveness-probe")
    if lp is None:
        problems.add(where, f"{wid}: no liveness-probe sidecar")
        return
    endpoint = flag(lp, "--http-endpoint") or ""
    if port != LIVENESS_PORT[mode] or not endpoint.endswith(f":{LIVENESS_PORT[mode]}"):
        problems.add(where, f"{wid}: blockcsi's liveness probe (port {port}) and the livenessprobe "
                            f"sidecar ({endpoint or 'no --http-endpoint'}) must both use "
                            f"{LIVENESS_PORT[mode]}")
    if probe.get("path") != "/healthz":
        problems.add(where, f"{wid}: blockcsi's liveness probe path is {probe.get('path')!r}, want /healthz")
    # Every CSI client in the pod shares the driver's socket volume.
    vol = socket_volume_name(c)
    for other in containers(workload):
        if other is c or other.get("name") not in SIDECAR_IMAGES:
            continue
        if socket_volume_name(other) != vol:
            problems.add(where, f"{wid}: {other.get('name')} mounts {socket_volume_name(other)!r} at "
                                f"{SOCKET_DIR_IN_POD}, blockcsi serves its socket on {vol!r}")
        if flag(other, "--csi-address") != CSI_ADDRESS:
            problems.add(where, f"{wid}: {other.get('name')} --csi-address={flag(other, '--csi-address')},"
                                f" want {CSI_ADDRESS}")


def driver_container(where, workload, mode, driver, problems):
    """The workload's blockcsi container, checked (check_driver_container); None, reported, when it has none."""
    c = container(workload, "blockcsi")
    if c is None:
        problems.add(where, f"{obj_id(workload)}: no blockcsi container")
    else:
        check_driver_container(where, workload, c, mode, driver, problems)
    return c


def check_controller(where, ctrl, driver, docs, problems):
    wid = obj_id(ctrl)
    spec = ctrl.get("spec") or {}
    ps = pod_spec(ctrl)
    c = driver_container(where, ctrl, "controller", driver, problems)
    if c is None:
        return
    for name in CONTROLLER_SIDECARS_REQUIRED:
        if container(ctrl, name) is None:
            problems.add(where, f"{wid}: no {name} sidecar")
    backend = flag(c, "--backend")
    replicas = spec.get("replicas", 1)
    if backend == "remote":
        if replicas < 2 and not fence_watcher(c):
            problems.add(where, f"{wid}: remote backend with {replicas} replica(s); want 2 for failover")
        if not flag(c, "--target-agent"):
            problems.add(where, f"{wid}: remote backend without --target-agent")
        for key in ("--tls-cert", "--tls-key", "--tls-ca"):
            path = flag(c, key)
            if not path:
                problems.add(where, f"{wid}: remote backend without {key} (the agent is mTLS only)")
                continue
            mount = None
            for m in c.get("volumeMounts") or []:
                if path.startswith(m.get("mountPath", "").rstrip("/") + "/"):
                    mount = m
            vol = volume(ctrl, mount.get("name")) if mount else None
            if vol is None or "secret" not in vol:
                problems.add(where, f"{wid}: {key}={path} is not in a mounted Secret volume")
        ref = env_source(c, "TARGET_AGENT", "configMapKeyRef")
        if ref and not [cm for cm in find(docs, "ConfigMap", ref.get("name"))
                        if ref.get("key") in (cm.get("data") or {})]:
            problems.add(where, f"{wid}: TARGET_AGENT reads ConfigMap {ref.get('name')} key "
                                f"{ref.get('key')}, which is not deployed")
    elif backend == "local":
        if replicas != 1:
            problems.add(where, f"{wid}: local backend with {replicas} replicas: two owners of one pool")
        if (spec.get("strategy") or {}).get("type") != "Recreate":
            problems.add(where, f"{wid}: local backend must use strategy Recreate")
        pool = flag(c, "--pool")
        m = mount_at(c, pool) if pool else None
        vol = volume(ctrl, m.get("name")) if m else None
        if not vol or (vol.get("hostPath") or {}).get("path") != pool:
            problems.add(where, f"{wid}: --pool={pool} must be a hostPath mounted at the same path "
                                "(tgtd opens backing files by that path)")
        if not flag(c, "--portal"):
            problems.add(where, f"{wid}: local backend without --portal")
    else:
        problems.add(where, f"{wid}: blockcsi --backend={backend}; want remote or local")
    if ps.get("serviceAccountName") != CONTROLLER_SA:
        problems.add(where, f"{wid}: serviceAccountName {ps.get('serviceAccountName')!r}, want {CONTROLLER_SA}")
    if ps.get("priorityClassName") != "system-cluster-critical":
        problems.add(where, f"{wid}: priorityClassName should be system-cluster-critical")
    if ps.get("hostNetwork"):
        problems.add(where, f"{wid}: the controller needs no host network")
    sc = ps.get("securityContext") or {}
    if not sc.get("runAsNonRoot"):
        problems.add(where, f"{wid}: the controller pod should run as non-root")
    for name in LEADER_ELECTED:
        s = container(ctrl, name)
        if s is None:
            continue
        f = flags(s)
        if "--leader-election" not in f:
            problems.add(where, f"{wid}: {name} without --leader-election ({replicas} replicas)")
        if flag(s, "--leader-election-namespace") != "$(NAMESPACE)":
            problems.add(where, f"{wid}: {name} --leader-election-namespace should be $(NAMESPACE)")
        if env_source(s, "NAMESPACE", "fieldRef").get("fieldPath") != "metadata.namespace":
            problems.add(where, f"{wid}: {name} NAMESPACE must come from metadata.namespace")
        endpoint = flag(s, "--http-endpoint") or ""
        probe = ((s.get("livenessProbe") or {}).get("httpGet")) or {}
        if probe.get("path") != "/healthz/leader-election" or \
                not endpoint.endswith(f":{port_number(s, probe.get('port'))}"):
            problems.add(where, f"{wid}: {name} liveness should be /healthz/leader-election on its "
                                f"--http-endpoint ({endpoint or 'unset'})")
    prov = container(ctrl, "csi-provisioner")
    if prov is not None:
        f = flags(prov)
        gates = ",".join(v or "" for v in f.get("--feature-gates", []))
        if "Topology=true" not in gates:
            problems.add(where, f"{wid}: csi-provisioner without --feature-gates=Topology=true")
        for key in ("--extra-create-metadata", "--enable-capacity"):
            if key not in f:
                problems.add(where, f"{wid}: csi-provisioner without {key}")
        if flag(prov, "--capacity-ownerref-level") != "2":
            problems.add(where, f"{wid}: csi-provisioner --capacity-ownerref-level should be 2 "
                                "(pod -> ReplicaSet -> Deployment)")
        if env_source(prov, "POD_NAME", "fieldRef").get("fieldPath") != "metadata.name":
            problems.add(where, f"{wid}: csi-provisioner capacity tracking needs POD_NAME from metadata.name")
        if driver and (driver.get("spec") or {}).get("storageCapacity") != ("--enable-capacity" in f):
            problems.add(where, f"{wid}: CSIDriver storageCapacity and csi-provisioner "
                                "--enable-capacity disagree")
    if driver and (driver.get("spec") or {}).get("attachRequired") and container(ctrl, "csi-attacher") is None:
        problems.add(where, f"{wid}: CSIDriver attachRequired is true but no csi-attacher runs "
                            "(every pod would wait for a VolumeAttachment forever)")
    if find(docs, "VolumeSnapshotClass") and container(ctrl, "csi-snapshotter") is None:
        problems.add(where, f"{wid}: a VolumeSnapshotClass is deployed but no csi-snapshotter runs")


def check_node(where, node, driver, problems):
    wid = obj_id(node)
    ps = pod_spec(node)
    c = driver_container(where, node, "node", driver, problems)
    if c is None:
        return
    name = driver["metadata"]["name"] if driver else DRIVER_NAME
    sc = c.get("securityContext") or {}
    if not sc.get("privileged"):
        problems.add(where, f"{wid}: blockcsi must be privileged (Bidirectional mounts, iSCSI login)")
    if sc.get("runAsUser") != 0:
        problems.add(where, f"{wid}: blockcsi must set runAsUser: 0 (the image defaults to non-root)")
    if flag(c, "--node-id") != "$(NODE_ID)":
        problems.add(where, f"{wid}: blockcsi --node-id should be $(NODE_ID)")
    if env_source(c, "NODE_ID", "fieldRef").get("fieldPath") != "spec.nodeName":
        problems.add(where, f"{wid}: NODE_ID must come from spec.nodeName (node_id = node name)")
    state = flag(c, "--state-dir")
    m = mount_at(c, state) if state else None
    if not m or not (volume(node, m.get("name")) or {}).get("hostPath"):
        problems.add(where, f"{wid}: --state-dir={state} is not a hostPath mount (it must outlive the pod)")
    # Plugin socket directory on the host, and kubelet's view of it.
    plugin_dir = f"{KUBELET_DIR}/plugins/{name}"
    vol = volume(node, socket_volume_name(c) or "")
    host = ((vol or {}).get("hostPath") or {}).get("path")
    if host != plugin_dir:
        problems.add(where, f"{wid}: the socket directory is {host!r} on the host, kubelet looks in {plugin_dir}")
    reg = container(node, "node-driver-registrar")
    if reg is None:
        problems.add(where, f"{wid}: no node-driver-registrar")
    else:
        path = flag(reg, "--kubelet-registration-path")
        if path != f"{plugin_dir}/csi.sock":
            problems.add(where, f"{wid}: --kubelet-registration-path={path}, the socket is {plugin_dir}/csi.sock")
        m = mount_at(reg, "/registration")
        rvol = volume(node, m.get("name")) if m else None
        if ((rvol or {}).get("hostPath") or {}).get("path") != f"{KUBELET_DIR}/plugins_registry":
            problems.add(where, f"{wid}: node-driver-registrar's /registration is not "
                                f"{KUBELET_DIR}/plugins_registry")
        endpoint = flag(reg, "--http-endpoint") or ""
        probe = (reg.get("livenessProbe") or {}).get("httpGet") or {}
        if not endpoint.endswith(f":{port_number(reg, probe.get('port'))}"):
            problems.add(where, f"{wid}: node-driver-registrar's probe does not hit its --http-endpoint")
    kubelet = mount_at(c, KUBELET_DIR)
    if not kubelet or kubelet.get("mountPropagation") != "Bidirectional":
        problems.add(where, f"{wid}: {KUBELET_DIR} must be mounted with mountPropagation: Bidirectional")
    for path in ("/dev", "/sys"):
        m = mount_at(c, path)
        if not m or ((volume(node, m.get("name")) or {}).get("hostPath") or {}).get("path") != path:
            problems.add(where, f"{wid}: the host's {path} is not mounted at {path}")
    connector = flag(c, "--connector") or "iscsi"
    iscsi_paths = ("/etc/iscsi", "/run/lock/iscsi")
    if connector == "iscsi":
        for path in iscsi_paths:
            m = mount_at(c, path)
            if not m or ((volume(node, m.get("name")) or {}).get("hostPath") or {}).get("path") != path:
                problems.add(where, f"{wid}: the kernel connector needs the host's {path} at {path}")
        if not ps.get("hostNetwork"):
            problems.add(where, f"{wid}: the kernel connector needs hostNetwork (iscsid's abstract socket)")
    elif connector == "userspace":
        for path in iscsi_paths:
            if mount_at(c, path):
                problems.add(where, f"{wid}: the userspace connector should not mount {path}")
        bridge_cgroup = flag(c, "--bridge-cgroup")
        if not bridge_cgroup:
            if (node.get("spec") or {}).get("updateStrategy", {}).get("type") != "OnDelete":
                problems.add(where, f"{wid}: the userspace connector's DaemonSet must be OnDelete "
                                    "(a rolling restart breaks I/O on mounted volumes) unless --bridge-cgroup "
                                    "keeps the bridges out of the container")
        else:
            # Bridges outlive the container only outside its cgroup AND its
            # PID namespace (whose end kills every process in it).
            if not ps.get("hostPID"):
                problems.add(where, f"{wid}: --bridge-cgroup needs hostPID: true (the bridges die with the "
                                    "container's own PID namespace)")
            parent = os.path.dirname(bridge_cgroup)
            m = mount_at(c, parent)
            if not m or ((volume(node, m.get("name")) or {}).get("hostPath") or {}).get("path") != parent:
                problems.add(where, f"{wid}: --bridge-cgroup={bridge_cgroup} needs the host's {parent} "
                                    f"mounted at {parent}")
    else:
        problems.add(where, f"{wid}: --connector={connector}; want iscsi or userspace")
    if ps.get("serviceAccountName") != NODE_SA:
        problems.add(where, f"{wid}: serviceAccountName {ps.get('serviceAccountName')!r}, want {NODE_SA}")
    if ps.get("automountServiceAccountToken") is not False:
        problems.add(where, f"{wid}: the node pod's sidecars need no API token (automountServiceAccountToken: "
                            "false; with fencing, the blockcsi container mounts one of its own)")
    if ps.get("priorityClassName") != "system-node-critical":
        problems.add(where, f"{wid}: priorityClassName should be system-node-critical")
    if not any(t.get("operator") == "Exists" and not t.get("key") for t in ps.get("tolerations") or []):
        problems.add(where, f"{wid}: should tolerate every taint (volumes must unmount on tainted nodes)")


def check_rbac(where, docs, ctrl, node, problems):
    accounts = {(d["metadata"].get("namespace"), d["metadata"]["name"]) for d in find(docs, "ServiceAccount")}
    for workload in (ctrl, node):
        if workload is None:
            continue
        ns = workload["metadata"].get("namespace")
        sa = pod_spec(workload).get("serviceAccountName")
        if (ns, sa) not in accounts:
            problems.add(where, f"{obj_id(workload)}: ServiceAccount {sa!r} is not deployed in {ns!r}")
    roles = {("ClusterRole", None, d["metadata"]["name"]): d for d in find(docs, "ClusterRole")}
    roles.update({("Role", d["metadata"].get("namespace"), d["metadata"]["name"]): d for d in find(docs, "Role")})
    bound = {}
    for b in find(docs, "RoleBinding") + find(docs, "ClusterRoleBinding"):
        ref = b.get("roleRef") or {}
        bns = b["metadata"].get("namespace") if b["kind"] == "RoleBinding" else None
        key = (ref.get("kind"), bns if ref.get("kind") == "Role" else None, ref.get("name"))
        if key not in roles:
            problems.add(where, f"{obj_id(b)}: binds {ref.get('kind')} {ref.get('name')}, which is not deployed")
        for s in b.get("subjects") or []:
            if s.get("kind") != "ServiceAccount":
                problems.add(where, f"{obj_id(b)}: binds a {s.get('kind')}; only service accounts expected")
                continue
            if (s.get("namespace"), s.get("name")) not in accounts:
                problems.add(where, f"{obj_id(b)}: subject {s.get('namespace')}/{s.get('name')} is not "
                                    "a deployed ServiceAccount")
            bound.setdefault((s.get("namespace"), s.get("name")), set()).add(key)
    for key, role in roles.items():
        for rule in role.get("rules") or []:
            for field in ("verbs", "resources", "apiGroups"):
                if "*" in (rule.get(field) or []):
                    problems.add(where, f"{obj_id(role)}: wildcard in {field}")
            if set(rule.get("verbs") or []) & {"escalate", "bind", "impersonate"}:
                problems.add(where, f"{obj_id(role)}: grants escalate/bind/impersonate")
            if "secrets" in (rule.get("resources") or []):
                if key[0] == "ClusterRole":
                    problems.add(where, f"{obj_id(role)}: reads Secrets cluster-wide; keep CHAP "
                                        "secrets in the driver's namespace and use a Role")
                if set(rule.get("verbs") or []) - {"get"}:
                    problems.add(where, f"{obj_id(role)}: Secrets need 'get' only")
    if ctrl is not None:
        ns = ctrl["metadata"].get("namespace")
        have = bound.get((ns, CONTROLLER_SA), set())
        for sidecar, role in SIDECAR_CLUSTER_ROLES.items():
            if container(ctrl, sidecar) is not None and ("ClusterRole", None, role) not in have:
                problems.add(where, f"{obj_id(ctrl)}: {sidecar} runs, but ClusterRole {role} is not "
                                    f"bound to {ns}/{CONTROLLER_SA}")
        if not any(k[0] == "Role" and "leases" in r
                   for k in have for rule in (roles.get(k) or {}).get("rules") or []
                   for r in rule.get("resources") or []):
            problems.add(where, f"{obj_id(ctrl)}: {CONTROLLER_SA} may not take Leases in {ns} "
                                "(leader election)")
    # With the fence watcher on, check_fencing says what the node may hold.
    ctrl_c = container(ctrl, "blockcsi") if ctrl is not None else None
    if node is not None and not (ctrl_c and fence_watcher(ctrl_c)):
        ns = node["metadata"].get("namespace")
        if bound.get((ns, NODE_SA)):
            problems.add(where, f"{obj_id(node)}: {NODE_SA} is bound to roles; the node plugin needs none")


def fence_watcher(c):
    """The controller container's --fence-dead-nodes-after when it turns the watcher on, else None."""
    after = flag(c, "--fence-dead-nodes-after") if c else None
    if not after or re.fullmatch(r"0+(ms|s|m|h)?", after):
        return None
    return after


def grants(docs, sa_ns, sa_name):
    """What ServiceAccount sa_ns/sa_name may do, through every binding of it:
    {(scope, apiGroup, resource, verb): names of the roles granting it}; scope
    is "*" for a ClusterRole bound cluster-wide, else the binding's namespace.
    A rule narrowed by resourceNames counts as "resource[names]"."""
    roles = {("ClusterRole", None, d["metadata"]["name"]): d for d in find(docs, "ClusterRole")}
    roles.update({("Role", d["metadata"].get("namespace"), d["metadata"]["name"]): d for d in find(docs, "Role")})
    out = {}
    for b in find(docs, "RoleBinding") + find(docs, "ClusterRoleBinding"):
        if not any(s.get("kind") == "ServiceAccount" and s.get("namespace") == sa_ns and s.get("name") == sa_name
                   for s in b.get("subjects") or []):
            continue
        ref = b.get("roleRef") or {}
        bns = b["metadata"].get("namespace") if b["kind"] == "RoleBinding" else None
        role = roles.get((ref.get("kind"), bns if ref.get("kind") == "Role" else None, ref.get("name")))
        if role is None:
            continue  # check_rbac reports it
        scope = bns or "*"
        for rule in role.get("rules") or []:
            names = rule.get("resourceNames")
            for group in rule.get("apiGroups") or []:
                for resource in rule.get("resources") or []:
                    if names:
                        resource = f"{resource}[{','.join(names)}]"
                    for verb in rule.get("verbs") or []:
                        out.setdefault((scope, group, resource, verb), set()).add(role["metadata"]["name"])
    return out


def grant_text(g):
    scope, group, resource, verb = g
    return f"{verb} on {resource}{'.' + group if group else ''} " + \
        ("cluster-wide" if scope == "*" else f"in namespace {scope}")


def check_fencing(where, docs, ctrl, node, problems):
    """With the fence watcher on (--fence-dead-nodes-after): one controller, the
    same Lease namespace on both sides, a token in the node plugin, and exactly
    the grants the code calls for (FENCING_CONTROLLER_GRANTS, FENCING_NODE_GRANTS).
    With it off: no fencing grants at all."""
    c = container(ctrl, "blockcsi") if ctrl is not None else None
    n = container(node, "blockcsi") if node is not None else None
    if c is None:
        return
    wid = obj_id(ctrl)
    ctrl_ns = ctrl["metadata"].get("namespace")
    ctrl_grants = grants(docs, ctrl_ns, CONTROLLER_SA)
    # Only the watcher patches Nodes (the out-of-service taint); a sidecar never does.
    for g, names in sorted(ctrl_grants.items()):
        others = sorted(r for r in names if not r.startswith(FENCING_ROLE_PREFIXES))
        if g[2] == "nodes" and g[3] in ("patch", "update") and others:
            problems.add(where, f"{wid}: {CONTROLLER_SA} may {grant_text(g)} through {others}; only "
                                "the fence watcher's role may change Nodes")
    after = fence_watcher(c)
    if after is None:
        if "--taint-fenced-nodes" in flags(c):
            problems.add(where, f"{wid}: --taint-fenced-nodes without --fence-dead-nodes-after: blockcsi "
                                "refuses to start")
        for d in find(docs, "ClusterRole") + find(docs, "Role") + find(docs, "ClusterRoleBinding") + \
                find(docs, "RoleBinding"):
            if d["metadata"]["name"].startswith(FENCING_ROLE_PREFIXES):
                problems.add(where, f"{obj_id(d)}: a fencing grant while the fence watcher is off "
                                    "(no --fence-dead-nodes-after); grant it only with fencing on")
        return
    if not DURATION.fullmatch(after):
        problems.add(where, f"{wid}: --fence-dead-nodes-after={after} is no duration blockcsi reads "
                            "(a number and one unit: ms, s, m or h)")
    spec = ctrl.get("spec") or {}
    replicas = spec.get("replicas", 1)
    if replicas != 1:
        problems.add(where, f"{wid}: the fence watcher (--fence-dead-nodes-after) runs in every replica and "
                            f"elects no leader: {replicas} replicas, want 1")
    strategy = spec.get("strategy") or {}
    surge = (strategy.get("rollingUpdate") or {}).get("maxSurge", "25%")
    if strategy.get("type", "RollingUpdate") == "RollingUpdate" and str(surge) not in ("0", "0%"):
        problems.add(where, f"{wid}: a rollout with maxSurge {surge} runs two fence watchers at once; "
                            "use maxSurge: 0 or Recreate")
    fence_ns = flag(c, "--fence-namespace")
    if not fence_ns:
        problems.add(where, f"{wid}: the fence watcher without --fence-namespace puts the Leases in "
                            "$POD_NAMESPACE or kube-system; name the namespace, the same on the nodes")
        return
    want = {(fence_ns if g[0] == FENCE_NS else g[0],) + g[1:] for g in FENCING_CONTROLLER_GRANTS}
    have = {g for g, names in ctrl_grants.items() if any(r.startswith(FENCING_ROLE_PREFIXES) for r in names)}
    for g in sorted(want - have):
        problems.add(where, f"{wid}: {ctrl_ns}/{CONTROLLER_SA} lacks {grant_text(g)}, which the fence watcher "
                            "needs (docs/deploy.md, Fencing, RBAC)")
    for g in sorted(have - want):
        problems.add(where, f"{wid}: fencing grants {ctrl_ns}/{CONTROLLER_SA} {grant_text(g)}, which the code "
                            "never asks for")
    if n is None:
        return
    nid = obj_id(node)
    node_ns = node["metadata"].get("namespace")
    if flag(n, "--fence-namespace") != fence_ns:
        problems.add(where, f"{nid}: blockcsi --fence-namespace={flag(n, '--fence-namespace')}, the controller's "
                            f"is {fence_ns}: the nodes would never see their fences")
    interval = flag(n, "--fence-check-interval")
    if interval is not None and (not DURATION.fullmatch(interval) or re.fullmatch(r"0+\D+", interval)):
        problems.add(where, f"{nid}: --fence-check-interval={interval}: the plugin would never look at its "
                            "fence, never let go of a fenced volume nor report, and the node stays fenced")
    m = mount_at(n, SA_TOKEN_DIR)
    sources = ((volume(node, m.get("name")) or {}).get("projected") or {}).get("sources") or [] if m else []
    has_token = any("serviceAccountToken" in s for s in sources)
    has_ca = any(i.get("path") == "ca.crt" for s in sources for i in (s.get("configMap") or {}).get("items") or [])
    if not (has_token and has_ca):
        problems.add(where, f"{nid}: blockcsi has no API token and CA at {SA_TOKEN_DIR} (a projected volume with a "
                            "serviceAccountToken and kube-root-ca.crt's ca.crt): it cannot see its fence nor report "
                            "its cleanup")
    want = {(fence_ns,) + g[1:] for g in FENCING_NODE_GRANTS}
    have = set(grants(docs, node_ns, NODE_SA))
    for g in sorted(want - have):
        problems.add(where, f"{nid}: {node_ns}/{NODE_SA} lacks {grant_text(g)}: the plugin reads its fence and "
                            "reports its cleanup there")
    for g in sorted(have - want):
        problems.add(where, f"{nid}: {node_ns}/{NODE_SA} may {grant_text(g)}; the node plugin needs get and patch "
                            f"on leases in {fence_ns} only")


def check_api_requests(src_dir, problems):
    """The Kubernetes API requests in src/ are the ones API_REQUESTS knows."""
    where = "Kubernetes API requests in src/"
    root = os.path.dirname(os.path.abspath(src_dir))
    found = {}
    for dirpath, _, files in os.walk(src_dir):
        for fname in files:
            if not fname.endswith(".cc") or fname.endswith("_test.cc"):
                continue
            path = os.path.join(dirpath, fname)
            with open(path, errors="replace") as f:
                methods = [m.group(1) or "GET" for m in API_CALL.finditer(f.read())]
            if methods:
                rel = os.path.relpath(path, root)
                found[rel] = {m: methods.count(m) for m in sorted(set(methods))}
    for rel in sorted(set(found) | set(API_REQUESTS)):
        if found.get(rel, {}) != API_REQUESTS.get(rel, {}):
            problems.add(where, f"{rel} makes {found.get(rel, {})}, the checker knows {API_REQUESTS.get(rel, {})}: "
                                "a request added or dropped; give it its grant (FENCING_*_GRANTS, "
                                "overlays/fencing/rbac-fencing.yaml, the chart's templates/fencing.yaml, "
                                "docs/deploy.md Fencing/RBAC), then update API_REQUESTS")


def check_storage_objects(where, docs, problems):
    for sc in find(docs, "StorageClass"):
        sid = obj_id(sc)
        if sc.get("provisioner") != DRIVER_NAME:
            problems.add(where, f"{sid}: provisioner {sc.get('provisioner')!r}, want {DRIVER_NAME}")
        params = sc.get("parameters") or {}
        for key, value in params.items():
            if key not in SC_PARAMETERS and not SC_SECRET_PARAMETER.match(key):
                problems.add(where, f"{sid}: unknown parameter {key!r}")
            if not isinstance(value, str):
                problems.add(where, f"{sid}: parameter {key} must be a string, is {value!r}")
        fs = params.get("csi.storage.k8s.io/fstype")
        if fs is not None and fs not in FS_TYPES:
            problems.add(where, f"{sid}: fstype {fs!r}; blockcsi makes {sorted(FS_TYPES)}")
        chap = params.get("chap", "false")
        if chap not in ("true", "false"):
            problems.add(where, f"{sid}: chap must be \"true\" or \"false\", is {chap!r}")
        if chap == "true":
            for prefix in ("node-stage", "controller-publish"):
                for part in ("name", "namespace"):
                    if not params.get(f"csi.storage.k8s.io/{prefix}-secret-{part}"):
                        problems.add(where, f"{sid}: chap is on but csi.storage.k8s.io/{prefix}-secret-"
                                            f"{part} is missing")
        if sc.get("volumeBindingMode") not in (None, "WaitForFirstConsumer", "Immediate"):
            problems.add(where, f"{sid}: volumeBindingMode {sc.get('volumeBindingMode')!r}")
    for vsc in find(docs, "VolumeSnapshotClass"):
        if vsc.get("driver") != DRIVER_NAME:
            problems.add(where, f"{obj_id(vsc)}: driver {vsc.get('driver')!r}, want {DRIVER_NAME}")
    for secret in find(docs, "Secret"):
        keys = set((secret.get("stringData") or {}).keys()) | set((secret.get("data") or {}).keys())
        if keys & CHAP_KEYS or "chap" in secret["metadata"]["name"]:
            if not {"chap-username", "chap-password"} <= keys:
                problems.add(where, f"{obj_id(secret)}: a CHAP secret needs chap-username and chap-password")
            if keys - CHAP_KEYS:
                problems.add(where, f"{obj_id(secret)}: unknown CHAP keys {sorted(keys - CHAP_KEYS)}")
            if ("chap-mutual-username" in keys) != ("chap-mutual-password" in keys):
                problems.add(where, f"{obj_id(secret)}: mutual CHAP needs both username and password")


# --------------------------------------------------------------------------
# Comparing the chart with kustomize.

def normalize(value):
    """Lists keyed by name or mountPath are sets to Kubernetes: sort them."""
    if isinstance(value, dict):
        return {k: normalize(v) for k, v in value.items()}
    if isinstance(value, list):
        items = [normalize(v) for v in value]
        if items and all(isinstance(v, dict) and "name" in v for v in items):
            return sorted(items, key=lambda v: str(v["name"]))
        if items and all(isinstance(v, dict) and "mountPath" in v for v in items):
            return sorted(items, key=lambda v: str(v["mountPath"]))
        return items
    return value


def diff(a, b, path="", names=("the chart", "kustomize")):
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b)):
            if key not in a:
                yield f"{path}.{key}: only in {names[1]}"
            elif key not in b:
                yield f"{path}.{key}: only in {names[0]}"
            else:
                yield from diff(a[key], b[key], f"{path}.{key}", names)
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            label = x.get("name") if isinstance(x, dict) and "name" in x else i
            yield from diff(x, y, f"{path}[{label}]", names)
    elif a != b:
        short = ("chart", "kustomize") if names == ("the chart", "kustomize") else names
        yield f"{path}: {short[0]} {json.dumps(a)} vs {short[1]} {json.dumps(b)}"


def compare_with_kustomize(where, chart_docs, kustomize_docs, problems):
    """The chart and the kustomize render must deploy the same pods and grants."""
    pairs = [("CSIDriver", DRIVER_NAME, ["spec"]),
             ("Deployment", "blockcsi-controller", ["spec"]),
             ("DaemonSet", "blockcsi-node", ["spec"])]
    for role in find(kustomize_docs, "ClusterRole") + find(kustomize_docs, "Role"):
        pairs.append((role["kind"], role["metadata"]["name"], ["rules"]))
    for kind, name, fields in pairs:
        a, b = find(chart_docs, kind, name), find(kustomize_docs, kind, name)
        if len(a) != 1 or len(b) != 1:
            problems.add(where, f"{kind} {name}: {len(a)} in the chart, {len(b)} in kustomize")
            continue
        for field in fields:
            x, y = copy.deepcopy(a[0].get(field)), copy.deepcopy(b[0].get(field))
            if kind in ("Deployment", "DaemonSet"):
                # Labels differ on purpose (the chart adds instance/chart labels).
                x["template"].pop("metadata", None)
                y["template"].pop("metadata", None)
            for line in diff(normalize(x), normalize(y), f"{kind}/{name}.{field}"):
                problems.add(where, f"chart and kustomize disagree: {line}")


# --------------------------------------------------------------------------
# A Go-template renderer for the subset of Helm the chart uses.

class TemplateError(Exception):
    pass


class TemplateFail(TemplateError):
    """The chart's own `fail` or `required`: bad values, reported as such."""


ACTION = re.compile(r"\{\{(-\s)?")
TOKEN = re.compile(r"""
    (?P<ws>\s+)
  | (?P<string>"(?:[^"\\]|\\.)*")
  | (?P<raw>`[^`]*`)
  | (?P<number>-?\d+(?:\.\d+)?)
  | (?P<decl>:=)
  | (?P<assign>=)
  | (?P<pipe>\|)
  | (?P<lparen>\()
  | (?P<rparen>\))
  | (?P<comma>,)
  | (?P<var>\$[A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)
  | (?P<field>(?:\.[A-Za-z_][A-Za-z0-9_]*)+|\.)
  | (?P<ident>[A-Za-z_][A-Za-z0-9_]*)
""", re.X)


def lex(source, filename):
    """Splits a template into ('text', str) and ('action', [tokens]) items,
    applying the {{- and -}} whitespace trimming."""
    items = []
    pos = 0
    trim_next = False
    while True:
        m = ACTION.search(source, pos)
        text = source[pos:m.start()] if m else source[pos:]
        if trim_next:
            text = text.lstrip()
        if m and m.group(1):
            text = text.rstrip()
        if text:
            items.append(("text", text))
        if not m:
            return items
        i = m.end()
        if source.startswith("/*", i):
            end = source.find("*/", i)
            if end < 0:
                raise TemplateError(f"{filename}: unclosed comment")
            close = re.compile(r"\s*(-\s*)?\}\}").match(source, end + 2)
            if not close:
                raise TemplateError(f"{filename}: comment not closed by }}}}")
            trim_next = bool(close.group(1))
            pos = close.end()
            continue
        tokens = []
        while True:
            if source.startswith("}}", i):
                trim_next = False
                i += 2
                break
            if source.startswith(" -}}", i) or source.startswith("\n-}}", i):
                trim_next = True
                i += 4
                break
            t = TOKEN.match(source, i)
            if not t:
                line = source.count("\n", 0, i) + 1
                raise TemplateError(f"{filename}:{line}: cannot read {source[i:i + 20]!r}")
            kind = t.lastgroup
            if kind != "ws":
                tokens.append((kind, t.group()))
            i = t.end()
        items.append(("action", tokens))
        pos = i


class Parser:
    def __init__(self, items, filename, defines):
        self.items = items
        self.i = 0
        self.filename = filename
        self.defines = defines

    def parse(self):
        nodes, stop = self.parse_list(())
        if stop is not None:
            raise TemplateError(f"{self.filename}: unexpected {stop[0][1]}")
        return nodes

    def parse_list(self, stops):
        nodes = []
        while self.i < len(self.items):
            kind, value = self.items[self.i]
            self.i += 1
            if kind == "text":
                nodes.append(("text", value))
                continue
            tokens = value
            if not tokens:
                raise TemplateError(f"{self.filename}: empty action")
            head = tokens[0]
            word = head[1] if head[0] == "ident" else None
            if word in ("end", "else"):
                if word not in stops:
                    raise TemplateError(f"{self.filename}: unexpected {word}")
                return nodes, tokens
            if word == "if":
                nodes.append(self.parse_if(tokens[1:]))
            elif word in ("range", "with"):
                decl, pipe = self.split_decl(tokens[1:])
                body, stop = self.parse_list(("end", "else"))
                other = []
                if stop[0][1] == "else":
                    other, stop = self.parse_list(("end",))
                nodes.append((word, decl, pipe, body, other))
            elif word == "define":
                name = self.literal(tokens[1])
                body, _ = self.parse_list(("end",))
                self.defines[name] = body
            elif word == "template":
                nodes.append(("template", self.literal(tokens[1]), tokens[2:]))
            else:
                decl, pipe = self.split_decl(tokens)
                nodes.append(("action", decl, pipe))
        if stops:
            raise TemplateError(f"{self.filename}: missing {{{{end}}}}")
        return nodes, None

    def parse_if(self, cond):
        body, stop = self.parse_list(("end", "else"))
        other = []
        if stop[0][1] == "else":
            if len(stop) > 1 and stop[1] == ("ident", "if"):
                other = [self.parse_if(stop[2:])]   # else if: shares the final end
            else:
                other, _ = self.parse_list(("end",))
        return ("if", cond, body, other)

    @staticmethod
    def split_decl(tokens):
        for n, t in enumerate(tokens):
            if t[0] == "decl":
                names = [x[1] for x in tokens[:n] if x[0] == "var"]
                return names, tokens[n + 1:]
        return [], tokens

    def literal(self, token):
        if token[0] not in ("string", "raw"):
            raise TemplateError(f"{self.filename}: expected a template name, got {token[1]}")
        return json.loads(token[1]) if token[0] == "string" else token[1][1:-1]


def truthy(v):
    return not (v is None or v is False or v == 0 and not isinstance(v, bool) and isinstance(v, (int, float))
                or (isinstance(v, (str, list, dict)) and len(v) == 0))


def go_format(v):
    if v is None:
        raise TemplateError("printing a nil value (a missing value?)")
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    if isinstance(v, (dict, list)):
        raise TemplateError(f"printing a {type(v).__name__} without toYaml: {v!r}")
    return str(v)


def go_printf(fmt, *args):
    out, n = [], 0
    parts = re.split(r"(%[-+ #0]*\d*(?:\.\d+)?[svdqf%])", fmt)
    for part in parts:
        if re.fullmatch(r"%[-+ #0]*\d*(?:\.\d+)?[svdqf%]", part or ""):
            if part == "%%":
                out.append("%")
                continue
            if n >= len(args):
                raise TemplateError(f"printf {fmt!r}: missing argument")
            arg = args[n]
            n += 1
            out.append(json.dumps(go_format(arg)) if part.endswith("q") else
                       (part[:-1] + "s") % go_format(arg) if part.endswith(("s", "v")) else part % arg)
        else:
            out.append(part)
    return "".join(out)


class Renderer:
    def __init__(self, defines, strict_values):
        self.defines = defines
        self.strict = strict_values

    def funcs(self):
        def include(name, ctx):
            if name not in self.defines:
                raise TemplateError(f"include: no template {name!r}")
            return self.run(self.defines[name], ctx, [{"$": ctx}])

        def to_yaml(v):
            return yaml.safe_dump(v, default_flow_style=False, sort_keys=True).rstrip("\n").removesuffix("\n...")

        def indent(n, s):
            pad = " " * int(n)
            return pad + str(s).replace("\n", "\n" + pad)

        def required(msg, v):
            if v is None or v == "":
                raise TemplateFail(msg)
            return v

        def fail(msg):
            raise TemplateFail(msg)

        def to_int(v):
            # sprig's int: numbers truncated, numeric strings parsed, anything else 0.
            if isinstance(v, (bool, int, float)):
                return int(v)
            try:
                return int(str(v))
            except ValueError:
                return 0

        def gt(a, b):
            # Go's comparison refuses mixed kinds: Helm reads YAML numbers as
            # float64 and --set ones as int64, so a chart must convert with int.
            if isinstance(a, bool) or isinstance(b, bool) or type(a) is not type(b):
                raise TemplateError(f"gt: incompatible types for comparison ({type(a).__name__}, "
                                    f"{type(b).__name__}); convert with int")
            return a > b

        def regex_match(regex, s):
            if not isinstance(s, str):
                raise TemplateError(f"regexMatch: wrong type for value; expected string, got {type(s).__name__}")
            return re.search(regex, s) is not None

        def and_(*args):
            for a in args:
                if not truthy(a):
                    return a
            return args[-1]

        def or_(*args):
            for a in args:
                if truthy(a):
                    return a
            return args[-1]

        return {
            "include": include,
            "toYaml": to_yaml,
            "indent": indent,
            "nindent": lambda n, s: "\n" + indent(n, s),
            "quote": lambda *a: " ".join(json.dumps(go_format(x)) for x in a),
            "default": lambda d, *v: v[0] if v and truthy(v[0]) else d,
            "required": required,
            "fail": fail,
            "eq": lambda a, *b: any(a == x for x in b),
            "ne": lambda a, b: a != b,
            "not": lambda a: not truthy(a),
            "and": and_,
            "or": or_,
            "empty": lambda a: not truthy(a),
            "printf": go_printf,
            "int": to_int,
            "gt": gt,
            "regexMatch": regex_match,
            "toString": lambda v: "<nil>" if v is None else go_format(v),
        }

    def run(self, nodes, dot, scopes):
        out = []
        for node in nodes:
            kind = node[0]
            if kind == "text":
                out.append(node[1])
            elif kind == "action":
                _, decl, pipe = node
                value = self.pipeline(pipe, dot, scopes)
                if decl:
                    scopes[-1][decl[-1]] = value
                else:
                    out.append(go_format(value))
            elif kind == "if":
                _, cond, body, other = node
                branch = body if truthy(self.pipeline(cond, dot, scopes)) else other
                out.append(self.run(branch, dot, scopes + [{}]))
            elif kind == "with":
                _, decl, pipe, body, other = node
                value = self.pipeline(pipe, dot, scopes)
                if truthy(value):
                    out.append(self.run(body, value, scopes + [dict.fromkeys(decl[-1:], value)]))
                else:
                    out.append(self.run(other, dot, scopes + [{}]))
            elif kind == "range":
                _, decl, pipe, body, other = node
                value = self.pipeline(pipe, dot, scopes)
                if isinstance(value, dict):
                    entries = [(k, value[k]) for k in sorted(value)]
                elif isinstance(value, list):
                    entries = list(enumerate(value))
                elif value is None:
                    entries = []
                else:
                    raise TemplateError(f"range over {type(value).__name__}")
                if not entries:
                    out.append(self.run(other, dot, scopes + [{}]))
                for key, item in entries:
                    scope = {}
                    if len(decl) == 1:
                        scope[decl[0]] = item
                    elif len(decl) == 2:
                        scope[decl[0]], scope[decl[1]] = key, item
                    out.append(self.run(body, item, scopes + [scope]))
            elif kind == "template":
                _, name, pipe = node
                ctx = self.pipeline(pipe, dot, scopes) if pipe else None
                out.append(self.funcs()["include"](name, ctx))
        return "".join(out)

    def pipeline(self, tokens, dot, scopes):
        commands, current, depth = [], [], 0
        for t in tokens:
            if t[0] == "pipe" and depth == 0:
                commands.append(current)
                current = []
                continue
            depth += t[0] == "lparen"
            depth -= t[0] == "rparen"
            current.append(t)
        commands.append(current)
        value, first = None, True
        for cmd in commands:
            value = self.command(cmd, dot, scopes, None if first else [value])
            first = False
        return value

    def command(self, tokens, dot, scopes, piped):
        operands = self.operands(tokens)
        if not operands:
            raise TemplateError("empty command")
        head = operands[0]
        if head[0] == "ident" and head[1] not in ("true", "false", "nil"):
            fn = self.funcs().get(head[1])
            if fn is None:
                raise TemplateError(f"function {head[1]!r} is not supported by this checker's "
                                    "renderer (add it here, or keep the chart to the subset)")
            args = [self.operand(o, dot, scopes) for o in operands[1:]] + (piped or [])
            return fn(*args)
        if len(operands) > 1 or piped:
            raise TemplateError(f"cannot call {head[1]!r}")
        return self.operand(head, dot, scopes)

    @staticmethod
    def operands(tokens):
        out, i = [], 0
        while i < len(tokens):
            if tokens[i][0] == "lparen":
                depth, j = 1, i + 1
                while depth:
                    depth += tokens[j][0] == "lparen"
                    depth -= tokens[j][0] == "rparen"
                    j += 1
                out.append(("paren", tokens[i + 1:j - 1]))
                i = j
            else:
                out.append(tokens[i])
                i += 1
        return out

    def operand(self, op, dot, scopes):
        kind, text = op
        if kind == "paren":
            return self.pipeline(text, dot, scopes)
        if kind == "string":
            return json.loads(text)
        if kind == "raw":
            return text[1:-1]
        if kind == "number":
            return float(text) if "." in text else int(text)
        if kind == "ident":
            if text in ("true", "false", "nil"):
                return {"true": True, "false": False, "nil": None}[text]
            fn = self.funcs().get(text)
            if fn is None:
                raise TemplateError(f"function {text!r} is not supported")
            return fn()
        if kind == "field":
            return self.walk(dot, [] if text == "." else text[1:].split("."), text)
        if kind == "var":
            name, _, rest = text.partition(".")
            for scope in reversed(scopes):
                if name in scope:
                    return self.walk(scope[name], rest.split(".") if rest else [], text)
            raise TemplateError(f"undefined variable {name}")
        raise TemplateError(f"unexpected {text!r}")

    def walk(self, value, path, text):
        for key in path:
            if not isinstance(value, dict):
                raise TemplateError(f"{text}: cannot take .{key} of {type(value).__name__}")
            if key not in value:
                if self.strict:
                    raise TemplateError(f"{text}: no value {key!r} (not in values.yaml?)")
                return None
            value = value[key]
        return value


def deep_merge(base, override):
    if isinstance(base, dict) and isinstance(override, dict):
        out = dict(base)
        for k, v in override.items():
            out[k] = deep_merge(base.get(k), v) if k in base else copy.deepcopy(v)
        return out
    return copy.deepcopy(override)


def render_chart(chart_dir, overrides, namespace=NAMESPACE):
    """Renders every manifest template like `helm template` would, returning
    (docs, notes). Raises TemplateError / TemplateFail."""
    with open(os.path.join(chart_dir, "Chart.yaml")) as f:
        chart = yaml.safe_load(f)
    with open(os.path.join(chart_dir, "values.yaml")) as f:
        values = yaml.safe_load(f) or {}
    values = deep_merge(values, overrides)
    root = {
        "Values": values,
        "Release": {"Name": "blockcsi", "Namespace": namespace, "Service": "Helm",
                    "IsInstall": True, "IsUpgrade": False, "Revision": 1},
        "Chart": {"Name": chart["name"], "Version": chart["version"], "AppVersion": chart.get("appVersion")},
    }
    tdir = os.path.join(chart_dir, "templates")
    defines, parsed = {}, {}
    for fname in sorted(os.listdir(tdir)):
        with open(os.path.join(tdir, fname)) as f:
            source = f.read()
        parsed[fname] = Parser(lex(source, fname), fname, defines).parse()
    renderer = Renderer(defines, strict_values=True)
    docs, notes = [], None
    for fname, nodes in parsed.items():
        if fname.startswith("_"):
            continue
        try:
            text = renderer.run(nodes, root, [{"$": root}])
        except TemplateFail:
            raise
        except TemplateError as e:
            raise TemplateError(f"{fname}: {e}") from None
        if fname == "NOTES.txt":
            notes = text
            continue
        try:
            for doc in yaml.safe_load_all(text):
                if doc is not None:
                    docs.append(doc)
        except yaml.YAMLError as e:
            raise TemplateError(f"{fname}: rendered output is not YAML: {e}") from None
    return docs, notes


VALUES_REF = re.compile(r"\$?\.Values((?:\.[A-Za-z_][A-Za-z0-9_]*)+)")


def check_chart_static(chart_dir, problems):
    where = "helm chart"
    with open(os.path.join(chart_dir, "Chart.yaml")) as f:
        chart = yaml.safe_load(f)
    if chart.get("apiVersion") != "v2":
        problems.add(where, "Chart.yaml apiVersion must be v2")
    if chart.get("name") != os.path.basename(chart_dir.rstrip("/")):
        problems.add(where, "Chart.yaml name must match the chart's directory")
    if not re.fullmatch(r"\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?", str(chart.get("version", ""))):
        problems.add(where, f"Chart.yaml version {chart.get('version')!r} is not SemVer")
    with open(os.path.join(chart_dir, "values.yaml")) as f:
        values = yaml.safe_load(f)
    tdir = os.path.join(chart_dir, "templates")
    for fname in sorted(os.listdir(tdir)):
        with open(os.path.join(tdir, fname)) as f:
            source = f.read()
        for m in VALUES_REF.finditer(source):
            node = values
            for key in m.group(1)[1:].split("."):
                if not isinstance(node, dict) or key not in node:
                    problems.add(where, f"templates/{fname}: .Values{m.group(1)} is not in values.yaml")
                    break
                node = node[key]
    # The sidecar tags in values.yaml are the pinned set.
    sidecars = values.get("sidecars") or {}
    names = {"provisioner": "csi-provisioner", "attacher": "csi-attacher", "resizer": "csi-resizer",
             "snapshotter": "csi-snapshotter", "nodeDriverRegistrar": "node-driver-registrar",
             "livenessProbe": "liveness-probe"}
    for key, cname in names.items():
        s = sidecars.get(key) or {}
        if f"{s.get('repository')}:{s.get('tag')}" != SIDECAR_IMAGES[cname]:
            problems.add(where, f"values.yaml sidecars.{key} is {s.get('repository')}:{s.get('tag')}, "
                                f"the pinned set has {SIDECAR_IMAGES[cname]}")


# --------------------------------------------------------------------------
# Static checks of the image recipe and the storage-host files.

def check_image(deploy_dir, problems):
    where = "deploy/image/Dockerfile"
    path = os.path.join(deploy_dir, "image", "Dockerfile")
    if not os.path.exists(path):
        problems.add(where, "missing")
        return
    with open(path) as f:
        text = f.read()
    joined = re.sub(r"\\\n", " ", text)
    lines = [ln.strip() for ln in joined.splitlines() if ln.strip() and not ln.strip().startswith("#")]
    froms = [ln for ln in lines if ln.upper().startswith("FROM ")]
    if len(froms) < 2:
        problems.add(where, "not a multi-stage build")
    default_base = re.search(r"^ARG DEBIAN_IMAGE=(\S+)", text, re.M)
    bases = [default_base.group(1)] if default_base else []
    bases += [f.split()[1] for f in froms if not f.split()[1].startswith("$")]
    if not bases or not all(re.match(r"(docker\.io/(library/)?)?debian:(12|bookworm)", b) for b in bases):
        problems.add(where, f"base image is not Debian 12: {bases}")
    build = " ".join(lines)
    # The bridges too: the plugin starts them from its own directory (issue #17).
    for prog in ("blockcsi", "blockcsi-target", "blockctl", "blockcsi-bridge"):
        if not re.search(rf"--target [^&]*(?<![\w-]){re.escape(prog)}(?![\w-])", build):
            problems.add(where, f"does not build {prog}")
    if "COPY --from=build /out/usr/bin/ /usr/bin/" not in text:
        problems.add(where, "the programs are not copied to /usr/bin in the runtime stage")
    last_from = max(i for i, ln in enumerate(lines) if ln.upper().startswith("FROM ")) if froms else 0
    runtime = " ".join(lines[last_from:])
    if not re.search(r"apt-get install [^&]*\bopen-iscsi\b", runtime):
        problems.add(where, "the runtime stage lacks open-iscsi (the kernel connector's iscsiadm)")
    users = [ln.split()[1] for ln in lines if ln.upper().startswith("USER ")]
    if not users or users[-1].split(":")[0] in ("0", "root"):
        problems.add(where, "the image does not default to a non-root USER")
    if not re.search(r'^ENTRYPOINT \["/usr/bin/blockcsi"\]', text, re.M):
        problems.add(where, "ENTRYPOINT is not /usr/bin/blockcsi")


def check_target_host(deploy_dir, problems):
    base = os.path.join(deploy_dir, "target-host")
    where = "deploy/target-host"
    files = {}
    for name in ("blockcsi-target.service", "blockcsi-tgtd.service", "target.env", "make-certs.sh", "README.md"):
        path = os.path.join(base, name)
        if not os.path.exists(path):
            problems.add(where, f"{name} is missing")
            continue
        with open(path) as f:
            files[name] = f.read()
    if "make-certs.sh" in files and not os.access(os.path.join(base, "make-certs.sh"), os.X_OK):
        problems.add(where, "make-certs.sh is not executable")
    env = {}
    for line in files.get("target.env", "").splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, _, value = line.partition("=")
            env[key.strip()] = value.strip()
    for unit in ("blockcsi-target.service", "blockcsi-tgtd.service"):
        text = "\n".join(ln for ln in files.get(unit, "").splitlines() if not ln.lstrip().startswith("#"))
        for ref in set(re.findall(r"\$\{?([A-Z_][A-Z0-9_]*)\}?", text)):
            if ref not in env:
                problems.add(where, f"{unit} uses ${ref}, which target.env does not set")
    target = re.sub(r"\\\n", " ", files.get("blockcsi-target.service", ""))
    start = re.search(r"^ExecStart=(.*)$", target, re.M)
    args = start.group(1).split() if start else []
    if not args or args[0] != "/usr/bin/blockcsi-target":
        problems.add(where, "blockcsi-target.service does not start /usr/bin/blockcsi-target")
    given = {a.split("=")[0] for a in args[1:] if a.startswith("--")}
    for a in given - TARGET_FLAGS:
        problems.add(where, f"blockcsi-target has no flag {a}")
    for a in ("--listen", "--pool", "--tls-cert", "--tls-key", "--tls-ca"):
        if a not in given:
            problems.add(where, f"blockcsi-target.service does not pass {a}")
    if "--insecure" in given:
        problems.add(where, "blockcsi-target.service runs --insecure")
    # Issue #18: tgtd's I/O threads per LUN are ours to set (16 per LUN by
    # default: 16,000 threads at 1,000 volumes); the tests run the same value.
    tgtd = re.sub(r"\\\n", " ", files.get("blockcsi-tgtd.service", ""))
    tgtd_start = re.search(r"^ExecStart=(.*)$", tgtd, re.M)
    tgtd_args = tgtd_start.group(1).split() if tgtd_start else []
    if "-t" not in tgtd_args or tgtd_args[tgtd_args.index("-t") + 1:][:1] != ["${TGT_IO_THREADS}"]:
        problems.add(where, "blockcsi-tgtd.service does not pass -t ${TGT_IO_THREADS}")
    if not env.get("TGT_IO_THREADS", "").isdigit() or int(env["TGT_IO_THREADS"]) < 1:
        problems.add(where, f"TGT_IO_THREADS is {env.get('TGT_IO_THREADS')!r}, not a positive number")
    for a in env.get("BLOCKCSI_TARGET_PORTAL_ARGS", "").split():
        if not a.startswith("--portal="):
            problems.add(where, f"BLOCKCSI_TARGET_PORTAL_ARGS holds {a!r}, only --portal= flags belong there")


def check_metrics_objects(where, docs, metrics_values, problems):
    """Issue #19: metrics on → a metrics port, flag and annotated Service per component
    (and a ServiceMonitor selecting it when asked); metrics off → none of them."""
    enabled = metrics_values.get("enabled", True)
    want_monitors = enabled and (metrics_values.get("serviceMonitor") or {}).get("enabled", False)
    services = {(d.get("metadata") or {}).get("name"): d for d in find(docs, "Service")}
    monitors = find(docs, "ServiceMonitor")
    for component, kind in (("controller", "Deployment"), ("node", "DaemonSet")):
        workload = one(docs, kind, f"blockcsi-{component}", where, problems)
        if workload is None:
            continue
        c = next((c for c in containers(workload) if c.get("name") == "blockcsi"), {})
        flag = [a for a in c.get("args") or [] if str(a).startswith("--metrics-address=")]
        port = [p.get("containerPort") for p in c.get("ports") or [] if p.get("name") == "metrics"]
        service = services.get(f"blockcsi-{component}-metrics")
        if not enabled:
            if flag or port or service:
                problems.add(where, f"metrics disabled, yet {component} has a metrics flag, port or Service")
            continue
        if len(flag) != 1 or len(port) != 1 or not flag[0].endswith(f":{port[0]}"):
            problems.add(where, f"{component}: --metrics-address {flag} does not serve its metrics port {port}")
            continue
        if service is None:
            problems.add(where, f"{component}: no Service blockcsi-{component}-metrics")
            continue
        annotations = (service.get("metadata") or {}).get("annotations") or {}
        if annotations.get("prometheus.io/scrape") != "true" or annotations.get("prometheus.io/port") != str(port[0]):
            problems.add(where, f"Service blockcsi-{component}-metrics: scrape annotations do not name port {port[0]}")
        selector = (service.get("spec") or {}).get("selector") or {}
        if selector.get("app.kubernetes.io/component") != component:
            problems.add(where, f"Service blockcsi-{component}-metrics selects {selector}")
    if want_monitors and len(monitors) != 2:
        problems.add(where, f"metrics.serviceMonitor.enabled renders {len(monitors)} ServiceMonitors, want 2")
    if not want_monitors and monitors:
        problems.add(where, "a ServiceMonitor rendered although metrics.serviceMonitor is off")
    for m in monitors:
        labels = (m.get("metadata") or {}).get("labels") or {}
        wanted = (metrics_values.get("serviceMonitor") or {}).get("labels") or {}
        if any(labels.get(k) != v for k, v in wanted.items()):
            problems.add(where, f"{obj_id(m)}: labels {labels} miss {wanted}")


def check_dashboard(deploy_dir, problems):
    """The Grafana dashboard parses, and every blockcsi_ metric it queries is one
    the driver's sources declare (a renamed metric must not leave an empty panel)."""
    where = "deploy/grafana"
    path = os.path.join(deploy_dir, "grafana", "blockcsi-dashboard.json")
    try:
        with open(path) as f:
            dashboard = json.load(f)
    except (OSError, ValueError) as e:
        problems.add(where, f"blockcsi-dashboard.json: {e}")
        return
    src = os.path.join(os.path.dirname(deploy_dir), "src")
    if not os.path.isdir(src):
        return  # a deploy dir on its own: nothing to hold the names against
    declared = set()
    for root, _, names in os.walk(src):
        for name in names:
            if name.endswith(".cc"):
                with open(os.path.join(root, name), errors="replace") as f:
                    declared.update(re.findall(r'"(blockcsi_[a-z0-9_]+)"', f.read()))
    for panel in dashboard.get("panels") or []:
        for target in panel.get("targets") or []:
            for metric in re.findall(r"\b(blockcsi_[a-z0-9_]+)", target.get("expr", "")):
                base = re.sub(r"_(bucket|sum|count)$", "", metric)
                if metric not in declared and base not in declared:
                    problems.add(where, f"panel {panel.get('title')!r} queries {metric}, which no source declares")


# --------------------------------------------------------------------------
# Driving it.

def load_yaml_docs(text, where, problems):
    try:
        return [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as e:
        problems.add(where, f"not YAML: {e}")
        return []


def kustomize_targets(deploy_dir):
    kdir = os.path.join(deploy_dir, "kubernetes")
    targets = [("base", kdir)]
    odir = os.path.join(kdir, "overlays")
    if os.path.isdir(odir):
        for name in sorted(os.listdir(odir)):
            if os.path.exists(os.path.join(odir, name, "kustomization.yaml")):
                targets.append((f"overlays/{name}", os.path.join(odir, name)))
    return targets


# --------------------------------------------------------------------------
# Renderers: every `kubectl kustomize` the checker can find. The manifests must
# render with kubectl 1.32 (kustomize v5) and with Debian 12's own
# kubernetes-client (kubectl 1.20.2, kustomize v2.0.3), and the two must agree.

DEBIAN_KUBECTL_ENV = "BLOCKCSI_DEBIAN_KUBECTL_CACHE"
DEBIAN_KUBECTL_PACKAGE = "kubernetes-client"


class KubectlRenderer:
    """One kubectl binary; `label` names it in every message about its renders."""

    def __init__(self, path, origin):
        self.path = path
        self.version, self.kustomize_version = kubectl_versions(path)
        about = [origin] if origin else []
        self.label = f"{path} ({', '.join(about + [f'kubectl {self.version}', f'kustomize {self.kustomize_version}'])})"

    @property
    def legacy(self):
        """True for kustomize v2/v3 (kubectl before 1.21): bases:, no inline patches."""
        m = re.match(r"v(\d+)\.", self.kustomize_version)
        return bool(m) and int(m.group(1)) < 4


def kubectl_versions(path):
    """(kubectl version, kustomize version) of a kubectl binary, '?' when unknown."""
    try:
        r = subprocess.run([path, "version", "--client", "-o", "json"],
                           capture_output=True, text=True, timeout=60)
        info = json.loads(r.stdout)
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return "?", "?"
    version = (info.get("clientVersion") or {}).get("gitVersion") or "?"
    kustomize_version = info.get("kustomizeVersion")
    if not kustomize_version:
        # kubectl 1.14 to 1.20 embed kustomize v2.0.3 and do not report it;
        # 1.21 moved to v4 and reports it.
        m = re.match(r"v1\.(\d+)\.", version)
        kustomize_version = "v2.0.3" if m and 14 <= int(m.group(1)) <= 20 else "?"
    return version, kustomize_version


def dpkg_owner(path):
    try:
        r = subprocess.run(["dpkg-query", "-S", os.path.realpath(path)],
                           capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return r.stdout.split(":", 1)[0].strip() if r.returncode == 0 and r.stdout else None


MISSING_TOOL = "missing-tool"


def debian_kubectl(cache_dir, log):
    """Debian's kubectl, from `apt-get download kubernetes-client` + `dpkg -x` into
    cache_dir (once; later runs reuse it). None, with the reason logged, when it
    cannot be had (no apt, no network, no package lists). MISSING_TOOL when the
    machine has no apt-get or dpkg at all."""
    cache_dir = os.path.abspath(cache_dir)
    kubectl = os.path.join(cache_dir, "root", "usr", "bin", "kubectl")
    if os.access(kubectl, os.X_OK):
        return kubectl
    for tool in ("apt-get", "dpkg"):
        if not shutil.which(tool):
            log(f"{tool} not found: cannot fetch Debian's {DEBIAN_KUBECTL_PACKAGE}")
            return MISSING_TOOL
    try:
        os.makedirs(cache_dir, exist_ok=True)
        import fcntl
        with open(os.path.join(cache_dir, ".lock"), "w") as lock:
            # ctest may run the checker and its self-test at once: one downloads.
            fcntl.flock(lock, fcntl.LOCK_EX)
            if os.access(kubectl, os.X_OK):
                return kubectl
            with tempfile.TemporaryDirectory(dir=cache_dir) as tmp:
                r = subprocess.run(["apt-get", "download", DEBIAN_KUBECTL_PACKAGE], cwd=tmp,
                                   capture_output=True, text=True, timeout=600)
                debs = [f for f in os.listdir(tmp) if f.endswith(".deb")]
                if r.returncode != 0 or len(debs) != 1:
                    why = (r.stderr.strip() or r.stdout.strip() or f"exit status {r.returncode}")
                    log(f"`apt-get download {DEBIAN_KUBECTL_PACKAGE}` failed: {why[-500:]}")
                    return None
                root = os.path.join(tmp, "root")
                r = subprocess.run(["dpkg", "-x", os.path.join(tmp, debs[0]), root],
                                   capture_output=True, text=True, timeout=300)
                if r.returncode != 0 or not os.access(os.path.join(root, "usr", "bin", "kubectl"), os.X_OK):
                    log(f"`dpkg -x {debs[0]}` gave no usr/bin/kubectl: {r.stderr.strip()[-500:]}")
                    return None
                shutil.rmtree(os.path.join(cache_dir, "root"), ignore_errors=True)
                os.replace(root, os.path.join(cache_dir, "root"))
                os.replace(os.path.join(tmp, debs[0]), os.path.join(cache_dir, debs[0]))
    except (OSError, subprocess.TimeoutExpired) as e:
        log(f"fetching Debian's {DEBIAN_KUBECTL_PACKAGE} failed: {e}")
        return None
    return kubectl


def find_renderers(explicit, system, debian_cache, log):
    """The kubectl binaries to render with: --kubectl ones, else the system kubectl;
    plus Debian's, fetched into debian_cache, unless the system one is Debian's.
    Returns (renderers, missing): missing names a requested renderer that could
    not be had, "" when none, MISSING_TOOL when the machine lacks apt-get/dpkg."""
    found = []
    missing = ""
    for path in explicit or ([system] if system else []):
        owner = dpkg_owner(path)
        found.append(KubectlRenderer(path, f"package {owner}" if owner else None))
    if debian_cache:
        if any(dpkg_owner(r.path) == DEBIAN_KUBECTL_PACKAGE for r in found):
            log(f"{DEBIAN_KUBECTL_PACKAGE}'s kubectl is already a renderer; not fetched again")
        else:
            path = debian_kubectl(debian_cache, log)
            if path and path != MISSING_TOOL:
                found.append(KubectlRenderer(path, f"Debian {DEBIAN_KUBECTL_PACKAGE}"))
            else:
                missing = MISSING_TOOL if path == MISSING_TOOL else f"Debian {DEBIAN_KUBECTL_PACKAGE}"
                log(f"Debian's kubectl is MISSING as a renderer: the manifests are not checked "
                    f"against kustomize v2.0.3 in this run")
    return found, missing


def kustomize(kubectl, path):
    r = subprocess.run([kubectl, "kustomize", path], capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        raise RuntimeError(r.stderr.strip() or f"kubectl kustomize {path} failed")
    return r.stdout


def render_all(deploy_dir, renderer, problems):
    """Returns {bundle name: docs} for every kustomize target, rendered by one kubectl."""
    bundles = {}
    for name, path in kustomize_targets(deploy_dir):
        try:
            text = kustomize(renderer.path, path)
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            problems.add(f"kustomize {name}", f"does not render with {renderer.label}: {e}")
            continue
        bundles[name] = load_yaml_docs(text, f"kustomize {name} [{renderer.label}]", problems)
    return bundles


def by_id(docs):
    out = {}
    for d in docs:
        if isinstance(d, dict):
            out.setdefault(obj_id(d), []).append(d)
    return out


def compare_renders(name, docs_a, label_a, docs_b, label_b, problems):
    """Two kubectls must render a kustomization to the same objects (key order
    and formatting aside; list order counts: args are ordered)."""
    where = f"kustomize {name}"
    a, b = by_id(docs_a), by_id(docs_b)
    for oid in sorted(set(a) | set(b)):
        if oid not in b:
            problems.add(where, f"renders differ: {oid} only from {label_a}")
        elif oid not in a:
            problems.add(where, f"renders differ: {oid} only from {label_b}")
        elif a[oid] != b[oid]:
            lines = list(diff(a[oid], b[oid], oid, ("A", "B"))) or [f"{oid}: differs"]
            problems.add(where, f"renders differ between A={label_a} and B={label_b}: "
                                + "; ".join(lines[:3]))


def example_docs(deploy_dir, problems):
    docs = []
    edir = os.path.join(deploy_dir, "examples")
    for fname in sorted(os.listdir(edir)) if os.path.isdir(edir) else []:
        if fname.endswith((".yaml", ".yml")):
            with open(os.path.join(edir, fname)) as f:
                docs += load_yaml_docs(f.read(), f"examples/{fname}", problems)
    return docs


def run_checks(deploy_dir, renderers, problems):
    """Every check. Returns the number of bundles checked."""
    checked = 0
    renders = [(r, render_all(deploy_dir, r, problems)) for r in renderers]
    for renderer, rendered in renders:
        for name, docs in rendered.items():
            check_bundle(f"kustomize {name} [{renderer.label}]", docs, problems)
            checked += 1
    # Every kubectl must render every kustomization to the same objects.
    for renderer, rendered in renders[1:]:
        first, first_rendered = renders[0]
        for name in sorted(set(first_rendered) & set(rendered)):
            compare_renders(name, first_rendered[name], first.label, rendered[name], renderer.label,
                            problems)
    # The chart is compared with the first kubectl's renders (the others equal them).
    bundles = renders[0][1] if renders else {}
    chart_dir = os.path.join(deploy_dir, "helm", "blockcsi")
    check_chart_static(chart_dir, problems)
    for name, overrides, twin in HELM_VARIANTS:
        where = f"helm {name}"
        try:
            docs, notes = render_chart(chart_dir, overrides)
        except TemplateError as e:
            problems.add(where, f"does not render: {e}")
            continue
        if not notes or "blockcsi" not in notes:
            problems.add(where, "NOTES.txt rendered empty")
        check_bundle(where, docs, problems)
        check_metrics_objects(where, docs, overrides.get("metrics") or {}, problems)
        checked += 1
        if twin and bundles:
            if twin in bundles:
                compare_with_kustomize(f"{where} vs kustomize {twin}", docs, bundles[twin], problems)
            else:
                problems.add(where, f"no kustomize render {twin} to compare with")
    for name, overrides, expect in HELM_BAD_VALUES:
        try:
            render_chart(chart_dir, overrides)
            problems.add(f"helm bad values ({name})", "rendered; the chart should refuse these values")
        except TemplateFail as e:
            if expect not in str(e):
                problems.add(f"helm bad values ({name})", f"refused, but with {e!r}")
        except TemplateError as e:
            problems.add(f"helm bad values ({name})", f"broke instead of refusing: {e}")
    examples = example_docs(deploy_dir, problems)
    check_objects("examples", examples, problems)
    check_storage_objects("examples", examples, problems)
    if not find(examples, "StorageClass") or not find(examples, "VolumeSnapshotClass"):
        problems.add("examples", "StorageClass and VolumeSnapshotClass examples expected")
    checked += 1
    src_dir = os.path.join(os.path.dirname(os.path.abspath(deploy_dir)), "src")
    if os.path.isdir(src_dir):
        check_api_requests(src_dir, problems)
    check_image(deploy_dir, problems)
    check_target_host(deploy_dir, problems)
    check_dashboard(deploy_dir, problems)
    return checked


def run_yamllint(deploy_dir, yamllint):
    config = os.path.join(deploy_dir, ".yamllint")
    cmd = [yamllint, "--strict", "--format", "parsable"]
    if os.path.exists(config):
        cmd += ["-c", config]
    r = subprocess.run(cmd + [deploy_dir], capture_output=True, text=True, timeout=300)
    return r.returncode, (r.stdout + r.stderr).strip()


# --------------------------------------------------------------------------
# Self-test: break things on purpose and make sure the checks notice.

def ctrl_of(docs):
    return find(docs, "Deployment", "blockcsi-controller")[0]


def node_of(docs):
    return find(docs, "DaemonSet", "blockcsi-node")[0]


def set_arg(c, key, value):
    c["args"] = [a for a in c["args"] if not str(a).startswith(key)] + ([f"{key}={value}"] if value else [])


def drop_arg(c, key):
    c["args"] = [a for a in c["args"] if str(a).split("=")[0] != key]


# The mutations most cases are: one argument of one container of a workload
# (ctrl_of or node_of) set to another value, or dropped.
def with_arg(workload_of, name, key, value):
    return lambda d: set_arg(container(workload_of(d), name), key, value)


def without_arg(workload_of, name, key):
    return lambda d: drop_arg(container(workload_of(d), name), key)


MUTATIONS = [
    ("registrar points kubelet at the wrong socket",
     with_arg(node_of, "node-driver-registrar", "--kubelet-registration-path",
              "/var/lib/kubelet/plugins/blockcsi/csi.sock"),
     "--kubelet-registration-path"),
    ("node socket dir on the wrong host path",
     lambda d: volume(node_of(d), "plugin-dir")["hostPath"].update(path="/var/lib/kubelet/plugins/csi-blockcsi"),
     "kubelet looks in"),
    ("attacher dials another socket",
     with_arg(ctrl_of, "csi-attacher", "--csi-address", "/run/csi/socket"),
     "--csi-address"),
    ("blockcsi endpoint moved",
     with_arg(node_of, "blockcsi", "--endpoint", "unix:///plugin/csi.sock"),
     "--endpoint"),
    ("resizer lost its resources",
     lambda d: container(ctrl_of(d), "csi-resizer").pop("resources"),
     "csi-resizer: no resources.requests.cpu"),
    ("node plugin memory limit removed",
     lambda d: container(node_of(d), "blockcsi")["resources"].pop("limits"),
     "no resources.limits.memory"),
    ("registrar lost its probe",
     lambda d: container(node_of(d), "node-driver-registrar").pop("livenessProbe"),
     "node-driver-registrar: no livenessProbe"),
    ("controller driver name differs from the CSIDriver",
     with_arg(ctrl_of, "blockcsi", "--driver-name", "block.csi.io"),
     "--driver-name=block.csi.io"),
    ("CSIDriver renamed",
     lambda d: find(d, "CSIDriver")[0]["metadata"].update(name="blockcsi.example.com"),
     "CSIDriver is named"),
    ("CSIDriver does not require attach",
     lambda d: find(d, "CSIDriver")[0]["spec"].update(attachRequired=False),
     "attachRequired"),
    ("controller runs under an account that is not deployed",
     lambda d: pod_spec(ctrl_of(d)).update(serviceAccountName="blockcsi-controller-sa"),
     "is not deployed"),
    ("binding names an account that does not exist",
     lambda d: find(d, "ClusterRoleBinding", "blockcsi-external-attacher")[0]["subjects"][0].update(name="csi-attacher"),
     "is not a deployed ServiceAccount"),
    ("provisioner without leader election",
     without_arg(ctrl_of, "csi-provisioner", "--leader-election"),
     "without --leader-election"),
    ("provisioner without topology",
     without_arg(ctrl_of, "csi-provisioner", "--feature-gates"),
     "Topology=true"),
    ("provisioner without capacity",
     without_arg(ctrl_of, "csi-provisioner", "--enable-capacity"),
     "--enable-capacity"),
    ("kubelet dir without Bidirectional propagation",
     lambda d: mount_at(container(node_of(d), "blockcsi"), "/var/lib/kubelet").pop("mountPropagation"),
     "Bidirectional"),
    ("sidecar image floats",
     lambda d: container(ctrl_of(d), "csi-snapshotter").update(
         image="registry.k8s.io/sig-storage/csi-snapshotter:latest"),
     "is not pinned"),
    ("sidecar version drifts from the pinned set",
     lambda d: container(node_of(d), "liveness-probe").update(
         image="registry.k8s.io/sig-storage/livenessprobe:v2.12.0"),
     "the pinned sidecar is"),
    ("livenessprobe sidecar on another port than the probe",
     with_arg(ctrl_of, "liveness-probe", "--http-endpoint", ":9899"),
     "must both use 9808"),
    ("ClusterRole reads Secrets everywhere",
     lambda d: find(d, "ClusterRole", "blockcsi-external-attacher")[0]["rules"].append(
         {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "list"]}),
     "reads Secrets cluster-wide"),
    ("wildcard RBAC",
     lambda d: find(d, "ClusterRole", "blockcsi-external-resizer")[0]["rules"].append(
         {"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}),
     "wildcard"),
    ("node id not from the node name",
     lambda d: env_var(container(node_of(d), "blockcsi"), "NODE_ID")["valueFrom"]["fieldRef"].update(
         fieldPath="metadata.name"),
     "spec.nodeName"),
    ("kernel connector without /etc/iscsi",
     lambda d: container(node_of(d), "blockcsi")["volumeMounts"].remove(
         mount_at(container(node_of(d), "blockcsi"), "/etc/iscsi")),
     "needs the host's /etc/iscsi"),
    ("controller talks to the agent in plaintext",
     lambda d: container(ctrl_of(d), "blockcsi")["args"].append("--insecure"),
     "--insecure"),
    ("TLS key outside the Secret mount",
     with_arg(ctrl_of, "blockcsi", "--tls-key", "/tmp/tls.key"),
     "not in a mounted Secret volume"),
    ("argument refers to an undefined env var",
     with_arg(node_of, "blockcsi", "--node-id", "$(NODE_NAME)"),
     "$(NODE_NAME)"),
    ("unknown blockcsi flag",
     lambda d: container(node_of(d), "blockcsi")["args"].append("--topology-key=zone"),
     "has no flag --topology-key"),
    ("single replica with the remote backend",
     lambda d: ctrl_of(d)["spec"].update(replicas=1),
     "want 2 for failover"),
    ("local backend with two replicas",
     with_arg(ctrl_of, "blockcsi", "--backend", "local"),
     "two owners of one pool"),
    ("node plugin not privileged",
     lambda d: container(node_of(d), "blockcsi")["securityContext"].pop("privileged"),
     "must be privileged"),
    ("node plugin does not tolerate taints",
     lambda d: pod_spec(node_of(d)).pop("tolerations"),
     "should tolerate every taint"),
    ("attacher removed while the CSIDriver requires attach",
     lambda d: pod_spec(ctrl_of(d))["containers"].remove(container(ctrl_of(d), "csi-attacher")),
     "no csi-attacher runs"),
    ("userspace connector rolled automatically",
     with_arg(node_of, "blockcsi", "--connector", "userspace"),
     "must be OnDelete"),
    ("userspace bridges in their own cgroup but the container's PID namespace",
     lambda d: (set_arg(container(node_of(d), "blockcsi"), "--connector", "userspace"),
                set_arg(container(node_of(d), "blockcsi"), "--bridge-cgroup", "/sys/fs/cgroup/blockcsi-bridges")),
     "needs hostPID"),
    ("duplicate object",
     lambda d: d.append(copy.deepcopy(find(d, "ServiceAccount", NODE_SA)[0])),
     "defined twice"),
    ("node plugin bound to a role without fencing",
     lambda d: find(d, "RoleBinding", "blockcsi-controller-leader-election")[0]["subjects"].append(
         {"kind": "ServiceAccount", "name": NODE_SA, "namespace": NAMESPACE}),
     "the node plugin needs none"),
    ("fence watcher turned on without its grants",
     lambda d: container(ctrl_of(d), "blockcsi")["args"].extend(
         ["--fence-dead-nodes-after=5m", "--fence-namespace=blockcsi"]),
     "lacks list on nodes cluster-wide"),
]


def rules_of(docs, kind, name):
    return find(docs, kind, name)[0]["rules"]


# Breaks of a render with the fence watcher on (overlays/fencing, or the
# chart's fencing variant without a kubectl).
FENCING_MUTATIONS = [
    ("watcher cannot patch the taint on",
     lambda d: rules_of(d, "ClusterRole", "blockcsi-fencing")[0]["verbs"].remove("patch"),
     "lacks patch on nodes cluster-wide"),
    ("watcher may watch Nodes, which it never does",
     lambda d: rules_of(d, "ClusterRole", "blockcsi-fencing")[0]["verbs"].append("watch"),
     "watch on nodes cluster-wide, which the code never asks for"),
    ("watcher's events go nowhere",
     lambda d: d.remove(find(d, "RoleBinding", "blockcsi-fencing-events")[0]),
     "lacks create on events in namespace default"),
    ("fence Leases granted in another namespace than --fence-namespace",
     lambda d: [o["metadata"].update(namespace="kube-system") for o in
                find(d, "Role", "blockcsi-fencing-leases") + find(d, "RoleBinding", "blockcsi-fencing-leases")],
     "lacks delete on leases.coordination.k8s.io in namespace blockcsi"),
    ("two replicas with the watcher on",
     lambda d: ctrl_of(d)["spec"].update(replicas=2),
     "elects no leader: 2 replicas, want 1"),
    ("rollout surges a second watcher",
     lambda d: ctrl_of(d)["spec"]["strategy"]["rollingUpdate"].update(maxSurge=1),
     "runs two fence watchers at once"),
    ("watcher duration blockcsi cannot read",
     with_arg(ctrl_of, "blockcsi", "--fence-dead-nodes-after", "1m30s"),
     "is no duration blockcsi reads"),
    ("nodes look for their fences elsewhere",
     with_arg(node_of, "blockcsi", "--fence-namespace", "kube-system"),
     "the nodes would never see their fences"),
    ("nodes never look at their fence",
     lambda d: container(node_of(d), "blockcsi")["args"].append("--fence-check-interval=0s"),
     "never look at its fence"),
    ("node plugin without its token",
     lambda d: container(node_of(d), "blockcsi")["volumeMounts"].remove(
         mount_at(container(node_of(d), "blockcsi"), SA_TOKEN_DIR)),
     "has no API token"),
    ("node plugin cannot report its cleanup",
     lambda d: rules_of(d, "Role", "blockcsi-node-fencing")[0]["verbs"].remove("patch"),
     "blockcsi/blockcsi-node lacks patch on leases"),
    ("node plugin bound cluster-wide",
     lambda d: find(d, "ClusterRoleBinding", "blockcsi-fencing")[0]["subjects"].append(
         {"kind": "ServiceAccount", "name": NODE_SA, "namespace": NAMESPACE}),
     "blockcsi/blockcsi-node may list on nodes cluster-wide"),
    ("a sidecar's role patches Nodes",
     lambda d: rules_of(d, "ClusterRole", "blockcsi-external-provisioner").append(
         {"apiGroups": [""], "resources": ["nodes"], "verbs": ["patch"]}),
     "only the fence watcher's role may change Nodes"),
    ("watcher off, its grants left behind",
     without_arg(ctrl_of, "blockcsi", "--fence-dead-nodes-after"),
     "a fencing grant while the fence watcher is off"),
    ("taint without the watcher",
     without_arg(ctrl_of, "blockcsi", "--fence-dead-nodes-after"),
     "--taint-fenced-nodes without --fence-dead-nodes-after"),
]

EXAMPLE_MUTATIONS = [
    ("StorageClass for another driver",
     lambda d: find(d, "StorageClass")[0].update(provisioner="iscsi.csi.k8s.io"), "provisioner"),
    ("CHAP class without its node-stage secret",
     lambda d: [sc["parameters"].pop("csi.storage.k8s.io/node-stage-secret-name")
                for sc in find(d, "StorageClass") if sc["parameters"].get("chap") == "true"],
     "node-stage-secret-name is missing"),
    ("CHAP secret with a misspelled key",
     lambda d: find(d, "Secret")[0]["stringData"].update({"chap-passwd": "x"}), "unknown CHAP keys"),
    ("misspelled StorageClass parameter",
     lambda d: find(d, "StorageClass")[0]["parameters"].update({"fstype": "ext4"}), "unknown parameter"),
    ("snapshot class for another driver",
     lambda d: find(d, "VolumeSnapshotClass")[0].update(driver="hostpath.csi.k8s.io"), "driver"),
]


def self_test(deploy_dir, renderers, yamllint):
    failures = []
    passed = 0
    skipped = []

    def expect(label, problems, needle):
        nonlocal passed
        if any(needle in p for p in problems.items):
            passed += 1
        else:
            failures.append(f"{label}: expected a problem mentioning {needle!r}, got "
                            f"{problems.items[:3] or 'none'}")

    def expect_each(cases, original, check):
        # Each case's mutation of a copy of `original`, then check(docs, problems): its needle must be reported.
        for label, mutate, needle in cases:
            docs = copy.deepcopy(original)
            mutate(docs)
            problems = Problems()
            check(docs, problems)
            expect(label, problems, needle)

    # Baseline: the shipped files pass, or the mutations prove nothing.
    baseline = Problems()
    run_checks(deploy_dir, renderers, baseline)
    if baseline.items:
        failures.append("the unmodified deploy/ has problems: " + "; ".join(baseline.items[:5]))
    else:
        passed += 1

    base_docs = None
    if renderers:
        base_docs = load_yaml_docs(kustomize(renderers[0].path, os.path.join(deploy_dir, "kubernetes")), "base",
                                   Problems())
    else:
        base_docs, _ = render_chart(os.path.join(deploy_dir, "helm", "blockcsi"), {})
    expect_each(MUTATIONS, base_docs, lambda docs, problems: check_bundle("mutated", docs, problems))
    if renderers:
        fencing_docs = load_yaml_docs(kustomize(renderers[0].path, os.path.join(
            deploy_dir, "kubernetes", "overlays", "fencing")), "overlays/fencing", Problems())
    else:
        fencing_docs, _ = render_chart(os.path.join(deploy_dir, "helm", "blockcsi"), {"fencing": {"enabled": True}})
    expect_each(FENCING_MUTATIONS, fencing_docs, lambda docs, problems: check_bundle("mutated", docs, problems))

    # Two kubectls that render one kustomization differently.
    expect_each([
            ("renders differ in a value",
             lambda d: container(node_of(d), "blockcsi").update(imagePullPolicy="Always"),
             "renders differ between"),
            ("renders differ in argument order",
             lambda d: container(node_of(d), "blockcsi")["args"].reverse(), "renders differ between"),
            ("one render lacks an object",
             lambda d: d.remove(find(d, "ConfigMap")[0]), "only from A"),
    ], base_docs, lambda docs, problems: compare_renders("base", base_docs, "A", docs, "B", problems))

    # A request added to the code, and one in a file the inventory does not know.
    src_dir = os.path.join(os.path.dirname(os.path.abspath(deploy_dir)), "src")
    if os.path.isdir(src_dir):
        with tempfile.TemporaryDirectory() as tmp:
            for rel in API_REQUESTS:
                os.makedirs(os.path.dirname(os.path.join(tmp, rel)), exist_ok=True)
                shutil.copy(os.path.join(os.path.dirname(src_dir), rel), os.path.join(tmp, rel))
            for label, rel, line, needle in [
                    ("the watcher gets a single Node",
                     "src/controller/node_fence_watcher.cc", 'auto got = api_->Get("/api/v1/nodes/" + name);',
                     "node_fence_watcher.cc makes {'GET': 2, 'PATCH': 2, 'POST': 1}"),
                    ("a new file talks to the API",
                     "src/node/node_labels.cc", 'auto sent = client_->Send("PATCH", path, "", body);',
                     "src/node/node_labels.cc makes {'PATCH': 1}, the checker knows {}")]:
                path = os.path.join(tmp, rel)
                os.makedirs(os.path.dirname(path), exist_ok=True)
                saved = None
                if os.path.exists(path):
                    with open(path) as f:
                        saved = f.read()
                with open(path, "a") as f:
                    f.write(line + "\n")
                problems = Problems()
                check_api_requests(os.path.join(tmp, "src"), problems)
                expect(label, problems, needle)
                if saved is None:
                    os.remove(path)
                else:
                    with open(path, "w") as f:
                        f.write(saved)

    examples = example_docs(deploy_dir, Problems())
    expect_each(EXAMPLE_MUTATIONS, examples,
                lambda docs, problems: check_storage_objects("mutated examples", docs, problems))

    # File-level breaks, on a scratch copy of deploy/.
    with tempfile.TemporaryDirectory() as tmp:
        copy_dir = os.path.join(tmp, "deploy")

        def fresh():
            shutil.rmtree(copy_dir, ignore_errors=True)
            shutil.copytree(deploy_dir, copy_dir)

        def edit(rel, old, new):
            path = os.path.join(copy_dir, rel)
            with open(path) as f:
                text = f.read()
            if old not in text:
                raise AssertionError(f"self-test fixture out of date: {old!r} not in {rel}")
            with open(path, "w") as f:
                f.write(text.replace(old, new, 1))

        file_breaks = [
            ("chart template reads a value that does not exist",
             "helm/blockcsi/templates/node.yaml", "{{ .Values.node.maxVolumesPerNode }}",
             "{{ .Values.node.maxVolumes }}", ".Values.node.maxVolumes is not in values.yaml"),
            ("chart drifts from kustomize (a sidecar flag)",
             "helm/blockcsi/templates/controller.yaml", "- --timeout=60s", "- --timeout=30s",
             "chart and kustomize disagree"),
            ("chart's node socket path drifts",
             "helm/blockcsi/templates/_helpers.tpl", '{{ printf "%s/plugins/%s"', '{{ printf "%s/plugin/%s"',
             "kubelet looks in"),
            ("chart uses a function the renderer does not know",
             "helm/blockcsi/templates/csidriver.yaml", "name: {{ include \"blockcsi.driverName\" . }}",
             "name: {{ include \"blockcsi.driverName\" . | upper }}", "not supported"),
            ("overlay patch no longer applies",
             "kubernetes/base/node.yaml", "- --connector=iscsi", "- --connector=kernel",
             "overlays/userspace-connector: does not render with {every}"),
            # Fields kustomize v5 takes and Debian's kustomize v2.0.3 does not.
            ("a directory under resources:",
             "kubernetes/kustomization.yaml", "bases:\n  - base", "resources:\n  - base",
             "kustomize base: does not render with {legacy}"),
            ("the patches field (v2 reads it as patchesStrategicMerge)",
             "kubernetes/overlays/single-host-local/kustomization.yaml",
             "patchesStrategicMerge:\n  - controller-local.yaml",
             "patches:\n  - path: controller-local.yaml",
             "overlays/single-host-local: does not render with {legacy}"),
            ("the namespace field (v2 puts the CSIDriver in the namespace)",
             "kubernetes/base/kustomization.yaml", "\nresources:\n", "\nnamespace: blockcsi\n\nresources:\n",
             "kustomize base: renders differ: CSIDriver/blockcsi/blockcsi.io only from {legacy}"),
            ("the v4 labels field",
             "kubernetes/base/kustomization.yaml", "\nimages:\n",
             "\nlabels:\n  - pairs:\n      app.kubernetes.io/version: 0.1.0\n\nimages:\n",
             "kustomize overlays/userspace-connector: does not render with {legacy}"),
            ("image runs as root",
             "image/Dockerfile", "USER 65532:65532", "USER root", "non-root USER"),
            ("image without the bridge the plugin starts",
             "image/Dockerfile", "blockctl blockcsi-bridge \\", "blockctl \\",
             "does not build blockcsi-bridge"),
            ("image does not build blockctl",
             "image/Dockerfile", "--target blockcsi blockcsi-target blockctl", "--target blockcsi blockcsi-target",
             "does not build blockctl"),
            ("image without open-iscsi",
             "image/Dockerfile", "open-iscsi e2fsprogs", "e2fsprogs", "open-iscsi"),
            ("unit uses a variable target.env does not set",
             "target-host/blockcsi-target.service", "${BLOCKCSI_TARGET_POOL}", "${BLOCKCSI_POOL}",
             "$BLOCKCSI_POOL"),
            ("tgtd unit with tgt's default I/O threads",
             "target-host/blockcsi-tgtd.service", "-t ${TGT_IO_THREADS} ", "", "does not pass -t ${TGT_IO_THREADS}"),
            ("TGT_IO_THREADS not a number",
             "target-host/target.env", "TGT_IO_THREADS=4", "TGT_IO_THREADS=four", "not a positive number"),
            ("chart's fencing drifts from the overlay's",
             "helm/blockcsi/values.yaml", "deadNodesAfter: 5m", "deadNodesAfter: 10m",
             "chart and kustomize disagree"),
            ("chart renders the watcher with two controllers",
             "helm/blockcsi/templates/controller.yaml", "  replicas: 1\n  {{- else }}\n",
             "  replicas: 2\n  {{- else }}\n", "elects no leader: 2 replicas"),
            ("chart forgets to refuse a taint without the watcher",
             "helm/blockcsi/templates/_helpers.tpl", "{{- if and .Values.fencing.taintFencedNodes (regexMatch",
             "{{- if and false (regexMatch", "helm bad values (taint without the watcher)"),
            ("fencing overlay no longer finds the base's replicas",
             "kubernetes/base/controller.yaml", "  replicas: 2\n", "  replicas: 3\n",
             "overlays/fencing: does not render with {every}"),
            ("unit passes a flag blockcsi-target does not have",
             "target-host/blockcsi-target.service", "--listen=", "--listen-address=", "no flag --listen-address"),
        ]
        for label, rel, old, new, needle in file_breaks:
            if not renderers and ("kustomize" in needle or "overlays/" in needle):
                skipped.append(label)
                continue
            # {every}: each renderer must report it; {legacy}: each kustomize v2/v3 must.
            if "{every}" in needle or "{legacy}" in needle:
                wanted = [r for r in renderers if "{every}" in needle or r.legacy]
                if not wanted or ("renders differ" in needle and len(renderers) < 2):
                    skipped.append(label)
                    continue
                needles = [needle.format(every=r.label, legacy=r.label) for r in wanted]
            else:
                needles = [needle]
            fresh()
            edit(rel, old, new)
            problems = Problems()
            run_checks(copy_dir, renderers, problems)
            for n in needles:
                expect(label, problems, n)

        if yamllint:
            fresh()
            with open(os.path.join(copy_dir, "kubernetes", "base", "csidriver.yaml"), "a") as f:
                f.write("extra:   value   \n")
            rc, out = run_yamllint(copy_dir, yamllint)
            if rc != 0 and "trailing-spaces" in out:
                passed += 1
            else:
                failures.append(f"yamllint did not report trailing spaces (rc={rc}): {out[:200]}")

    for f in failures:
        print(f"SELF-TEST FAIL: {f}")
    for label in skipped:
        print(f"self-test: not run (no renderer it applies to): {label}")
    print(f"self-test: {passed} passed, {len(failures)} failed, {len(skipped)} not run; renderers: "
          + ("; ".join(r.label for r in renderers) or "none"))
    return 1 if failures else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--deploy-dir", required=True)
    ap.add_argument("--kubectl", action="append", metavar="PATH",
                    help="a kubectl to render with (repeatable); default: kubectl on PATH")
    ap.add_argument("--debian-kubectl-cache", metavar="DIR", default=os.environ.get(DEBIAN_KUBECTL_ENV),
                    help="also render with Debian 12's kubectl (package kubernetes-client), "
                         "fetched with apt-get download + dpkg -x into DIR when not there yet "
                         f"(default: ${DEBIAN_KUBECTL_ENV}); if that fails, it is skipped with a message")
    ap.add_argument("--yamllint-bin", default=shutil.which("yamllint"))
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--yamllint", action="store_true", help="run yamllint on --deploy-dir only")
    mode.add_argument("--self-test", action="store_true", help="check that the checks catch breaks")
    args = ap.parse_args()
    deploy_dir = os.path.abspath(args.deploy_dir)
    flags_from = load_program_flags(deploy_dir)

    if args.yamllint:
        if not args.yamllint_bin:
            print("check_manifests: yamllint not found (apt-get install yamllint); not run", file=sys.stderr)
            return 77
        rc, out = run_yamllint(deploy_dir, args.yamllint_bin)
        if out:
            print(out)
        print(f"yamllint {deploy_dir}: {'clean' if rc == 0 else 'problems found'}")
        return 0 if rc == 0 else 1

    def log(message):
        print(f"check_manifests: {message}", file=sys.stderr, flush=True)

    renderers, missing = find_renderers(args.kubectl, shutil.which("kubectl"), args.debian_kubectl_cache, log)
    # What a requested but absent renderer does to the exit status: a machine
    # without the tools skips (77); one that has them and failed to fetch fails.
    if missing == MISSING_TOOL:
        incomplete = 77
    elif missing:
        incomplete = 1
        log(f"FAILED: the requested renderer {missing} could not be fetched (see above)")
    else:
        incomplete = 0
    if not renderers:
        log("kubectl not found: the kustomize renders are NOT checked "
            "(install kubectl with its built-in kustomize)")
    for r in renderers:
        log(f"renderer: {r.label}")

    if args.self_test:
        rc = self_test(deploy_dir, renderers, args.yamllint_bin)
        if rc != 0:
            return rc
        return 77 if not renderers else incomplete

    problems = Problems()
    checked = run_checks(deploy_dir, renderers, problems)
    for p in problems.items:
        print(f"PROBLEM: {p}")
    print(f"check_manifests: {checked} rendered sets checked with {len(renderers)} kubectl(s) "
          f"(blockcsi flags from {flags_from}), {len(problems)} problems")
    if problems.items:
        return 1
    return 77 if not renderers else incomplete


if __name__ == "__main__":
    sys.exit(main())
