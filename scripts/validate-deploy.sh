#!/usr/bin/env bash
# Validates every Kubernetes manifest under deploy/ (examples/ included) offline:
#
# * against the OpenAPI-derived JSON schemas of a pinned Kubernetes version, in strict
#   mode (an unknown field is an error), with kubernetes-validate from PyPI, which
#   bundles the schemas: nothing is fetched while validating;
# * YAML that Kubernetes would refuse or read differently: duplicate keys, documents
#   without apiVersion/kind/metadata.name, kinds the pinned version does not know;
# * references within deploy/ that no schema checks: volumeMounts and volumes,
#   ConfigMaps and ServiceAccounts named by pods, Deployment selectors and their
#   template labels, Service and PodDisruptionBudget selectors, named ports used by
#   probes and Services, (Cluster)RoleBinding roleRefs and subjects, and that
#   kustomization.yaml lists every top-level manifest (and nothing missing);
# * that YAML embedded in ConfigMaps (config.yaml: the KubeSchedulerConfiguration)
#   parses. Its fields are checked by `switchyard` itself at start.
#
# The first run creates target/validate-venv and installs the validator (needs PyPI);
# later runs take a second or two and print one line on success. Exit status 1 on any
# error, each printed as FILE: document N (KIND/NAME): PATH: message.
#
#   scripts/validate-deploy.sh            # deploy/
#   scripts/validate-deploy.sh DIR|FILE   # something else, e.g. a copy being edited
#   KUBERNETES_VERSION=1.31 scripts/validate-deploy.sh
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

VALIDATOR="kubernetes-validate==1.37.0"   # bundles schemas for Kubernetes 1.25 .. 1.37
KUBERNETES_VERSION="${KUBERNETES_VERSION:-1.33}"
VENV="$ROOT/target/validate-venv"
STAMP="$VENV/.installed"

if [[ ! -x "$VENV/bin/python3" ]] || [[ "$(cat "$STAMP" 2>/dev/null)" != "$VALIDATOR" ]]; then
    echo "validate-deploy: installing $VALIDATOR into ${VENV#"$ROOT"/} (first run)" >&2
    rm -rf "$VENV"
    python3 -m venv "$VENV"
    "$VENV/bin/python3" -m pip install --quiet --disable-pip-version-check "$VALIDATOR"
    echo "$VALIDATOR" > "$STAMP"
fi

