"""Optional admission plugins of kube-apiserver: PodTolerationRestriction and ExtendedResourceToleration.

kube-apiserver enables neither by default (``--enable-admission-plugins`` turns them on); the test server
follows: ``KubeAPIServer(admission_plugins=[...])``, ``--enable-admission-plugins`` on the command line, or
``srv.store.admission_plugins`` changed while it runs. They run on pod creation, after the default
not-ready/unreachable tolerations and before the ResourceQuota check, in kube-apiserver's plugin order
(``pkg/kubeapiserver/options/plugins.go``: DefaultTolerationSeconds, PodTolerationRestriction,
ExtendedResourceToleration, ..., ResourceQuota).

Rules, each from its upstream file in kubernetes/kubernetes:

- ``plugin/pkg/admission/podtolerationrestriction/admission.go``: on create, the tolerations of the
  namespace annotation ``scheduler.alpha.kubernetes.io/defaultTolerations`` (a JSON list; present but
  empty: none) are merged into the pod's; a pod that is not BestEffort also gets
  ``node.kubernetes.io/memory-pressure:NoSchedule`` (Exists); then every toleration of the pod must be
  covered by one of ``scheduler.alpha.kubernetes.io/tolerationsWhitelist`` when that is set and not empty,
  else the create fails with the plugin's message. The plugin returns plain errors, which kube-apiserver
  answers as 500 with the error's text (``staging/src/k8s.io/apiserver/pkg/endpoints/handlers/
  responsewriters/status.go`` ``ErrorToAPIStatus``), also for an annotation that is not a toleration list.
  The cluster-wide defaults of the plugin's configuration file are not modelled.
- ``pkg/util/tolerations/tolerations.go``: ``MergeTolerations`` (pod's first, a toleration another one
  covers is dropped) and ``VerifyAgainstWhitelist`` through ``isSuperset``.
- ``plugin/pkg/admission/extendedresourcetoleration/admission.go``: for every extended resource (a
  resource name with a domain outside ``kubernetes.io``, ``pkg/apis/core/helper/helpers.go``
  ``IsExtendedResourceName``) that a container or init container requests, in sorted order, a toleration
  ``{key: <resource>, operator: Exists, effect: NoSchedule}`` is added unless the pod has that very
  toleration (``AddOrUpdateTolerationInPodSpec``: one with the same key, operator, value and effect is
  replaced).
"""

import json

from .errors import ApiError

POD_TOLERATION_RESTRICTION = "PodTolerationRestriction"
EXTENDED_RESOURCE_TOLERATION = "ExtendedResourceToleration"
PLUGINS = (POD_TOLERATION_RESTRICTION, EXTENDED_RESOURCE_TOLERATION)

NS_DEFAULT_TOLERATIONS = "scheduler.alpha.kubernetes.io/defaultTolerations"
NS_WHITELIST_TOLERATIONS = "scheduler.alpha.kubernetes.io/tolerationsWhitelist"
MEMORY_PRESSURE = {"key": "node.kubernetes.io/memory-pressure", "operator": "Exists", "effect": "NoSchedule"}
WHITELIST_MESSAGE = ("pod tolerations (possibly merged with namespace default tolerations) conflict with its "
                     "namespace whitelist")


def check_plugins(names):
    """The plugin names as a set; ValueError for one the test server does not have."""
    names = set(names or ())
    unknown = sorted(names - set(PLUGINS))
    if unknown:
        raise ValueError("unknown admission plugin(s) %s (known: %s)" % (", ".join(unknown), ", ".join(PLUGINS)))
    return names


def _internal(message):
    return ApiError(500, "InternalError", message)


def _normal(tol):
    """A toleration with the fields Go's struct would have (empty strings, no seconds)."""
    return {"key": tol.get("key") or "", "operator": tol.get("operator") or "", "value": tol.get("value") or "",
            "effect": tol.get("effect") or "", "tolerationSeconds": tol.get("tolerationSeconds")}


