"""Defaulting, admission and immutable-field checks, per kind, as kube-apiserver does them."""

import hashlib

from . import admission, errors
from .resources import BY_PATH
from .util import clone

DEFAULT_TOLERATIONS = [
    {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute",
     "tolerationSeconds": 300},
    {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute",
     "tolerationSeconds": 300},
]


def _container_defaults(ctr):
    image = ctr.get("image") or ""
    tag = image.rsplit("/", 1)[-1]
    if "imagePullPolicy" not in ctr:
        ctr["imagePullPolicy"] = "Always" if ("@" not in tag and (":" not in tag or tag.endswith(":latest"))) \
            else "IfNotPresent"
    ctr.setdefault("terminationMessagePath", "/dev/termination-log")
    ctr.setdefault("terminationMessagePolicy", "File")
    resources = ctr.setdefault("resources", {})
    limits = resources.get("limits") or {}
    if limits:
        requests = resources.setdefault("requests", {})
        for name, value in limits.items():
            requests.setdefault(name, value)
    for port in ctr.get("ports") or []:
        port.setdefault("protocol", "TCP")


def pod_spec_defaults(spec):
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("dnsPolicy", "ClusterFirst")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("securityContext", {})
    for ctr in (spec.get("containers") or []) + (spec.get("initContainers") or []):
        if isinstance(ctr, dict):
            _container_defaults(ctr)
    for vol in spec.get("volumes") or []:
        if isinstance(vol, dict):
            if "configMap" in vol and isinstance(vol["configMap"], dict):
                vol["configMap"].setdefault("defaultMode", 420)
            if "secret" in vol and isinstance(vol["secret"], dict):
                vol["secret"].setdefault("defaultMode", 420)
            if "hostPath" in vol and isinstance(vol["hostPath"], dict):
                vol["hostPath"].setdefault("type", "")


def _template_defaults(spec):
    template = spec.setdefault("template", {})
    template.setdefault("metadata", {})
    pod_spec_defaults(template.setdefault("spec", {}))


def node_address(name):
    digest = hashlib.sha256(name.encode()).digest()
    return "10.%d.%d.%d" % (digest[0], digest[1], max(1, digest[2] % 255))


def node_defaults(obj, old):
    meta = obj["metadata"]
    name = meta["name"]
    if old is None:
        labels = meta.setdefault("labels", {}) or {}
        meta["labels"] = labels
        labels.setdefault("kubernetes.io/hostname", name)
        labels.setdefault("kubernetes.io/os", "linux")
        labels.setdefault("kubernetes.io/arch", "amd64")
        labels.setdefault("beta.kubernetes.io/os", "linux")
        labels.setdefault("beta.kubernetes.io/arch", "amd64")
        status = obj.setdefault("status", {}) or {}
        obj["status"] = status
        status.setdefault("addresses", [{"type": "InternalIP", "address": node_address(name)},
                                        {"type": "Hostname", "address": name}])
        capacity = status.setdefault("capacity", {})
        for key, value in (("cpu", "16"), ("memory", "131900000Ki"), ("pods", "110"),
                           ("ephemeral-storage", "500000000Ki"), ("hugepages-1Gi", "0"),
                           ("hugepages-2Mi", "0")):
            capacity.setdefault(key, value)
        allocatable = status.setdefault("allocatable", {})
        for key, value in capacity.items():
            allocatable.setdefault(key, value)
        ts = meta["creationTimestamp"]
        if not status.get("conditions"):
            status["conditions"] = [
                {"type": t, "status": "False", "reason": "Kubelet" + r, "message": m,
                 "lastHeartbeatTime": ts, "lastTransitionTime": ts}
                for t, r, m in (("MemoryPressure", "HasSufficientMemory", "kubelet has sufficient memory available"),
                                ("DiskPressure", "HasNoDiskPressure", "kubelet has no disk pressure"),
                                ("PIDPressure", "HasSufficientPID", "kubelet has sufficient PID available"))
            ] + [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                  "message": "kubelet is posting ready status", "lastHeartbeatTime": ts,
                  "lastTransitionTime": ts}]
        status.setdefault("daemonEndpoints", {"kubeletEndpoint": {"Port": 10250}})
        status.setdefault("nodeInfo", {
            "architecture": "amd64", "bootID": meta["uid"], "containerRuntimeVersion": "containerd://1.6.20",
            "kernelVersion": "6.1.0-27-amd64", "kubeProxyVersion": "v1.34.2", "kubeletVersion": "v1.34.2",
            "machineID": meta["uid"].replace("-", ""), "operatingSystem": "linux",
            "osImage": "Debian GNU/Linux 12 (bookworm)", "systemUUID": meta["uid"]})