TARGETS=("$@")
[[ ${#TARGETS[@]} -gt 0 ]] || TARGETS=(deploy)

exec "$VENV/bin/python3" - "$KUBERNETES_VERSION" "${TARGETS[@]}" <<'PY'
import functools
import os
import sys

import yaml
from kubernetes_validate.version import __version__ as VALIDATOR_VERSION
import kubernetes_validate.utils as kv

version, targets = sys.argv[1], sys.argv[2:]

# The definitions file is large and the same for every document: read it once.
kv.schema_contents = functools.lru_cache(maxsize=None)(kv.schema_contents)

errors = []


def error(where, msg):
    errors.append(f"{where}: {msg}")


class StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses duplicate keys (kubectl's strict decoding does too;
    PyYAML would silently keep the last one)."""


def construct_mapping(loader, node, deep=False):
    seen = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                "while constructing a mapping", node.start_mark,
                f"duplicate key {key!r} (first at line {seen[key] + 1})", key_node.start_mark)
        seen[key] = key_node.start_mark.line
    return yaml.SafeLoader.construct_mapping(loader, node, deep=deep)


StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, construct_mapping)

# ------------------------------------------------------------------ collect files

files, kustomizations = [], []
for t in targets:
    if os.path.isdir(t):
        for d, subdirs, names in os.walk(t):
            subdirs.sort()
            for n in sorted(names):
                p = os.path.join(d, n)
                if n in ("kustomization.yaml", "kustomization.yml", "Kustomization"):
                    kustomizations.append(p)
                elif n.endswith((".yaml", ".yml")):
                    files.append(p)
    elif os.path.isfile(t):
        files.append(t)
    else:
        error(t, "no such file or directory")

# ------------------------------------------------------------------ schemas

CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding", "Node",
                  "PersistentVolume", "StorageClass", "PriorityClass",
                  "CustomResourceDefinition", "MutatingWebhookConfiguration",
                  "ValidatingWebhookConfiguration", "APIService"}
objects = []   # (where, file, doc)
unreadable = False
for path in files:
    try:
        with open(path) as f:
            docs = list(yaml.load_all(f, Loader=StrictLoader))
    except yaml.YAMLError as e:
        error(path, f"not valid YAML: {e}")
        unreadable = True
        continue
    for i, doc in enumerate(docs, 1):
        if doc is None:
            continue
        where = f"{path}: document {i}"
        if not isinstance(doc, dict):
            error(where, "not a mapping")
            continue
        missing = [k for k in ("apiVersion", "kind") if not isinstance(doc.get(k), str)]
        name = (doc.get("metadata") or {}).get("name") if isinstance(doc.get("metadata"), dict) else None
        if not name:
            missing.append("metadata.name")
        if missing:
            error(where, "missing " + ", ".join(missing))
            continue
        where = f"{path}: document {i} ({doc['kind']}/{name})"
        if doc["kind"] == "Kustomization":
            continue
        try:
            kv.validate(doc, version, strict=True)
        except kv.ValidationError as e:
            field = ".".join(str(p) for p in e.path) or "(top level)"
            error(where, f"{field}: {e.message}")
        except kv.SchemaNotFoundError as e:
            error(where, e.message)
        except kv.VersionNotSupportedError:
            sys.exit(f"validate-deploy: kubernetes-validate {VALIDATOR_VERSION} "
                     f"has no schemas for Kubernetes {version}")
        except Exception as e:  # noqa: BLE001 (a broken schema reference, ...)
            error(where, f"could not be validated: {e}")
        objects.append((where, path, doc))

# ------------------------------------------------------------------ references
# (Skipped when a file could not be read: its objects would be reported missing.)


def ns_of(doc):
    if doc["kind"] in CLUSTER_SCOPED:
        return None
    return (doc.get("metadata") or {}).get("namespace") or "default"


def find(kind, name, ns):
    return any(d["kind"] == kind and d["metadata"]["name"] == name and ns_of(d) == ns
               for _, _, d in objects)


def matches(selector, labels):
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def label_selector_ok(sel):
    """matchLabels only (what deploy/ uses); matchExpressions are not evaluated."""
    return isinstance(sel, dict) and not sel.get("matchExpressions")


WORKLOADS = {"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job"}
pods = []  # (where, ns, labels, podspec)
for where, path, d in [] if unreadable else objects:
    kind = d["kind"]
    if kind == "Pod":
        pods.append((where, ns_of(d), d["metadata"].get("labels") or {}, d.get("spec") or {}))
    elif kind in WORKLOADS:
        tmpl = (d.get("spec") or {}).get("template") or {}
        labels = (tmpl.get("metadata") or {}).get("labels") or {}
        sel = (d.get("spec") or {}).get("selector")
        if kind != "Job" or sel:
            if not label_selector_ok(sel) or not matches(sel.get("matchLabels"), labels):
                error(where, "spec.selector.matchLabels does not match spec.template.metadata.labels")
        pods.append((where, ns_of(d), labels, tmpl.get("spec") or {}))

for where, ns, labels, spec in pods:
    volumes = {v.get("name"): v for v in spec.get("volumes") or []}
    sa = spec.get("serviceAccountName")
    if sa and sa != "default" and not find("ServiceAccount", sa, ns):
        error(where, f"serviceAccountName {sa!r}: no ServiceAccount {ns}/{sa} here")
    for vname, v in volumes.items():
        cm = (v.get("configMap") or {}).get("name")
        if cm and not (v["configMap"].get("optional")) and not find("ConfigMap", cm, ns):
            error(where, f"volume {vname!r}: no ConfigMap {ns}/{cm} here")
        if cm:
            cmdoc = next((d for _, _, d in objects if d["kind"] == "ConfigMap"
                          and d["metadata"]["name"] == cm and ns_of(d) == ns), None)
            for item in v["configMap"].get("items") or []:
                if cmdoc is not None and item.get("key") not in (cmdoc.get("data") or {}):
                    error(where, f"volume {vname!r}: ConfigMap {cm} has no key {item.get('key')!r}")
    used = set()
    names = set()
    for c in (spec.get("initContainers") or []) + (spec.get("containers") or []):
        cname = c.get("name")
        if cname in names:
            error(where, f"container name {cname!r} used twice")
        names.add(cname)
        for m in c.get("volumeMounts") or []:
            used.add(m.get("name"))
            if m.get("name") not in volumes:
                error(where, f"container {cname!r}: volumeMount {m.get('name')!r} has no volume")
        ports = {p.get("name") for p in c.get("ports") or [] if p.get("name")}
        for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
            pr = c.get(probe) or {}
            for h in ("httpGet", "tcpSocket", "grpc"):
                port = (pr.get(h) or {}).get("port")
                if isinstance(port, str) and port not in ports:
                    error(where, f"container {cname!r}: {probe}.{h}.port {port!r} is no named port of it")
    for vname in volumes:
        if vname not in used:
            error(where, f"volume {vname!r} is mounted by no container")


def pod_ports(ns, selector):
    found, ports = False, set()
    for _, pns, labels, spec in pods:
        if pns == ns and matches(selector, labels):
            found = True
            for c in spec.get("containers") or []:
                ports |= {p.get("name") for p in c.get("ports") or [] if p.get("name")}
    return found, ports


for where, path, d in [] if unreadable else objects:
    kind, ns, spec = d["kind"], ns_of(d), d.get("spec") or {}
    if kind == "Service" and spec.get("selector"):
        found, ports = pod_ports(ns, spec["selector"])
        if not found:
            error(where, "spec.selector matches no pod template here")
        for p in spec.get("ports") or []:
            tp = p.get("targetPort")
            if found and isinstance(tp, str) and tp not in ports:
                error(where, f"port {p.get('name')!r}: targetPort {tp!r} is no named port of the selected pods")
    elif kind == "PodDisruptionBudget":
        sel = spec.get("selector")
        if not label_selector_ok(sel) or not pod_ports(ns, sel.get("matchLabels"))[0]:
            error(where, "spec.selector matches no pod template here")
    elif kind in ("RoleBinding", "ClusterRoleBinding"):
        ref = d.get("roleRef") or {}
        rkind, rname = ref.get("kind"), ref.get("name", "")
        if not rname.startswith("system:") and not find(rkind, rname, ns if rkind == "Role" else None):
            error(where, f"roleRef {rkind}/{rname} is not defined here")
        for s in d.get("subjects") or []:
            if s.get("kind") == "ServiceAccount":
                sns = s.get("namespace") or ns
                if not find("ServiceAccount", s.get("name"), sns):
                    error(where, f"subject ServiceAccount {sns}/{s.get('name')} is not defined here")
    elif kind == "ConfigMap":
        for key, value in (d.get("data") or {}).items():
            if key.endswith((".yaml", ".yml")):
                try:
                    list(yaml.load_all(value, Loader=StrictLoader))
                except yaml.YAMLError as e:
                    error(where, f"data.{key}: not valid YAML: {e}")

# ------------------------------------------------------------------ kustomization

for k in kustomizations:
    base = os.path.dirname(k)
    try:
        with open(k) as f:
            kz = yaml.load(f, Loader=StrictLoader) or {}
    except yaml.YAMLError as e:
        error(k, f"not valid YAML: {e}")
        continue
    listed = set()
    for r in kz.get("resources") or []:
        p = os.path.normpath(os.path.join(base, r))
        listed.add(p)
        if not os.path.exists(p):
            error(k, f"resources: {r!r} does not exist")
    knamespace = kz.get("namespace")
    for p in sorted({os.path.normpath(f) for f in files} - listed):
        if os.path.dirname(p) == os.path.normpath(base):   # not examples/, docker/
            error(k, f"{os.path.relpath(p, base)} is not listed in resources")
    for where, path, d in objects:
        p = os.path.normpath(path)
        if p in listed and knamespace and d["kind"] not in CLUSTER_SCOPED and \
                (d["metadata"].get("namespace") or knamespace) != knamespace:
            error(where, f"metadata.namespace is not {knamespace} (kustomization namespace)")

if errors:
    for e in errors:
        print(e, file=sys.stderr)
    print(f"validate-deploy: {len(errors)} error(s) in {len(files)} file(s)", file=sys.stderr)
    sys.exit(1)
print(f"validate-deploy: {len(objects)} objects in {len(files)} files valid "
      f"(Kubernetes {version}, strict; kubernetes-validate {VALIDATOR_VERSION})")
PY