def is_superset(ss, t):
    """Whether toleration ``ss`` tolerates every taint ``t`` does (``isSuperset``)."""
    ss, t = _normal(ss), _normal(t)
    if ss == t:
        return True
    if t["key"] != ss["key"] and (ss["key"] != "" or ss["operator"] != "Exists"):
        return False
    if t["effect"] != ss["effect"] and ss["effect"] != "":
        return False
    if ss["effect"] == "NoExecute" and ss["tolerationSeconds"] is not None:
        if t["tolerationSeconds"] is None or t["tolerationSeconds"] > ss["tolerationSeconds"]:
            return False
    if ss["operator"] in ("Equal", ""):
        return t["operator"] == "Equal" and t["value"] == ss["value"]
    return ss["operator"] == "Exists"


def merge_tolerations(first, second):
    """``MergeTolerations``: both lists in order, without a toleration that another one covers."""
    everything = list(first) + list(second)
    merged = []
    for i, tol in enumerate(everything):
        if any(is_superset(kept, tol) for kept in merged):
            continue
        if any(_normal(tol) != _normal(later) and is_superset(later, tol) for later in everything[i + 1:]):
            continue
        merged.append(tol)
    return merged


def verify_against_whitelist(tolerations, whitelist):
    if not whitelist or not tolerations:
        return True
    return all(any(is_superset(w, t) for w in whitelist) for t in tolerations)


def _namespace_tolerations(namespace, key):
    """None when the annotation is absent, [] when empty, else its tolerations (500 when not a list of them)."""
    annotations = ((namespace or {}).get("metadata") or {}).get("annotations") or {}
    if key not in annotations:
        return None
    text = annotations[key]
    if text == "":
        return []
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise _internal(str(exc))
    if not isinstance(value, list) or not all(isinstance(item, dict) for item in value):
        raise _internal("json: cannot unmarshal %s into Go value of type []v1.Toleration"
                        % type(value).__name__)
    return value


def pod_toleration_restriction(namespace, pod_spec, qos_class):
    """Merge the namespace's default tolerations into a new pod's and check them against its whitelist."""
    extra = list(_namespace_tolerations(namespace, NS_DEFAULT_TOLERATIONS) or [])
    if qos_class != "BestEffort":
        extra.append(dict(MEMORY_PRESSURE))
    if extra:
        pod_spec["tolerations"] = merge_tolerations(pod_spec.get("tolerations") or [], extra)
    tolerations = pod_spec.get("tolerations") or []
    if tolerations:
        whitelist = _namespace_tolerations(namespace, NS_WHITELIST_TOLERATIONS)
        if whitelist and not verify_against_whitelist(tolerations, whitelist):
            raise _internal(WHITELIST_MESSAGE)


def is_extended_resource_name(name):
    """``IsExtendedResourceName``: a qualified name outside the kubernetes.io domain, not a quota's requests."""
    if "/" not in name or name.startswith("requests."):
        return False
    domain = name.split("/", 1)[0]
    return not (domain == "kubernetes.io" or domain.endswith(".kubernetes.io"))


def extended_resource_toleration(pod_spec):
    """Add ``{key: <resource>, operator: Exists, effect: NoSchedule}`` for each extended resource requested."""
    names = set()
    for ctr in (pod_spec.get("containers") or []) + (pod_spec.get("initContainers") or []):
        for name in ((ctr.get("resources") or {}).get("requests") or {}):
            if is_extended_resource_name(name):
                names.add(name)
    if not names:
        return
    tolerations = pod_spec.setdefault("tolerations", [])
    fields = ("key", "operator", "value", "effect")
    for name in sorted(names):
        wanted = {"key": name, "operator": "Exists", "effect": "NoSchedule"}
        same = [i for i, t in enumerate(tolerations)
                if all(_normal(t)[f] == _normal(wanted)[f] for f in fields)]
        if same:
            tolerations[same[0]] = wanted
        else:
            tolerations.append(wanted)


def admit_pod(store, namespace, pod, qos_class):
    """Run the plugins enabled on ``store`` (``store.admission_plugins``) on a pod being created."""
    enabled = getattr(store, "admission_plugins", None) or ()
    if POD_TOLERATION_RESTRICTION in enabled:
        pod_toleration_restriction(namespace, pod["spec"], qos_class)
    if EXTENDED_RESOURCE_TOLERATION in enabled:
        extended_resource_toleration(pod["spec"])
