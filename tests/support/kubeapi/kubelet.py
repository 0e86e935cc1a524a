"""Controllers and a kubelet stand-in: what makes the test server's cluster move.

`reconcile(store)` runs under the store lock before a read when something was written
(and from a background thread), so that a client reading right after a write already
sees the settled state. It is incremental: when only nodes were written since the last
run, the per-node controllers (node lifecycle, GPU advertisement) look at those nodes
only, so labelling thousands of nodes one write at a time stays O(1) per write; a write
to any other resource makes the next run look at every node.

* DaemonSet controller: one pod per node the template selects and tolerates; status.
* Device plugin: a node annotated `kubegpu.io/simulated-gpus: "<n>"` that runs a ready
  device plugin pod advertises what the real plugin would under the config its config label picks:
  `nvidia.com/gpu` (or `nvidia.com/gpu.shared` with renameByDefault) = n x replicas, and with the MIG
  layout of its fake NVML (`kubegpu.io/simulated-nvml`: profile and MIG state file, as a real plugin reads NVML) or
  of `kubegpu.io/simulated-mig-devices` the MIG strategy's resources (`single`: the MIG devices
  as `nvidia.com/gpu`, `mixed`: `nvidia.com/mig-<profile>`); a config the plugin refuses leaves the
  plugin pod not ready and the node without GPUs.
* Scheduler and kubelet: pods are placed (nodeSelector, node affinity, taints,
  unschedulable, GPU allocatable) and run to Succeeded (restartPolicy Never/OnFailure) or
  Running; GPU pods log `Test PASSED`; pods that fit nowhere stay Pending/Unschedulable.
* Job, Deployment, PodDisruptionBudget and ResourceQuota status (pods' nvidia.com/ requests; ResourceClaims'
  devices per class and their count, as pkg/quota/v1/evaluator/core/resource_claims.go counts them).
"""

import hashlib
import json

import yaml

from . import dra, labelsel as selectors
from .errors import ApiError
from .resources import BY_PATH
from .store import SIMULATED_GPUS, clone, now, random_suffix

NODES = BY_PATH[("", "v1", "nodes")]
PODS = BY_PATH[("", "v1", "pods")]
CONFIGMAPS = BY_PATH[("", "v1", "configmaps")]
DAEMONSETS = BY_PATH[("apps", "v1", "daemonsets")]
DEPLOYMENTS = BY_PATH[("apps", "v1", "deployments")]
JOBS = BY_PATH[("batch", "v1", "jobs")]
PDBS = BY_PATH[("policy", "v1", "poddisruptionbudgets")]
QUOTAS = BY_PATH[("", "v1", "resourcequotas")]

GPU = "nvidia.com/gpu"
# JSON list, one entry per simulated GPU: null (MIG off) or the profiles of its MIG devices (MIG on)
SIMULATED_MIG = "kubegpu.io/simulated-mig-devices"
# JSON {"config": <fake NVML profile>, "state": <its MIG state file>}: the MIG layout is what that fake NVML holds
SIMULATED_NVML = "kubegpu.io/simulated-nvml"
LOG_ANNOTATION = "kubegpu.io/simulated-log"
EXIT_ANNOTATION = "kubegpu.io/simulated-exit-code"
DEVICE_PLUGIN_DIR = "/var/lib/kubelet/device-plugins"
VECTOR_ADD_LOG = (
    "[Vector addition of 50000 elements]\n"
    "Copy input data from the host memory to the CUDA device\n"
    "CUDA kernel launch with 196 blocks of 256 threads\n"
    "Copy output data from the CUDA device to the host memory\n"
    "Test PASSED\n"
    "Done\n")

