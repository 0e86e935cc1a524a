"""PATCH bodies: strategic merge (Kubernetes), JSON merge (RFC 7386) and JSON patch (RFC 6902)."""


from .errors import ApiError
from .util import clone

# Lists that strategic merge patch merges by a key; every other list is atomic
# (replaced whole), like tolerations, node taints, args or command.
MERGE_KEYS = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "volumes": "name",
    "env": "name",
    "imagePullSecrets": "name",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
    "hostAliases": "ip",
    "ownerReferences": "uid",
    "conditions": "type",
    "addresses": "type",
    "resourceClaims": "name",
    "topologySpreadConstraints": "topologyKey",
}
PRIMITIVE_SETS = ("finalizers",)


def _ports_key(parent_key):
    return "containerPort" if parent_key in ("containers", "initContainers", "ephemeralContainers") else "port"


def invalid_patch(message):
    return ApiError(422, "Invalid", message)


def strategic_merge(original, patch, _field=None, _parent=None):
    if not isinstance(patch, dict):
        raise ApiError(400, "BadRequest", "strategic merge patch must be a JSON object")
    if patch.get("$patch") == "replace":
        out = {k: clone(v) for k, v in patch.items() if k != "$patch"}
        return out
    if patch.get("$patch") == "delete":
        return None
    result = clone(original) if isinstance(original, dict) else {}
    retain = patch.get("$retainKeys")
    for key, value in patch.items():
        if key in ("$patch", "$retainKeys"):
            continue
        if key.startswith("$setElementOrder/"):
            continue
        if key.startswith("$deleteFromPrimitiveList/"):
            field = key.split("/", 1)[1]
            if isinstance(result.get(field), list):
                result[field] = [x for x in result[field] if x not in (value or [])]
            continue
        if value is None:
            result.pop(key, None)
            continue
        current = result.get(key)
        if isinstance(value, dict):
            merged = strategic_merge(current if isinstance(current, dict) else {}, value, key, _field)
            if merged is None:
                result.pop(key, None)
            else:
                result[key] = merged
        elif isinstance(value, list):
            merge_key = MERGE_KEYS.get(key)
            if key == "ports":
                merge_key = _ports_key(_field)
            if key in PRIMITIVE_SETS:
                base = list(current or [])
                for item in value:
                    if item not in base:
                        base.append(item)
                result[key] = base
            elif merge_key and isinstance(current, list):
                result[key] = _merge_list(current, value, merge_key, key)
            else:
                result[key] = [_strip_directives(v) for v in value
                               if not (isinstance(v, dict) and v.get("$patch") == "delete")]
        else:
            result[key] = value
    if retain is not None:
        for key in list(result):
            if key not in retain:
                result.pop(key)
    for key, value in patch.items():
        if key.startswith("$setElementOrder/"):
            field = key.split("/", 1)[1]
            _reorder(result, field, value)
    return result


def _strip_directives(value):
    if isinstance(value, dict):
        return {k: _strip_directives(v) for k, v in value.items()
                if not k.startswith("$") and v is not None}
    if isinstance(value, list):
        return [_strip_directives(v) for v in value]
    return value


def _merge_list(current, patch_items, merge_key, field):
    if any(isinstance(p, dict) and p.get("$patch") == "replace" for p in patch_items):
        return [_strip_directives(p) for p in patch_items
                if not (isinstance(p, dict) and p.get("$patch") == "replace")]
    result = clone(current)
    for item in patch_items:
        if not isinstance(item, dict) or merge_key not in item:
            raise invalid_patch("map: %r does not contain declared merge key: %s" % (item, merge_key))
        index = next((i for i, cur in enumerate(result)
                      if isinstance(cur, dict) and cur.get(merge_key) == item[merge_key]), None)
        if item.get("$patch") == "delete":
            if index is not None:
                result.pop(index)
            continue
        if index is None:
            result.append(_strip_directives(item))
        else:
            result[index] = strategic_merge(result[index], item, field)
    return result


