"""Server-side printing (`meta.k8s.io/v1` Table), what `kubectl get` shows as columns."""

import datetime


def _age(meta):
    try:
        created = datetime.datetime.strptime(meta.get("creationTimestamp", ""), "%Y-%m-%dT%H:%M:%SZ")
    except ValueError:
        return "<unknown>"
    now = datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None)
    secs = max(0, int((now - created).total_seconds()))
    if secs < 120:
        return "%ds" % secs
    mins = secs // 60
    if mins < 10:
        return "%dm%ds" % (mins, secs % 60)
    if mins < 180:
        return "%dm" % mins
    hours = mins // 60
    if hours < 48:
        return "%dh" % hours
    return "%dd" % (hours // 24)


def _col(name, kind="string", priority=0, description=""):
    return {"name": name, "type": kind, "format": "name" if name == "Name" else "",
            "description": description or name, "priority": priority}


def _node(obj):
    status = obj.get("status") or {}
    ready = next((c for c in status.get("conditions") or [] if c.get("type") == "Ready"), {})
    state = "Ready" if ready.get("status") == "True" else "NotReady"
    if (obj.get("spec") or {}).get("unschedulable"):
        state += ",SchedulingDisabled"
    labels = (obj["metadata"].get("labels") or {})
    roles = ",".join(sorted(k.split("/", 1)[1] for k in labels if k.startswith("node-role.kubernetes.io/"))) or "<none>"
    info = status.get("nodeInfo") or {}
    addrs = {a.get("type"): a.get("address") for a in status.get("addresses") or []}
    return [obj["metadata"]["name"], state, roles, _age(obj["metadata"]), info.get("kubeletVersion", ""),
            addrs.get("InternalIP", "<none>"), addrs.get("ExternalIP", "<none>"), info.get("osImage", ""),
            info.get("kernelVersion", ""), info.get("containerRuntimeVersion", "")]


def _pod(obj):
    status = obj.get("status") or {}
    statuses = status.get("containerStatuses") or []
    total = len((obj.get("spec") or {}).get("containers") or [])
    ready = sum(1 for c in statuses if c.get("ready"))
    phase = status.get("reason") or status.get("phase") or "Pending"
    for cstat in statuses:
        state = cstat.get("state") or {}
        if "waiting" in state:
            phase = state["waiting"].get("reason") or phase
        elif "terminated" in state and status.get("phase") not in ("Succeeded",):
            phase = state["terminated"].get("reason") or phase
    if status.get("phase") == "Succeeded":
        phase = "Completed"
    restarts = sum(int(c.get("restartCount") or 0) for c in statuses)
    return [obj["metadata"]["name"], "%d/%d" % (ready, total), phase, restarts, _age(obj["metadata"]),
            status.get("podIP") or "<none>", (obj.get("spec") or {}).get("nodeName") or "<none>", "<none>", "<none>"]


def _daemonset(obj):
    st = obj.get("status") or {}
    selector = (((obj.get("spec") or {}).get("template") or {}).get("spec") or {}).get("nodeSelector") or {}
    return [obj["metadata"]["name"], st.get("desiredNumberScheduled", 0), st.get("currentNumberScheduled", 0),
            st.get("numberReady", 0), st.get("updatedNumberScheduled", 0), st.get("numberAvailable", 0),
            ",".join("%s=%s" % kv for kv in sorted(selector.items())) or "<none>", _age(obj["metadata"])]


def _deployment(obj):
    st = obj.get("status") or {}
    want = (obj.get("spec") or {}).get("replicas", 1)
    return [obj["metadata"]["name"], "%d/%d" % (st.get("readyReplicas", 0), want), st.get("updatedReplicas", 0),
            st.get("availableReplicas", 0), _age(obj["metadata"])]


def _job(obj):
    st = obj.get("status") or {}
    conds = {c.get("type"): c.get("status") for c in st.get("conditions") or []}
    state = "Complete" if conds.get("Complete") == "True" else "Failed" if conds.get("Failed") == "True" \
        else "Running"
    return [obj["metadata"]["name"], state, "%d/%d" % (st.get("succeeded", 0), (obj.get("spec") or {}).get(
        "completions", 1)), _age(obj["metadata"])]


def _namespace(obj):
    return [obj["metadata"]["name"], (obj.get("status") or {}).get("phase", "Active"), _age(obj["metadata"])]


def _configmap(obj):
    return [obj["metadata"]["name"], len(obj.get("data") or {}) + len(obj.get("binaryData") or {}),
            _age(obj["metadata"])]


def _pdb(obj):
    spec = obj.get("spec") or {}
    return [obj["metadata"]["name"], str(spec.get("minAvailable", "N/A")), str(spec.get("maxUnavailable", "N/A")),
            (obj.get("status") or {}).get("disruptionsAllowed", 0), _age(obj["metadata"])]


def _default(obj):
    return [obj["metadata"]["name"], _age(obj["metadata"])]


PRINTERS = {
    "Node": ([_col("Name"), _col("Status"), _col("Roles"), _col("Age"), _col("Version"),
              _col("Internal-IP", priority=1), _col("External-IP", priority=1), _col("OS-Image", priority=1),
              _col("Kernel-Version", priority=1), _col("Container-Runtime", priority=1)], _node),
    "Pod": ([_col("Name"), _col("Ready"), _col("Status"), _col("Restarts", "integer"), _col("Age"),
             _col("IP", priority=1), _col("Node", priority=1), _col("Nominated Node", priority=1),
             _col("Readiness Gates", priority=1)], _pod),
    "DaemonSet": ([_col("Name"), _col("Desired", "integer"), _col("Current", "integer"), _col("Ready", "integer"),
                   _col("Up-to-date", "integer"), _col("Available", "integer"), _col("Node Selector"),
                   _col("Age")], _daemonset),
    "Deployment": ([_col("Name"), _col("Ready"), _col("Up-to-date", "integer"), _col("Available", "integer"),
                    _col("Age")], _deployment),
    "Job": ([_col("Name"), _col("Status"), _col("Completions"), _col("Age")], _job),
    "Namespace": ([_col("Name"), _col("Status"), _col("Age")], _namespace),
    "ConfigMap": ([_col("Name"), _col("Data", "integer"), _col("Age")], _configmap),
    "PodDisruptionBudget": ([_col("Name"), _col("Min Available"), _col("Max Unavailable"),
                             _col("Allowed Disruptions", "integer"), _col("Age")], _pdb),
}


def wants_table(accept):
    return "as=Table" in (accept or "") and "g=meta.k8s.io" in (accept or "")


def table(res, objects, resource_version, include="Metadata"):
    columns, printer = PRINTERS.get(res.kind, ([_col("Name"), _col("Age")], _default))
    rows = []
    for obj in objects:
        row = {"cells": printer(obj)}
        if include == "Object":
            row["object"] = obj
        elif include != "None":
            row["object"] = {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                             "metadata": obj["metadata"]}
        rows.append(row)
    return {"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": {"resourceVersion": resource_version},
            "columnDefinitions": columns, "rows": rows}