def apply(store, res, obj, old):
    """Fill in the fields kube-apiserver defaults (called on create and update)."""
    kind = res.kind
    meta = obj["metadata"]
    spec = obj.get("spec")
    if kind == "Pod":
        pod_spec_defaults(obj.setdefault("spec", {}))
        if old is None:
            obj["status"] = {"phase": "Pending", "qosClass": qos_class(obj["spec"])}
    elif kind == "Node":
        node_defaults(obj, old)
    elif kind == "Namespace":
        obj.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
        meta.setdefault("labels", {})["kubernetes.io/metadata.name"] = meta["name"]
        if old is None:
            obj["status"] = {"phase": "Active"}
    elif kind == "DaemonSet":
        spec = obj.setdefault("spec", {})
        spec.setdefault("updateStrategy", {"type": "RollingUpdate",
                                           "rollingUpdate": {"maxUnavailable": 1, "maxSurge": 0}})
        spec.setdefault("revisionHistoryLimit", 10)
        _template_defaults(spec)
        if old is None:
            obj["status"] = {"currentNumberScheduled": 0, "desiredNumberScheduled": 0,
                             "numberMisscheduled": 0, "numberReady": 0}
    elif kind in ("Deployment", "ReplicaSet"):
        spec = obj.setdefault("spec", {})
        spec.setdefault("replicas", 1)
        if kind == "Deployment":
            spec.setdefault("strategy", {"type": "RollingUpdate",
                                         "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": "25%"}})
            spec.setdefault("revisionHistoryLimit", 10)
            spec.setdefault("progressDeadlineSeconds", 600)
        _template_defaults(spec)
        if old is None:
            obj["status"] = {}
    elif kind == "Job":
        spec = obj.setdefault("spec", {})
        spec.setdefault("backoffLimit", 6)
        spec.setdefault("completions", 1)
        spec.setdefault("parallelism", 1)
        spec.setdefault("completionMode", "NonIndexed")
        spec.setdefault("suspend", False)
        spec.setdefault("podReplacementPolicy", "TerminatingOrFailed")
        if old is None and not spec.get("manualSelector"):
            uid = meta["uid"]
            labels = {"batch.kubernetes.io/controller-uid": uid, "batch.kubernetes.io/job-name": meta["name"],
                      "controller-uid": uid, "job-name": meta["name"]}
            spec["selector"] = {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}
            tmeta = spec.setdefault("template", {}).setdefault("metadata", {})
            tmeta.setdefault("labels", {}).update(labels)
        _template_defaults(spec)
        if old is None:
            obj["status"] = {}
    elif kind == "PodDisruptionBudget":
        if old is None:
            obj["status"] = {"currentHealthy": 0, "desiredHealthy": 0, "disruptionsAllowed": 0,
                             "expectedPods": 0}
    elif kind == "Secret":
        obj.setdefault("type", "Opaque")
    elif kind == "PriorityClass":
        obj.setdefault("preemptionPolicy", "PreemptLowerPriority")
    elif kind == "ResourceQuota":
        if old is None:
            hard = clone((spec or {}).get("hard") or {})
            obj["status"] = {"hard": hard, "used": {k: "0" for k in hard}}
    elif res.group == "resource.k8s.io":
        from . import dra
        dra.apply_defaults(res, obj)
    elif kind == "Service":
        spec = obj.setdefault("spec", {})
        spec.setdefault("type", "ClusterIP")
        spec.setdefault("sessionAffinity", "None")


def qos_class(spec):
    limits_all = True
    any_set = False
    for ctr in spec.get("containers") or []:
        res = ctr.get("resources") or {}
        if res.get("limits") or res.get("requests"):
            any_set = True
        lim = res.get("limits") or {}
        req = res.get("requests") or {}
        if not ("cpu" in lim and "memory" in lim) or any(str(req.get(k)) != str(lim.get(k)) for k in req):
            limits_all = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if limits_all else "Burstable"