def _reorder(result, field, order):
    items = result.get(field)
    if not isinstance(items, list) or not order:
        return
    if all(not isinstance(o, dict) for o in order):
        keyed = order
        rank = {v: i for i, v in enumerate(keyed)}
        items.sort(key=lambda v: rank.get(v, len(rank)))
        return
    key = next(iter(order[0]), None)
    rank = {o.get(key): i for i, o in enumerate(order)}
    items.sort(key=lambda v: rank.get(v.get(key) if isinstance(v, dict) else None, len(rank)))


def merge_patch(original, patch):
    """RFC 7386."""
    if not isinstance(patch, dict):
        return clone(patch)
    result = clone(original) if isinstance(original, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _pointer(path):
    if path == "":
        return []
    if not path.startswith("/"):
        raise invalid_patch("json patch path %r must start with '/'" % path)
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _parent(doc, parts, op, path):
    cur = doc
    for part in parts[:-1]:
        if isinstance(cur, dict) and part in cur:
            cur = cur[part]
        elif isinstance(cur, list) and part.isdigit() and int(part) < len(cur):
            cur = cur[int(part)]
        else:
            raise invalid_patch("jsonpatch %s operation does not apply: doc is missing path: %s"
                                % (op, path))
    return cur


def _get(doc, path, op):
    parts = _pointer(path)
    if not parts:
        return doc
    parent = _parent(doc, parts, op, path)
    last = parts[-1]
    if isinstance(parent, dict) and last in parent:
        return parent[last]
    if isinstance(parent, list) and last.isdigit() and int(last) < len(parent):
        return parent[int(last)]
    raise invalid_patch("jsonpatch %s operation does not apply: doc is missing path: %s" % (op, path))


def _remove(doc, path, op="remove"):
    parts = _pointer(path)
    parent = _parent(doc, parts, op, path)
    last = parts[-1]
    if isinstance(parent, dict) and last in parent:
        return parent.pop(last)
    if isinstance(parent, list) and last.isdigit() and int(last) < len(parent):
        return parent.pop(int(last))
    raise invalid_patch("jsonpatch %s operation does not apply: doc is missing path: %s" % (op, path))


def _add(doc, path, value, op="add", replace=False):
    parts = _pointer(path)
    if not parts:
        return value
    parent = _parent(doc, parts, op, path)
    last = parts[-1]
    if isinstance(parent, dict):
        if replace and last not in parent:
            raise invalid_patch("jsonpatch replace operation does not apply: doc is missing key: %s" % path)
        parent[last] = value
    elif isinstance(parent, list):
        if last == "-" and not replace:
            parent.append(value)
        elif last.isdigit() and int(last) <= len(parent) - (1 if replace else 0):
            if replace:
                parent[int(last)] = value
            else:
                parent.insert(int(last), value)
        else:
            raise invalid_patch("jsonpatch %s operation does not apply: index out of range: %s" % (op, path))
    else:
        raise invalid_patch("jsonpatch %s operation does not apply: doc is missing path: %s" % (op, path))
    return doc


def json_patch(original, ops):
    """RFC 6902."""
    if not isinstance(ops, list):
        raise ApiError(400, "BadRequest", "json patch must be a list of operations")
    doc = clone(original)
    for op in ops:
        name = op.get("op") if isinstance(op, dict) else None
        path = op.get("path", "") if isinstance(op, dict) else ""
        if name == "add":
            doc = _add(doc, path, clone(op.get("value")))
        elif name == "remove":
            _remove(doc, path)
        elif name == "replace":
            doc = _add(doc, path, clone(op.get("value")), "replace", replace=True)
        elif name == "move":
            value = _remove(doc, op.get("from", ""), "move")
            doc = _add(doc, path, value, "move")
        elif name == "copy":
            value = clone(_get(doc, op.get("from", ""), "copy"))
            doc = _add(doc, path, value, "copy")
        elif name == "test":
            if _get(doc, path, "test") != op.get("value"):
                raise invalid_patch("testing value %s failed" % path)
        else:
            raise invalid_patch("Unexpected kind: %s" % name)
    return doc