DAEMONSET_TOLERATIONS = [
    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"},
    {"key": "node.kubernetes.io/disk-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/memory-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/pid-pressure", "operator": "Exists", "effect": "NoSchedule"},
    {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"},
]


# ------------------------------------------------------------------ matching
def tolerates(tolerations, taint):
    for tol in tolerations or []:
        if tol.get("effect") and tol["effect"] != taint.get("effect"):
            continue
        op = tol.get("operator") or "Equal"
        if not tol.get("key") and op == "Exists":
            return True
        if tol.get("key") != taint.get("key"):
            continue
        if op == "Exists" or (tol.get("value") or "") == (taint.get("value") or ""):
            return True
    return False


def untolerated_taint(tolerations, node):
    for taint in (node.get("spec") or {}).get("taints") or []:
        if taint.get("effect") in ("NoSchedule", "NoExecute") and not tolerates(tolerations, taint):
            return taint
    return None


def _expr_matches(expr, labels):
    key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
    present = key in labels
    if op == "In":
        return present and labels[key] in values
    if op == "NotIn":
        return not present or labels[key] not in values
    if op == "Exists":
        return present
    if op == "DoesNotExist":
        return not present
    if op in ("Gt", "Lt") and present and values:
        try:
            a, b = int(labels[key]), int(values[0])
        except ValueError:
            return False
        return a > b if op == "Gt" else a < b
    return False


def node_selected(pod_spec, node):
    meta = node["metadata"]
    labels = meta.get("labels") or {}
    for key, value in (pod_spec.get("nodeSelector") or {}).items():
        if labels.get(key) != value:
            return False
    required = (((pod_spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution") or {})
    terms = required.get("nodeSelectorTerms")
    if terms:
        fields = {"metadata.name": meta["name"]}
        ok = False
        for term in terms:
            exprs = term.get("matchExpressions") or []
            fexprs = term.get("matchFields") or []
            if not exprs and not fexprs:
                continue
            if all(_expr_matches(e, labels) for e in exprs) and all(_expr_matches(e, fields) for e in fexprs):
                ok = True
                break
        if not ok:
            return False
    return True


def gpu_request(pod_spec, name=GPU):
    total = 0
    for ctr in pod_spec.get("containers") or []:
        limits = (ctr.get("resources") or {}).get("limits") or {}
        if name in limits:
            try:
                total += int(str(limits[name]))
            except ValueError:
                pass
    return total


def extended_requests(pod_spec):
    out = {}
    for ctr in pod_spec.get("containers") or []:
        for key, value in ((ctr.get("resources") or {}).get("limits") or {}).items():
            if key.startswith("nvidia.com/"):
                try:
                    out[key] = out.get(key, 0) + int(str(value))
                except ValueError:
                    pass
    return out


# ------------------------------------------------------------------ device plugin
def is_device_plugin(ds):
    spec = ((ds.get("spec") or {}).get("template") or {}).get("spec") or {}
    for vol in spec.get("volumes") or []:
        if ((vol.get("hostPath") or {}).get("path") or "").rstrip("/").startswith(DEVICE_PLUGIN_DIR):
            return True
    return any("device-plugin" in (c.get("image") or "") for c in spec.get("containers") or [])


def _env(pod_spec, name):
    for ctr in (pod_spec.get("initContainers") or []) + (pod_spec.get("containers") or []):
        for env in ctr.get("env") or []:
            if env.get("name") == name and env.get("value") is not None:
                return env["value"]
    return None


def plugin_config(store, ds, node):
    """The device plugin config file the plugin on `node` runs with ({} for none), or None when it cannot start.

    The config is chosen as the chart's config-manager does: the node label named by env NODE_LABEL, else env
    DEFAULT_CONFIG, else the only key of the configMap volume.
    """
    namespace = ds["metadata"]["namespace"]
    pod_spec = ds["spec"]["template"]["spec"]
    configs = {}
    for vol in pod_spec.get("volumes") or []:
        cm_ref = vol.get("configMap")
        if cm_ref and cm_ref.get("name"):
            cm = store.find(CONFIGMAPS, namespace, cm_ref["name"])
            if cm is None:
                if not cm_ref.get("optional"):
                    return None
                continue
            configs.update(cm.get("data") or {})
    if not configs:
        return {}
    label_key = _env(pod_spec, "NODE_LABEL")
    default = _env(pod_spec, "DEFAULT_CONFIG")
    name = None
    if label_key:
        name = ((node["metadata"].get("labels") or {}).get(label_key)) or None
    if name is None:
        name = default
    if name is None:
        if len(configs) == 1:
            name = next(iter(configs))
        else:
            return {}
    if name not in configs:
        return None
    try:
        config = yaml.safe_load(configs[name]) or {}
    except yaml.YAMLError:
        return None
    if not isinstance(config, dict) or config.get("version") not in ("v1", None):
        return None
    return config


def _sharing(config):
    """(strategy, {resource: advertised name}, {resource: replicas}) of a config, or None when it does not parse.

    As api/config/v1: sharing.mps wins over sharing.timeSlicing when present; a present block needs resources,
    each with a name and replicas >= 2 (replicas.go); the plugin ignores per-entry `rename` and with
    renameByDefault advertises `<name>.shared` (config.go DisableResourceNamingInConfig).
    """
    sharing = config.get("sharing") or {}
    if not isinstance(sharing, dict):
        return None
    strategy, block = "none", None
    if sharing.get("mps") is not None:
        strategy, block = "mps", sharing["mps"]
    elif sharing.get("timeSlicing") is not None:
        strategy, block = "time-slicing", sharing["timeSlicing"]
    names, replicas = {}, {}
    if block is None:
        return strategy, names, replicas
    if not isinstance(block, dict) or not block.get("resources"):
        return None  # "no resources specified"
    for entry in block["resources"]:
        if not isinstance(entry, dict) or not entry.get("name") or "replicas" not in entry:
            return None
        try:
            count = int(entry["replicas"])
        except (TypeError, ValueError):
            return None
        if count < 2:
            return None  # "number of replicas must be >= 2"
        names[entry["name"]] = entry["name"] + ".shared" if block.get("renameByDefault") else entry["name"]
        replicas[entry["name"]] = count
    return strategy, names, replicas


def _mig_parts(profile):
    """(gpu slices, compute slices) of a MIG profile such as 3g.20gb, 1c.3g.20gb or 1g.10gb+me; None if unknown."""
    head = str(profile).split("+", maxsplit=1)[0].split("-", maxsplit=1)[0].split(".")
    try:
        if head[0].endswith("c"):
            return int(head[1][:-1]), int(head[0][:-1])
        return int(head[0][:-1]), int(head[0][:-1])
    except (IndexError, ValueError):
        return None


def plugin_resources(config, gpus, layout):
    """{resource: count} the device plugin advertises with `config` on a node with `gpus` GPUs, or None.

    `layout`: one entry per GPU, None for MIG off or the list of its MIG devices' profiles (MIG on). None
    when the plugin cannot start: a config that does not parse, MPS with MIG strategy mixed or on MIG-enabled
    GPUs, an invalid MIG layout for strategy single, or under mixed a MIG device whose profile has fewer
    compute than GPU slices (internal/rm/device_map.go, rm.go AddDefaultResourcesToConfig).
    """
    flags = config.get("flags") or {}
    strategy = flags.get("migStrategy") or "none"
    sharing = _sharing(config)
    if sharing is None or strategy not in ("none", "single", "mixed"):
        return None
    sharing_strategy, names, replicas = sharing
    enabled = [one for one in layout if one is not None]
    if sharing_strategy == "mps" and (strategy == "mixed" or enabled):
        return None
    base = {}
    if strategy == "none" or not enabled:
        base[GPU] = gpus
    elif strategy == "single":
        if any(not one for one in enabled) or len(enabled) != gpus:
            return None
        profiles = set(profile for one in enabled for profile in one)
        if len(profiles) != 1:
            return None
        base[GPU] = sum(len(one) for one in enabled)
    else:
        base[GPU] = gpus - len(enabled)
        for one in enabled:
            for profile in one:
                parts = _mig_parts(profile)
                if parts is None or parts[0] != parts[1]:
                    return None
                name = "nvidia.com/mig-" + profile.replace("+", ".")
                base[name] = base.get(name, 0) + 1
    advertised = {}
    for name, count in base.items():
        if name in replicas:
            name, count = names[name], count * replicas[name]
        if count:
            advertised[name] = count
    return advertised


def _nvml_names(pci_device_id):
    """{NVML profile info id: profile name} of a GPU model (tests/support/mig_profiles.py), {} for another."""
    import mig_profiles  # pylint: disable=import-outside-toplevel

    for spec in mig_profiles.MODELS.values():
        if spec["pci_device_id"] == pci_device_id:
            return dict((item["id"], name) for name, item in spec["profiles"].items())
    return {}


def _nvml_state(node):
    """(fake NVML profile, lines of its MIG state file or None before the fake wrote one) of the node's annotation
    kubegpu.io/simulated-nvml (the JSON ``{"config": profile, "state": state file}`` of tests/support/fakenvml);
    None without the annotation or when the profile cannot be read."""
    raw = (node["metadata"].get("annotations") or {}).get(SIMULATED_NVML)
    if raw is None:
        return None
    try:
        paths = json.loads(raw)
        from fakenvml.profile import load_profile  # pylint: disable=import-outside-toplevel

        profile = load_profile(paths["config"])
    except (ValueError, KeyError, TypeError, OSError):
        return None
    try:
        with open(paths.get("state") or "", encoding="utf-8") as handle:
            lines = handle.read().splitlines()
    except (OSError, TypeError):
        lines = None
    return profile, lines


def _state_records(lines, gpu_count):
    """The state file's MIG-enabled GPUs and their instances (fakenvml.c mig_save): {gpu: [[gi id, profile id,
    start, size, [compute slices per compute instance]], ...]} in the file's order."""
    enabled = {}
    for line in lines:
        key, _sep, value = line.partition(" = ")
        fields = value.split()
        if key == "mode" and len(fields) == 4 and int(fields[0]) < gpu_count and fields[2] == "1":
            enabled[int(fields[0])] = []
        elif key == "gi" and len(fields) == 5 and int(fields[0]) in enabled:
            enabled[int(fields[0])].append([int(field) for field in fields[1:]] + [[]])
        elif key == "ci" and len(fields) == 4 and int(fields[0]) in enabled:
            for record in enabled[int(fields[0])]:
                if record[0] == int(fields[1]):
                    record[4].append(int(fields[3]))
    return enabled


def nvml_layout(node, gpus):
    """The node's MIG layout as its fake NVML holds it (annotation kubegpu.io/simulated-nvml: the JSON
    ``{"config": profile, "state": state file}`` of tests/support/fakenvml), as the device plugin reads it from NVML
    on a real node: a GPU with MIG mode on (current, not pending) has the MIG devices of its GPU instances (the
    state file's ``mode`` and ``gi`` lines, fakenvml.c mig_save); before the fake has written a state, the profile's
    ``mig_mode`` and ``mig_devices``. None without the annotation or when the files cannot be read."""
    state = _nvml_state(node)
    if state is None:
        return None
    profile, lines = state
    layout = [list(g.get("mig_devices") or []) if g.get("mig_mode") else None for g in profile["gpus"]]
    if lines is not None:
        layout = [None] * len(profile["gpus"])
        for index, records in _state_records(lines, len(layout)).items():
            names = _nvml_names(profile["gpus"][index]["pci_device_id"])
            layout[index] = [names[record[1]] for record in records if record[1] in names]
    layout = layout[:gpus]
    return layout + [None] * (gpus - len(layout))


def _model(pci_device_id=None, product=None):
    """The entry of tests/support/mig_profiles.py MODELS for a GPU, by PCI device id or product name; None."""
    import mig_profiles  # pylint: disable=import-outside-toplevel

    for spec in mig_profiles.MODELS.values():
        if spec["pci_device_id"] == pci_device_id or (product and spec["name"] == product):
            return spec
    return None


def _instance(model, gi_name, profile_id, start, size, compute):
    table = model["profiles"][gi_name]
    name = gi_name if compute in (None, table["slices"]) else "%dc.%s" % (compute, gi_name)
    return {"profile": name, "gi_profile": gi_name, "profile_id": profile_id, "start": start, "size": size,
            "slices": table["slices"], "memory_mib": table["memory_mib"]}


def _seeded(model, profiles):
    """The instances the fake NVML seeds from a profile's ``mig_devices`` (fakenvml.c mig_seed): each in the listed
    order at the first free placement of its GPU-instance profile; None when the model's table cannot hold them."""
    used, out = set(), []
    for profile in profiles:
        head, _sep, rest = str(profile).partition("c.")
        compute, gi_name = (int(head), rest) if rest and head.isdigit() else (None, str(profile))
        table = (model or {}).get("profiles", {}).get(gi_name)
        if table is None:
            return None
        for start, size in table["placements"]:
            if not used & set(range(start, start + size)):
                used |= set(range(start, start + size))
                out.append(_instance(model, gi_name, table["id"], start, size, compute))
                break
        else:
            return None
    return out


def mig_instances(node, gpus):
    """The node's MIG devices as NVML enumerates them (what the DRA kubelet plugin reads): one entry per GPU of
    ``gpus`` (node_gpus), None for MIG off or the list of its MIG devices in NVML's index order (the fake's: GPU
    instances by id, one device per compute instance), each ``{profile, gi_profile, profile_id, start, size,
    slices, memory_mib}`` (GPU-instance profile id, placement and memory of tests/support/mig_profiles.py). From the
    fake NVML's state (kubegpu.io/simulated-nvml), else from kubegpu.io/simulated-mig-devices placed as the fake
    seeds them. A GPU whose model or profiles the tables do not know has no MIG devices listed ([])."""
    state = _nvml_state(node)
    if state is not None and state[1] is not None:
        profile, lines = state
        out = [None] * len(gpus)
        for index, records in _state_records(lines, len(profile["gpus"])).items():
            if index >= len(gpus):
                continue
            model = _model(pci_device_id=profile["gpus"][index]["pci_device_id"])
            names = _nvml_names(profile["gpus"][index]["pci_device_id"])
            out[index] = [_instance(model, names[profile_id], profile_id, start, size, compute)
                          for _gi, profile_id, start, size, computes in sorted(records, key=lambda r: r[0])
                          if profile_id in names for compute in computes]
        return out
    layout = node_layout(node, len(gpus))
    out = []
    for gpu, profiles, index in zip(gpus, layout, range(len(gpus))):
        if profiles is None:
            out.append(None)
            continue
        pci = state[0]["gpus"][index].get("pci_device_id") if state is not None and index < len(state[0]["gpus"]) else None
        out.append(_seeded(_model(pci_device_id=pci, product=gpu.get("productName")), profiles) or [])
    return out


def mig_multiprocessors_per_slice(node, index):
    """Streaming multiprocessors per GPU-instance slice of the node's GPU ``index``: its fake NVML profile's
    ``mig_multiprocessors_per_slice``, else 14 (the fake's default, an A100's)."""
    state = _nvml_state(node)
    gpus = state[0]["gpus"] if state is not None else []
    return int(gpus[index].get("mig_multiprocessors_per_slice") or 14) if index < len(gpus) else 14


def node_layout(node, gpus):
    """The node's MIG layout: from its fake NVML (``nvml_layout``, annotation kubegpu.io/simulated-nvml) when
    annotated so, else from the annotation kubegpu.io/simulated-mig-devices (all MIG off without either)."""
    from_nvml = nvml_layout(node, gpus)
    if from_nvml is not None:
        return from_nvml
    raw = (node["metadata"].get("annotations") or {}).get(SIMULATED_MIG)
    if raw is None:
        return [None] * gpus
    try:
        layout = json.loads(raw)
    except ValueError:
        return [None] * gpus
    if not isinstance(layout, list):
        return [None] * gpus
    layout = [one if isinstance(one, list) else None for one in layout[:gpus]]
    return layout + [None] * (gpus - len(layout))


# ------------------------------------------------------------------ controllers
def _template_hash(template):
    return hashlib.sha256(json.dumps(template, sort_keys=True).encode()).hexdigest()[:10]


def _owner_ref(obj):
    return {"apiVersion": obj["apiVersion"], "kind": obj["kind"], "name": obj["metadata"]["name"],
            "uid": obj["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}


def _owned_pods(store, owner):
    uid = owner["metadata"]["uid"]
    return [p for p in store.all(PODS, owner["metadata"]["namespace"])
            if any(r.get("uid") == uid for r in p["metadata"].get("ownerReferences") or [])]


def _new_pod(store, owner, template, name, node_name=None, extra_labels=None):
    """Create a controller's pod from its template (None when admission refuses it)."""
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": clone(template.get("metadata") or {}),
           "spec": clone(template.get("spec") or {})}
    meta = pod["metadata"]
    meta["name"] = name
    meta["namespace"] = owner["metadata"]["namespace"]
    meta.setdefault("labels", {}).update(extra_labels or {})
    meta["ownerReferences"] = [_owner_ref(owner)]
    if node_name:
        pod["spec"]["nodeName"] = node_name
        tolerations = pod["spec"].setdefault("tolerations", [])
        for tol in DAEMONSET_TOLERATIONS:
            if not any(t.get("key") == tol["key"] and t.get("effect") == tol["effect"] for t in tolerations):
                tolerations.append(dict(tol))
    try:
        return store.create(PODS, meta["namespace"], pod)
    except ApiError:
        return None


def daemonset_nodes(ds, nodes):
    spec = ds["spec"]["template"]["spec"]
    tolerations = list(spec.get("tolerations") or []) + DAEMONSET_TOLERATIONS
    return [n for n in nodes if node_selected(spec, n) and untolerated_taint(tolerations, n) is None]


def reconcile_daemonsets(store, nodes):
    for ds in store.all(DAEMONSETS):
        if ds["metadata"].get("deletionTimestamp"):
            continue
        template = ds["spec"]["template"]
        revision = _template_hash(template)
        wanted = {n["metadata"]["name"]: n for n in daemonset_nodes(ds, nodes)}
        pods = _owned_pods(store, ds)
        by_node = {}
        for pod in pods:
            node = pod["spec"].get("nodeName")
            stale = (pod["metadata"].get("labels") or {}).get("controller-revision-hash") != revision
            if node not in wanted or node in by_node or stale:
                store.delete(PODS, pod["metadata"]["namespace"], pod["metadata"]["name"], internal=True)
            else:
                by_node[node] = pod
        for node_name in wanted:
            if node_name not in by_node:
                _new_pod(
                    store, ds, template, "%s-%s" % (ds["metadata"]["name"], random_suffix()), node_name,
                    {"controller-revision-hash": revision, "pod-template-generation":
                     str(ds["metadata"].get("generation", 1))})


def daemonset_status(store, nodes):
    for ds in store.all(DAEMONSETS):
        wanted = daemonset_nodes(ds, nodes)
        revision = _template_hash(ds["spec"]["template"])
        pods = [p for p in _owned_pods(store, ds) if p["spec"].get("nodeName")]
        ready = [p for p in pods if _pod_ready(p)]
        updated = [p for p in pods if (p["metadata"].get("labels") or {}).get("controller-revision-hash") == revision]
        status = {"currentNumberScheduled": len(pods), "desiredNumberScheduled": len(wanted),
                  "numberMisscheduled": 0, "numberReady": len(ready),
                  "observedGeneration": ds["metadata"].get("generation", 1)}
        if updated:
            status["updatedNumberScheduled"] = len(updated)
        if ready:
            status["numberAvailable"] = len(ready)
        if len(wanted) - len(ready) > 0:
            status["numberUnavailable"] = len(wanted) - len(ready)
        if ds.get("status") != status:
            new = clone(ds)
            new["status"] = status
            store.put_internal(DAEMONSETS, new)


def _pod_ready(pod):
    for cond in (pod.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return cond.get("status") == "True"
    return False


def reconcile_jobs(store):
    for job in store.all(JOBS):
        if job["spec"].get("suspend"):
            continue
        pods = _owned_pods(store, job)
        if not pods and not (job.get("status") or {}).get("succeeded") and not (job.get("status") or {}).get("failed"):
            labels = {"batch.kubernetes.io/job-name": job["metadata"]["name"], "job-name": job["metadata"]["name"]}
            _new_pod(store, job, job["spec"]["template"],
                     "%s-%s" % (job["metadata"]["name"], random_suffix()), None, labels)


def job_status(store):
    for job in store.all(JOBS):
        pods = _owned_pods(store, job)
        old = job.get("status") or {}
        status = {k: v for k, v in old.items() if k in ("startTime", "completionTime", "conditions")}
        active = sum(1 for p in pods if p["status"].get("phase") in ("Pending", "Running"))
        succeeded = sum(1 for p in pods if p["status"].get("phase") == "Succeeded") or old.get("succeeded", 0)
        failed = sum(1 for p in pods if p["status"].get("phase") == "Failed") or old.get("failed", 0)
        status.setdefault("startTime", job["metadata"]["creationTimestamp"])
        if active:
            status["active"] = active
        if succeeded:
            status["succeeded"] = succeeded
        if failed:
            status["failed"] = failed
        status["ready"] = sum(1 for p in pods if _pod_ready(p))
        status["terminating"] = 0
        status["uncountedTerminatedPods"] = {}
        ts = now()
        if succeeded >= job["spec"].get("completions", 1) and "conditions" not in status:
            status["completionTime"] = ts
            status["conditions"] = [
                {"type": "SuccessCriteriaMet", "status": "True", "lastProbeTime": ts, "lastTransitionTime": ts},
                {"type": "Complete", "status": "True", "lastProbeTime": ts, "lastTransitionTime": ts}]
        elif failed and failed > job["spec"].get("backoffLimit", 6) and "conditions" not in status:
            status["conditions"] = [
                {"type": "FailureTarget", "status": "True", "reason": "BackoffLimitExceeded",
                 "message": "Job has reached the specified backoff limit", "lastProbeTime": ts,
                 "lastTransitionTime": ts},
                {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
                 "message": "Job has reached the specified backoff limit", "lastProbeTime": ts,
                 "lastTransitionTime": ts}]
        if job.get("status") != status:
            new = clone(job)
            new["status"] = status
            store.put_internal(JOBS, new)


def deployment_status(store):
    for dep in store.all(DEPLOYMENTS):
        replicas = dep["spec"].get("replicas", 1)
        status = {"observedGeneration": dep["metadata"].get("generation", 1)}
        if replicas:
            status.update({"replicas": replicas, "updatedReplicas": replicas, "readyReplicas": replicas,
                           "availableReplicas": replicas})
        old = dep.get("status") or {}
        status["conditions"] = old.get("conditions") or [
            {"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable",
             "message": "Deployment has minimum availability.", "lastUpdateTime": now(),
             "lastTransitionTime": now()}]
        if old != status:
            new = clone(dep)
            new["status"] = status
            store.put_internal(DEPLOYMENTS, new)


# ------------------------------------------------------------------ nodes and pods
def node_gpu_resources(store, nodes):
    """Advertise GPUs on simulated nodes where a ready device plugin pod runs."""
    plugins = [ds for ds in store.all(DAEMONSETS) if is_device_plugin(ds)]
    for node in nodes:
        meta = node["metadata"]
        annotated = SIMULATED_GPUS in (meta.get("annotations") or {})
        status = node.get("status") or {}
        if not annotated:
            continue  # not a simulated GPU node: its status stays as its creator wrote it
        advertised = {}
        if annotated:
            try:
                count = int(meta["annotations"][SIMULATED_GPUS])
            except ValueError:
                count = 0
            for ds in plugins:
                if not any(p["spec"].get("nodeName") == meta["name"] for p in _owned_pods(store, ds)):
                    continue
                config = plugin_config(store, ds, node)
                resources = None if config is None else plugin_resources(config, count, node_layout(node, count))
                for name, number in (resources or {}).items():
                    advertised[name] = str(number)
        current = {k: v for k, v in (status.get("allocatable") or {}).items() if k.startswith("nvidia.com/")}
        current_cap = {k: v for k, v in (status.get("capacity") or {}).items() if k.startswith("nvidia.com/")}
        if current == advertised and current_cap == advertised:
            continue
        new = clone(node)
        new_status = new.setdefault("status", {})
        for key in ("capacity", "allocatable"):
            block = {k: v for k, v in (new_status.get(key) or {}).items() if not k.startswith("nvidia.com/")}
            block.update(advertised)
            new_status[key] = block
        store.put_internal(NODES, new)


def _plugin_pod_ready(store, pod, nodes_by_name):
    owner = next((r for r in pod["metadata"].get("ownerReferences") or [] if r.get("kind") == "DaemonSet"), None)
    if owner is None:
        return True
    ds = store.find(DAEMONSETS, pod["metadata"]["namespace"], owner["name"])
    if ds is None or not is_device_plugin(ds):
        return True
    node = nodes_by_name.get(pod["spec"].get("nodeName"))
    if node is None:
        return False
    config = plugin_config(store, ds, node)
    if config is None:
        return False
    try:
        count = int((node["metadata"].get("annotations") or {}).get(SIMULATED_GPUS, "0"))
    except ValueError:
        count = 0
    return plugin_resources(config, count, node_layout(node, count)) is not None


def _used(store, node_name, resource):
    used = 0
    for pod in store.all(PODS):
        if pod["spec"].get("nodeName") == node_name and pod["status"].get("phase") in ("Pending", "Running"):
            used += extended_requests(pod["spec"]).get(resource, 0)
    return used


def _allocatable(node, resource):
    try:
        return int(((node.get("status") or {}).get("allocatable") or {}).get(resource, 0))
    except ValueError:
        return 0


def _internal_ip(node):
    for addr in (node.get("status") or {}).get("addresses") or []:
        if addr.get("type") == "InternalIP":
            return addr.get("address")
    return None


def _fits(store, pod, node):
    """None when the pod fits on the node, else a short scheduler reason."""
    spec = pod["spec"]
    if not node_selected(spec, node):
        return "didn't match Pod's node affinity/selector"
    if (node.get("spec") or {}).get("unschedulable") and not tolerates(
            spec.get("tolerations"), {"key": UNSCHEDULABLE_TAINT, "effect": "NoSchedule"}):
        return "were unschedulable"
    taint = untolerated_taint(spec.get("tolerations"), node)
    if taint is not None:
        return "had untolerated taint {%s: %s}" % (taint.get("key"), taint.get("value") or "")
    for resource, want in extended_requests(spec).items():
        if _allocatable(node, resource) - _used(store, node["metadata"]["name"], resource) < want:
            return "Insufficient " + resource
    return None


def _set_condition(conditions, ctype, status, reason=None, message=None, ts=None):
    cond = {"type": ctype, "status": status, "lastProbeTime": None, "lastTransitionTime": ts or now()}
    if reason:
        cond["reason"] = reason
    if message:
        cond["message"] = message
    for i, cur in enumerate(conditions):
        if cur.get("type") == ctype:
            if cur.get("status") == status and cur.get("reason") == reason and cur.get("message") == message:
                return
            conditions[i] = cond
            return
    conditions.append(cond)


def _start(store, pod, node, ready_plugin=True):
    ts = now()
    spec = pod["spec"]
    annotations = pod["metadata"].get("annotations") or {}
    try:
        exit_code = int(annotations.get(EXIT_ANNOTATION, "0"))
    except ValueError:
        exit_code = 1
    restart = spec.get("restartPolicy", "Always")
    terminates = restart in ("Never", "OnFailure") and ready_plugin
    status = pod["status"]
    status["hostIP"] = _internal_ip(node) or "10.0.0.1"
    status["hostIPs"] = [{"ip": status["hostIP"]}]
    status["podIP"] = status["hostIP"] if spec.get("hostNetwork") else \
        "10.244.%d.%d" % (store.rv % 250 + 1, len(pod["metadata"]["name"]) % 250 + 2)
    status["podIPs"] = [{"ip": status["podIP"]}]
    status["startTime"] = ts
    conditions = status.setdefault("conditions", [])
    _set_condition(conditions, "PodReadyToStartContainers", "True", ts=ts)
    _set_condition(conditions, "Initialized", "True", ts=ts)
    container_statuses = []
    for ctr in spec.get("containers") or []:
        cstat = {"name": ctr["name"], "image": ctr.get("image"), "imageID": "",
                 "containerID": "containerd://" + hashlib.sha256(
                     (pod["metadata"]["uid"] + ctr["name"]).encode()).hexdigest(),
                 "restartCount": 0, "lastState": {}}
        if terminates:
            cstat["state"] = {"terminated": {
                "exitCode": exit_code, "reason": "Completed" if exit_code == 0 else "Error",
                "startedAt": ts, "finishedAt": ts, "containerID": cstat["containerID"]}}
            cstat["ready"] = False
            cstat["started"] = False
        elif ready_plugin:
            cstat["state"] = {"running": {"startedAt": ts}}
            cstat["ready"] = True
            cstat["started"] = True
        else:
            cstat["state"] = {"waiting": {"reason": "CrashLoopBackOff",
                                          "message": "back-off restarting failed container"}}
            cstat["ready"] = False
            cstat["started"] = False
            cstat["restartCount"] = 1
        container_statuses.append(cstat)
    status["containerStatuses"] = container_statuses
    if terminates:
        status["phase"] = "Succeeded" if exit_code == 0 else "Failed"
        _set_condition(conditions, "PodReadyToStartContainers", "False", ts=ts)
        _set_condition(conditions, "Ready", "False", "PodCompleted", ts=ts)
        _set_condition(conditions, "ContainersReady", "False", "PodCompleted", ts=ts)
    else:
        status["phase"] = "Running"
        flag = "True" if ready_plugin else "False"
        reason = None if ready_plugin else "ContainersNotReady"
        _set_condition(conditions, "Ready", flag, reason, ts=ts)
        _set_condition(conditions, "ContainersReady", flag, reason, ts=ts)
    key = (pod["metadata"]["namespace"], pod["metadata"]["name"])
    if LOG_ANNOTATION in annotations:
        store.logs[key] = annotations[LOG_ANNOTATION]
    elif extended_requests(spec) or spec.get("resourceClaims"):
        store.logs[key] = VECTOR_ADD_LOG if exit_code == 0 else "Failed to allocate device vector A (error code no CUDA-capable device is detected)!\n"
    else:
        store.logs[key] = ""


def _reject(pod, reason, message):
    status = pod["status"]
    status["phase"] = "Failed"
    status["reason"] = reason
    status["message"] = message
    status["startTime"] = now()


def schedule_pods(store, nodes):
    nodes_by_name = None
    dra_cluster = []  # built once, when the first pod with resource claims waits
    for pod in sorted(store.all(PODS), key=lambda p: int(p["metadata"]["resourceVersion"])):
        status = pod.get("status") or {}
        if status.get("phase") not in (None, "Pending") or pod["metadata"].get("deletionTimestamp"):
            continue
        if status.get("containerStatuses"):
            continue
        if nodes_by_name is None:  # only when a pod waits: no O(nodes) work per write otherwise
            nodes_by_name = {n["metadata"]["name"]: n for n in nodes}
        new = clone(pod)
        new.setdefault("status", {})
        spec = new["spec"]
        node_name = spec.get("nodeName")
        if node_name:
            node = nodes_by_name.get(node_name)
            if node is None:
                continue  # the kubelet of a missing node never picks it up
            if not node_selected(spec, node):
                _reject(new, "NodeAffinity", "Pod was rejected: Predicate NodeAffinity failed")
            else:
                for resource, want in extended_requests(spec).items():
                    avail = _allocatable(node, resource)
                    used = _used(store, node_name, resource)
                    if avail - used < want:
                        _reject(new, "OutOf" + resource,
                                "Pod was rejected: Node didn't have enough resource: %s, requested: %d, "
                                "used: %d, capacity: %d" % (resource, want, used, avail))
                        break
                else:
                    _start(store, new, node, _plugin_pod_ready(store, new, nodes_by_name))
        else:
            reasons = {}
            chosen = None
            claims = dra.for_pod(store, dra_cluster, new)
            try:
                if claims is not None and claims.error:
                    raise dra.AllocationError(claims.error)
                for node in sorted(nodes, key=lambda n: n["metadata"]["name"]):
                    why = _fits(store, new, node)
                    if why is None and claims is not None:
                        why = claims.fits(node)
                    if why is None:
                        chosen = node
                        break
                    reasons[why] = reasons.get(why, 0) + 1
                pod_error = None
            except dra.AllocationError as exc:
                pod_error = str(exc)
            conditions = new["status"].setdefault("conditions", [])
            if chosen is None:
                total = len(nodes)
                detail = ", ".join("%d %s" % (n, _reason_text(r, n)) for r, n in sorted(reasons.items()))
                if pod_error:  # a PreFilter failure counts against every node
                    detail = "%d %s" % (total, pod_error)
                message = "0/%d nodes are available%s. preemption: 0/%d nodes are available: %d " \
                          "Preemption is not helpful for scheduling." % (
                              total, (": " + detail) if detail else "", total, total)
                _set_condition(conditions, "PodScheduled", "False", "Unschedulable", message)
                new["status"]["phase"] = "Pending"
            else:
                if claims is not None:
                    claims.commit(chosen)
                spec["nodeName"] = chosen["metadata"]["name"]
                _set_condition(conditions, "PodScheduled", "True")
                _start(store, new, chosen, _plugin_pod_ready(store, new, nodes_by_name))
        if new != pod:
            if spec.get("nodeName") and not any(c.get("type") == "PodScheduled" for c in new["status"].get("conditions") or []):
                new["status"].setdefault("conditions", []).append(
                    {"type": "PodScheduled", "status": "True", "lastProbeTime": None, "lastTransitionTime": now()})
            store.put_internal(PODS, new)


def _reason_text(reason, count):
    if reason.startswith("Insufficient") or reason == dra.CANNOT_ALLOCATE:
        return reason
    return "node(s) " + reason


def refresh_plugin_pods(store, nodes):
    """A device plugin pod whose config appears or disappears becomes ready or not ready."""
    nodes_by_name = None
    for ds in store.all(DAEMONSETS):
        if not is_device_plugin(ds):
            continue
        if nodes_by_name is None:
            nodes_by_name = {n["metadata"]["name"]: n for n in nodes}
        for pod in _owned_pods(store, ds):
            if pod["status"].get("phase") != "Running":
                continue
            ready = _plugin_pod_ready(store, pod, nodes_by_name)
            if ready != _pod_ready(pod):
                new = clone(pod)
                new["status"]["containerStatuses"] = []
                node = nodes_by_name.get(pod["spec"]["nodeName"])
                if node is not None:
                    _start(store, new, node, ready)
                    store.put_internal(PODS, new)


# ------------------------------------------------------------------ budgets and quotas
def pdb_status(store, pdb):
    spec = pdb.get("spec") or {}
    reqs = selectors.selector_from_dict(spec.get("selector"))
    pods = [p for p in store.all(PODS, pdb["metadata"]["namespace"])
            if spec.get("selector") is not None and selectors.matches(reqs, p["metadata"].get("labels"))
            and not p["metadata"].get("deletionTimestamp")
            and p["status"].get("phase") not in ("Succeeded", "Failed")]
    healthy = sum(1 for p in pods if _pod_ready(p))
    expected = len(pods)

    def scaled(value, round_up):
        if isinstance(value, str) and value.endswith("%"):
            pct = int(value[:-1])
            raw = pct * expected / 100.0
            return int(-(-raw // 1)) if round_up else int(raw // 1)
        return int(value)

    if spec.get("maxUnavailable") is not None:
        desired = max(0, expected - scaled(spec["maxUnavailable"], True))
    elif spec.get("minAvailable") is not None:
        desired = scaled(spec["minAvailable"], True)
    else:
        desired = expected
    allowed = max(0, healthy - desired)
    old = pdb.get("status") or {}
    status = {"currentHealthy": healthy, "desiredHealthy": desired, "disruptionsAllowed": allowed,
              "expectedPods": expected, "observedGeneration": pdb["metadata"].get("generation", 1)}
    ts = now()
    cond_old = next((c for c in old.get("conditions") or [] if c.get("type") == "DisruptionAllowed"), None)
    cond = {"type": "DisruptionAllowed", "status": "True" if allowed > 0 else "False",
            "reason": "SufficientPods" if allowed > 0 else "InsufficientPods", "message": "",
            "observedGeneration": status["observedGeneration"], "lastTransitionTime": ts}
    if cond_old and cond_old.get("status") == cond["status"]:
        cond["lastTransitionTime"] = cond_old.get("lastTransitionTime", ts)
    status["conditions"] = [cond]
    return status


def pdb_statuses(store):
    for pdb in store.all(PDBS):
        status = pdb_status(store, pdb)
        if pdb.get("status") != status:
            new = clone(pdb)
            new["status"] = status
            store.put_internal(PDBS, new)


CLAIM_COUNT = "count/resourceclaims.resource.k8s.io"
PER_CLASS_DEVICES = ".deviceclass.resource.k8s.io/devices"
ALLOCATION_RESULTS_MAX = 32  # resource/v1 AllocationResultsMaxSize: what allocationMode All may take


def claim_usage(claim):
    """What one ResourceClaim counts against a quota (pkg/quota/v1/evaluator/core/resource_claims.go Usage): one
    ``count/resourceclaims.resource.k8s.io`` and, per device class, ``<class>.deviceclass.resource.k8s.io/devices``
    as the devices its requests may take: an exact count, ``All`` as the most an allocation holds, and a
    ``firstAvailable`` request as its largest alternative per class."""
    usage = {CLAIM_COUNT: 1}
    for request in ((claim.get("spec") or {}).get("devices") or {}).get("requests") or []:
        alternatives = [request["exactly"]] if request.get("exactly") else request.get("firstAvailable") or []
        largest = {}
        for alt in alternatives:
            if alt.get("allocationMode") == "All":
                number = ALLOCATION_RESULTS_MAX
            else:
                number = int(alt.get("count") or 1)
            key = (alt.get("deviceClassName") or "") + PER_CLASS_DEVICES
            largest[key] = max(largest.get(key, 0), number)
        for key, number in largest.items():
            usage[key] = usage.get(key, 0) + number
    return usage


def quota_statuses(store):
    for quota in store.all(QUOTAS):
        hard = (quota.get("spec") or {}).get("hard") or {}
        used = {}
        pods = [p for p in store.all(PODS, quota["metadata"]["namespace"])
                if p["status"].get("phase") not in ("Succeeded", "Failed")]
        claims = None
        for key in hard:
            if key.startswith("requests.nvidia.com/") or key.startswith("limits.nvidia.com/"):
                res_name = key.split(".", 1)[1]
                used[key] = str(sum(extended_requests(p["spec"]).get(res_name, 0) for p in pods))
            elif key == "pods":
                used[key] = str(len(pods))
            elif key == CLAIM_COUNT or key.endswith(PER_CLASS_DEVICES):
                if claims is None:
                    claims = [claim_usage(c) for c in store.all(dra.CLAIMS, quota["metadata"]["namespace"])]
                used[key] = str(sum(c.get(key, 0) for c in claims))
            else:
                used[key] = (quota.get("status") or {}).get("used", {}).get(key, "0")
        status = {"hard": dict(hard), "used": used}
        if quota.get("status") != status:
            new = clone(quota)
            new["status"] = status
            store.put_internal(QUOTAS, new)


UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"


def node_lifecycle(store, nodes):
    """The node controller keeps a `node.kubernetes.io/unschedulable:NoSchedule` taint on cordoned nodes."""
    for node in nodes:
        spec = node.get("spec") or {}
        taints = spec.get("taints") or []
        has = any(t.get("key") == UNSCHEDULABLE_TAINT and t.get("effect") == "NoSchedule" for t in taints)
        want = bool(spec.get("unschedulable"))
        if has == want:
            continue
        new = clone(node)
        if want:
            new.setdefault("spec", {}).setdefault("taints", []).append(
                {"key": UNSCHEDULABLE_TAINT, "effect": "NoSchedule", "timeAdded": now()})
        else:
            new["spec"]["taints"] = [t for t in taints if t.get("key") != UNSCHEDULABLE_TAINT]
            if not new["spec"]["taints"]:
                del new["spec"]["taints"]
        store.put_internal(NODES, new)


def _touched_nodes(store, round_touched):
    """The nodes the per-node controllers look at: those written since the last run, or every node."""
    if round_touched is None or store.touched_nodes is None:
        return store.all(NODES)
    names = sorted(round_touched | store.touched_nodes)
    return [node for node in (store.find(NODES, None, name) for name in names) if node is not None]


def reconcile(store, full=False):
    """Run the controllers until the cluster settles (3 rounds at most); ``full`` looks at every node."""
    with store.lock:
        if full:
            store.touched_nodes = None
        for _round in range(3):
            store.dirty = False
            rv = store.rv
            touched = store.take_touched_nodes()
            node_lifecycle(store, _touched_nodes(store, touched))
            nodes = store.all(NODES)
            reconcile_daemonsets(store, nodes)
            node_gpu_resources(store, _touched_nodes(store, touched))
            nodes = store.all(NODES)
            refresh_plugin_pods(store, nodes)
            reconcile_jobs(store)
            dra.reconcile(store, nodes)
            schedule_pods(store, nodes)
            job_status(store)
            daemonset_status(store, nodes)
            deployment_status(store)
            pdb_statuses(store)
            quota_statuses(store)
            if store.rv == rv:
                break
        store.dirty = False