def admit(store, res, obj):
    """Admission on create: service account, default tolerations, priority class."""
    if res.kind != "Pod":
        return
    spec = obj["spec"]
    sa = spec.get("serviceAccountName") or spec.get("serviceAccount") or "default"
    spec["serviceAccountName"] = sa
    spec["serviceAccount"] = sa
    tolerations = spec.setdefault("tolerations", [])
    for tol in DEFAULT_TOLERATIONS:
        if not any(t.get("key") == tol["key"] and t.get("effect") in (None, "", "NoExecute")
                   for t in tolerations):
            tolerations.append(dict(tol))
    admission.admit_pod(store, store.find(BY_PATH[("", "v1", "namespaces")], None, obj["metadata"]["namespace"]),
                        obj, obj["status"]["qosClass"])
    _quota_admission(store, obj)
    rc_name = spec.get("runtimeClassName")
    if rc_name:
        rc = store.find(BY_PATH[("node.k8s.io", "v1", "runtimeclasses")], None, rc_name)
        if rc is None:
            raise errors.forbidden('pods "%s" is forbidden: pod rejected: RuntimeClass "%s" not found'
                                   % (obj["metadata"].get("name") or "", rc_name))
        scheduling = rc.get("scheduling") or {}
        for key, value in (scheduling.get("nodeSelector") or {}).items():
            selector = spec.setdefault("nodeSelector", {})
            if selector.get(key, value) != value:
                raise errors.forbidden('pods "%s" is forbidden: conflict: runtimeClass.scheduling.nodeSelector'
                                       '[%s] = %s; pod.spec.nodeSelector[%s] = %s'
                                       % (obj["metadata"].get("name") or "", key, value, key, selector[key]))
            selector[key] = value
        for tol in scheduling.get("tolerations") or []:
            if tol not in spec.setdefault("tolerations", []):
                spec["tolerations"].append(clone(tol))
        if rc.get("overhead"):
            spec["overhead"] = clone(rc["overhead"].get("podFixed") or {})
    pc_name = spec.get("priorityClassName")
    if pc_name:
        pc = store.find(BY_PATH[("scheduling.k8s.io", "v1", "priorityclasses")], None, pc_name)
        if pc is None:
            raise errors.forbidden('pods "%s" is forbidden: no PriorityClass with name %s was found'
                                   % (obj["metadata"].get("name") or "", pc_name))
        spec["priority"] = pc.get("value", 0)
        spec.setdefault("preemptionPolicy", pc.get("preemptionPolicy", "PreemptLowerPriority"))
    else:
        spec.setdefault("priority", 0)
    spec.setdefault("enableServiceLinks", True)


def _pod_spec_mutable_view(spec):
    view = clone(spec)
    for key in ("containers", "initContainers"):
        for ctr in view.get(key) or []:
            ctr.pop("image", None)
    view.pop("activeDeadlineSeconds", None)
    view.pop("tolerations", None)
    view.pop("terminationGracePeriodSeconds", None)
    return view


def immutable(res, old, new):
    causes = []
    kind = res.kind
    if kind == "Pod":
        if _pod_spec_mutable_view(old.get("spec") or {}) != _pod_spec_mutable_view(new.get("spec") or {}):
            causes.append(("spec", "Forbidden: pod updates may not change fields other than "
                           "`spec.containers[*].image`,`spec.initContainers[*].image`,"
                           "`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to "
                           "existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to "
                           "be set to 1 if it was previously negative)", "FieldValueForbidden"))
    if kind in ("DaemonSet", "Deployment", "ReplicaSet", "Job"):
        if (old.get("spec") or {}).get("selector") != (new.get("spec") or {}).get("selector"):
            causes.append(("spec.selector", "Invalid value: field is immutable", "FieldValueInvalid"))
    if kind == "Job" and (old.get("spec") or {}).get("template") != (new.get("spec") or {}).get("template"):
        causes.append(("spec.template", "Invalid value: field is immutable", "FieldValueInvalid"))
    if kind in ("ConfigMap", "Secret") and old.get("immutable"):
        if old.get("data") != new.get("data") or old.get("binaryData") != new.get("binaryData"):
            causes.append(("data", "Forbidden: field is immutable when `immutable` is set",
                           "FieldValueForbidden"))
    if kind == "PriorityClass" and old.get("value") != new.get("value"):
        causes.append(("value", "Forbidden: may not be changed in an update.", "FieldValueForbidden"))
    if res.group == "resource.k8s.io":
        from . import dra
        causes.extend(dra.immutable(res, old, new))
    return causes


def _quota_admission(store, pod):
    """Refuse a pod whose extended-resource requests exceed a ResourceQuota of its namespace."""
    from .kubelet import extended_requests

    namespace = pod["metadata"]["namespace"]
    wants = extended_requests(pod["spec"])
    if not wants:
        return
    pods = [p for p in store.all(BY_PATH[("", "v1", "pods")], namespace)
            if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]
    for quota in store.all(BY_PATH[("", "v1", "resourcequotas")], namespace):
        hard = (quota.get("spec") or {}).get("hard") or {}
        for key, limit in hard.items():
            prefix, _dot, resource = key.partition(".")
            if prefix not in ("requests", "limits") or resource not in wants:
                continue
            used = sum(extended_requests(p["spec"]).get(resource, 0) for p in pods)
            if used + wants[resource] > int(limit):
                raise errors.forbidden(
                    'pods "%s" is forbidden: exceeded quota: %s, requested: %s=%d, used: %s=%d, limited: %s=%s'
                    % (pod["metadata"].get("name") or "", quota["metadata"]["name"], key, wants[resource],
                       key, used, key, limit))
