"""The object store and the write semantics of kube-apiserver."""

import datetime
import random
import threading
import uuid
from collections import deque

from . import errors, labelsel as selectors, patch as patching, resources, validation
from .resources import BY_PATH
from .util import clone

NAME_CHARS = "bcdfghjklmnpqrstvwxz2456789"
SIMULATED_GPUS = "kubegpu.io/simulated-gpus"

STATUS_ON_CREATE_KEPT = ("nodes",)  # nodes may be created with their status, as the kubelet does
DEFAULT_PROPAGATION = {"jobs": "Orphan"}


def now():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def random_suffix(n=5):
    return "".join(random.choice(NAME_CHARS) for _i in range(n))


def _without(obj, *keys):
    return {k: v for k, v in obj.items() if k not in keys}


class Store:
    """Objects keyed by (resource, namespace, name); every method runs under `lock`."""

    def __init__(self):
        self.lock = threading.RLock()
        self.changed = threading.Condition(self.lock)
        self.rv = 1
        self.objects = {res: {} for res in resources.RESOURCES}
        self.events = deque(maxlen=20000)
        self.dirty = True
        # Names of the nodes written since the controllers last looked, or None for "look at every node"
        # (any other resource was written: pods, DaemonSets, ConfigMaps can change what any node gets).
        self.touched_nodes = None
        self.logs = {}  # (namespace, pod) -> text
        with self.lock:
            self._builtin_objects()

    def _builtin_objects(self):
        for ns in ("default", "kube-system", "kube-public", "kube-node-lease"):
            self.create(BY_PATH[("", "v1", "namespaces")], None, {"metadata": {"name": ns}})
        pcs = BY_PATH[("scheduling.k8s.io", "v1", "priorityclasses")]
        for name, value in (("system-node-critical", 2000001000), ("system-cluster-critical", 2000000000)):
            self.create(pcs, None, {"metadata": {"name": name}, "value": value,
                                    "description": "Used for system critical pods that must not be "
                                    "moved from their current node.", "preemptionPolicy": "PreemptLowerPriority"})

    # ---------------------------------------------------------------- helpers
    def _next_rv(self):
        self.rv += 1
        return str(self.rv)

    def _bucket(self, res):
        return self.objects[res]

    def _key(self, res, namespace, name):
        return (namespace if res.namespaced else None, name)

    def _ensure_namespace(self, res, namespace):
        if res.namespaced and res.name != "namespaces":
            if (None, namespace) not in self.objects[BY_PATH[("", "v1", "namespaces")]]:
                raise errors.not_found(BY_PATH[("", "v1", "namespaces")], namespace)

    def _commit(self, res, obj, event):
        key = self._key(res, obj["metadata"].get("namespace"), obj["metadata"]["name"])
        if event == "DELETED":
            self._bucket(res).pop(key, None)
        else:
            self._bucket(res)[key] = obj
        if res.name == "nodes" and not res.group:
            if self.touched_nodes is not None:
                self.touched_nodes.add(obj["metadata"]["name"])
        else:
            self.touched_nodes = None
        # stored objects are replaced on write, never changed in place: keep a reference
        self.events.append((self.rv, event, res, obj))
        self.changed.notify_all()

    def take_touched_nodes(self):
        """The nodes written since the last call (a set of names), or None when every node needs a look."""
        touched, self.touched_nodes = self.touched_nodes, set()
        return touched

    def find(self, res, namespace, name):
        return self._bucket(res).get(self._key(res, namespace, name))

    def all(self, res, namespace=None):
        if namespace is None:
            return list(self._bucket(res).values())
        return [o for (ns, _name), o in self._bucket(res).items() if ns == namespace]

    # ---------------------------------------------------------------- reads
    def get(self, res, namespace, name):
        obj = self.find(res, namespace, name)
        if obj is None:
            raise errors.not_found(res, name)
        return clone(obj)

    def list(self, res, namespace=None, label_selector=None, field_selector=None, copy_items=True):
        reqs = selectors.parse_label_selector(label_selector)
        freqs = selectors.parse_field_selector(field_selector, res.name)
        items = []
        entries = self._bucket(res).items()
        names = set(value for field, op, value in freqs if field == "metadata.name" and op == "=")
        if names and (namespace is not None or not res.namespaced):
            # metadata.name=X (a client looking up one object): no walk over every stored object
            found = [self.find(res, namespace, name) for name in names]
            entries = [((obj["metadata"].get("namespace"), obj["metadata"]["name"]), obj) for obj in found if obj]
        for (_ns, name), obj in sorted(entries, key=lambda kv: (kv[0][0] or "", kv[0][1])):
            if namespace is not None and obj["metadata"].get("namespace") != namespace:
                continue
            if reqs and not selectors.matches(reqs, obj["metadata"].get("labels")):
                continue
            if freqs and not selectors.fields_match(freqs, obj):
                continue
            items.append(clone(obj) if copy_items else obj)
        return items, str(self.rv)

    # ---------------------------------------------------------------- writes
    def create(self, res, namespace, body, dry_run=False, internal=False):
        if not isinstance(body, dict):
            raise errors.bad_request("the body of the request must be an object")
        obj = clone(body)
        meta = obj.setdefault("metadata", {}) or {}
        obj["metadata"] = meta
        self._check_kind(res, obj)
        if res.namespaced:
            if meta.get("namespace") and namespace and meta["namespace"] != namespace:
                raise errors.bad_request("the namespace of the provided object does not match "
                                         "the namespace sent on the request")
            meta["namespace"] = namespace or meta.get("namespace") or "default"
            self._ensure_namespace(res, meta["namespace"])
        else:
            meta.pop("namespace", None)
        if not meta.get("name") and meta.get("generateName"):
            for _attempt in range(20):
                meta["name"] = meta["generateName"] + random_suffix()
                if self.find(res, meta.get("namespace"), meta["name"]) is None:
                    break
        for key in ("resourceVersion", "uid", "creationTimestamp", "deletionTimestamp", "generation",
                    "managedFields", "selfLink"):
            meta.pop(key, None)
        obj["apiVersion"] = res.group_version
        obj["kind"] = res.kind
        if res.has_status and res.name not in STATUS_ON_CREATE_KEPT:
            obj.pop("status", None)
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = now()
        defaults.apply(self, res, obj, None)
        if not internal:
            causes = validation.validate_object(res, obj)
            if causes:
                raise errors.invalid(res, meta.get("name") or meta.get("generateName") or "", causes)
            defaults.admit(self, res, obj)
        if self.find(res, meta.get("namespace"), meta["name"]) is not None:
            raise errors.already_exists(res, meta["name"])
        if res.generation:
            meta["generation"] = 1
        if dry_run:
            return obj
        meta["resourceVersion"] = self._next_rv()
        self._commit(res, obj, "ADDED")
        self.dirty = True
        return clone(obj)

    def _check_kind(self, res, obj):
        kind = obj.get("kind")
        if kind and kind != res.kind:
            raise errors.bad_request("the API version in the data (%s) does not match the expected "
                                     "API version (%s)" % (obj.get("apiVersion"), res.group_version)
                                     if obj.get("apiVersion") not in (None, res.group_version)
                                     else "kind %s does not match %s" % (kind, res.kind))

    def update(self, res, namespace, name, body, dry_run=False, subresource=None, internal=False,
               owned=False):
        old = self.find(res, namespace, name)
        if old is None:
            raise errors.not_found(res, name)
        if not isinstance(body, dict):
            raise errors.bad_request("the body of the request must be an object")
        obj = body if owned else clone(body)
        meta = obj.get("metadata") or {}
        obj["metadata"] = meta
        self._check_kind(res, obj)
        if meta.get("name") and meta["name"] != name:
            raise errors.bad_request("the name of the object (%s) does not match the name on the URL (%s)"
                                     % (meta["name"], name))
        if res.namespaced and meta.get("namespace") and meta["namespace"] != namespace:
            raise errors.bad_request("the namespace of the provided object does not match the "
                                     "namespace sent on the request")
        given_rv = meta.get("resourceVersion")
        if given_rv and given_rv != old["metadata"]["resourceVersion"]:
            raise errors.conflict(res, name)
        if meta.get("uid") and meta["uid"] != old["metadata"]["uid"]:
            raise errors.conflict(res, name)
        meta["name"] = name
        if res.namespaced:
            meta["namespace"] = namespace
        for key in ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds",
                    "generation", "generateName"):
            if key in old["metadata"]:
                meta[key] = old["metadata"][key]
            else:
                meta.pop(key, None)
        obj["apiVersion"] = res.group_version
        obj["kind"] = res.kind
        if subresource == "status":
            # only status changes through the status subresource
            new = clone(old)
            new["status"] = obj.get("status", {})
            obj = new
        elif res.has_status and not internal:
            if "status" in old:
                obj["status"] = clone(old["status"])
            else:
                obj.pop("status", None)
        defaults.apply(self, res, obj, old)
        if not internal:
            causes = validation.validate_object(res, obj)
            causes.extend(defaults.immutable(res, old, obj))
            if causes:
                raise errors.invalid(res, name, causes)
        if res.generation and subresource != "status":
            if _without(old, "metadata", "status") != _without(obj, "metadata", "status"):
                meta["generation"] = old["metadata"].get("generation", 1) + 1
        meta["resourceVersion"] = old["metadata"]["resourceVersion"]
        if obj == old:
            return clone(old)
        if dry_run:
            return obj
        if meta.get("deletionTimestamp") and not meta.get("finalizers"):
            meta["resourceVersion"] = self._next_rv()
            self._commit(res, obj, "DELETED")
            self._collect(res, obj, "Background")
            self.dirty = True
            return clone(obj)
        meta["resourceVersion"] = self._next_rv()
        self._commit(res, obj, "MODIFIED")
        if not internal:
            self.dirty = True
        return clone(obj)

    def patch(self, res, namespace, name, content_type, body, dry_run=False, subresource=None):
        old = self.find(res, namespace, name)
        if old is None:
            raise errors.not_found(res, name)
        ctype = (content_type or "").split(";")[0].strip()
        if ctype == "application/strategic-merge-patch+json":
            new = patching.strategic_merge(old, body)
        elif ctype == "application/merge-patch+json":
            if not isinstance(body, dict):
                raise errors.bad_request("merge patch must be a JSON object")
            new = patching.merge_patch(old, body)
        elif ctype == "application/json-patch+json":
            new = patching.json_patch(old, body)
        else:
            raise errors.unsupported_media_type(ctype)
        if not isinstance(new, dict):
            raise errors.bad_request("the patch must produce an object")
        meta = new.setdefault("metadata", {})
        rv = meta.get("resourceVersion")
        if rv is not None and rv != old["metadata"]["resourceVersion"]:
            raise errors.conflict(res, name)
        if rv is None:
            meta["resourceVersion"] = old["metadata"]["resourceVersion"]
        if subresource != "status" and res.has_status:
            # a patch to the main resource leaves status alone
            if "status" in old:
                new["status"] = clone(old["status"])
            else:
                new.pop("status", None)
        return self.update(res, namespace, name, new, dry_run=dry_run, subresource=subresource, owned=True)

    def delete(self, res, namespace, name, options=None, dry_run=False, internal=False):
        options = options or {}
        old = self.find(res, namespace, name)
        if old is None:
            raise errors.not_found(res, name)
        pre = options.get("preconditions") or {}
        if pre.get("uid") and pre["uid"] != old["metadata"]["uid"]:
            raise errors.ApiError(409, "Conflict", 'Operation cannot be fulfilled on %s "%s": '
                                  "Precondition failed: UID in precondition: %s, UID in object meta: %s"
                                  % (res.qualified, name, pre["uid"], old["metadata"]["uid"]))
        if pre.get("resourceVersion") and pre["resourceVersion"] != old["metadata"]["resourceVersion"]:
            raise errors.conflict(res, name)
        obj = clone(old)
        if dry_run:
            return obj
        if obj["metadata"].get("finalizers"):
            if not obj["metadata"].get("deletionTimestamp"):
                obj["metadata"]["deletionTimestamp"] = now()
                obj["metadata"]["deletionGracePeriodSeconds"] = 0
                obj["metadata"]["resourceVersion"] = self._next_rv()
                self._commit(res, obj, "MODIFIED")
            return clone(obj)
        obj["metadata"]["resourceVersion"] = self._next_rv()
        self._commit(res, obj, "DELETED")
        if res.name == "namespaces":
            for other in resources.RESOURCES:
                if other.namespaced:
                    for child in self.all(other, name):
                        self.delete(other, name, child["metadata"]["name"], internal=True)
        if res.name == "pods":
            self.logs.pop((namespace, name), None)
        policy = options.get("propagationPolicy") or DEFAULT_PROPAGATION.get(res.name, "Background")
        if options.get("orphanDependents") is True:
            policy = "Orphan"
        self._collect(res, obj, policy)
        if not internal:
            self.dirty = True
        return clone(obj)

    def _collect(self, res, owner, policy):
        """Garbage collection of the objects `owner` owns."""
        uid = owner["metadata"]["uid"]
        for other in resources.RESOURCES:
            for child in list(self._bucket(other).values()):
                refs = child["metadata"].get("ownerReferences") or []
                if not any(ref.get("uid") == uid for ref in refs):
                    continue
                meta = child["metadata"]
                if policy == "Orphan":
                    updated = clone(child)
                    updated["metadata"]["ownerReferences"] = [r for r in refs if r.get("uid") != uid]
                    if not updated["metadata"]["ownerReferences"]:
                        del updated["metadata"]["ownerReferences"]
                    updated["metadata"]["resourceVersion"] = self._next_rv()
                    self._commit(other, updated, "MODIFIED")
                else:
                    try:
                        self.delete(other, meta.get("namespace"), meta["name"], internal=True)
                    except errors.ApiError:
                        pass

    def put_internal(self, res, obj):
        """A controller's write: no validation, bumps resourceVersion, keeps `dirty`."""
        meta = obj["metadata"]
        current = self.find(res, meta.get("namespace"), meta["name"])
        if current is None:
            return self.create(res, meta.get("namespace"), obj, internal=True)
        if current == obj:
            return current
        obj = clone(obj)
        obj["metadata"]["resourceVersion"] = self._next_rv()
        self._commit(res, obj, "MODIFIED")
        return obj


from . import defaults  # noqa: E402  (defaults needs Store's helpers)
