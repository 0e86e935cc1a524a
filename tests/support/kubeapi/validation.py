"""Field validation as kube-apiserver applies it (the part this collection can trip over)."""

import re

_NAME_PART = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")

QUALIFIED_NAME_MSG = (
    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end "
    "with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for "
    "validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')")
LABEL_VALUE_MSG = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', "
    "and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or "
    "'12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')")
SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
    "and must start and end with an alphanumeric character (e.g. 'example.com', regex used for "
    "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')")
DNS_LABEL_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and "
    "must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used "
    "for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')")

TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")


def qualified_name_errors(key):
    if not isinstance(key, str):
        return ["must be a string"]
    errs = []
    parts = key.split("/")
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            errs.append("prefix part must be non-empty")
        else:
            if len(prefix) > 253:
                errs.append("prefix part must be no more than 253 characters")
            if not _DNS1123_SUBDOMAIN.match(prefix):
                errs.append("prefix part " + SUBDOMAIN_MSG)
    else:
        return [QUALIFIED_NAME_MSG.replace("name part", "a qualified name", 1)
                + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"]
    if not name:
        errs.append("name part must be non-empty")
    elif len(name) > 63:
        errs.append("name part must be no more than 63 characters")
    if name and not _NAME_PART.match(name):
        errs.append(QUALIFIED_NAME_MSG)
    return errs


def label_value_errors(value):
    if not isinstance(value, str):
        return ["must be a string"]
    errs = []
    if len(value) > 63:
        errs.append("must be no more than 63 characters")
    if not _LABEL_VALUE.match(value):
        errs.append(LABEL_VALUE_MSG)
    return errs


def _invalid(field, value, msg):
    return (field, 'Invalid value: "%s": %s' % (value, msg), "FieldValueInvalid")


def validate_object(res, obj):
    """A list of (field, message, reason) causes; empty when the object is valid."""
    causes = []
    meta = obj.get("metadata") or {}
    name = meta.get("name") or ""
    if not name:
        causes.append(("metadata.name", "Required value: name or generateName is required",
                       "FieldValueRequired"))
    else:
        if res.name == "namespaces" or (res.namespaced and res.name in ("services",)):
            ok, msg, limit = _DNS1123_LABEL.match(name), DNS_LABEL_MSG, 63
        elif res.group == "rbac.authorization.k8s.io":
            ok, msg, limit = "/" not in name and name not in (".", ".."), \
                "may not contain '/'", 10**9
        else:
            ok, msg, limit = _DNS1123_SUBDOMAIN.match(name), SUBDOMAIN_MSG, 253
        if not ok:
            causes.append(_invalid("metadata.name", name, msg))
        if len(name) > limit:
            causes.append(_invalid("metadata.name", name, "must be no more than %d characters" % limit))
    labels = meta.get("labels") or {}
    if not isinstance(labels, dict):
        causes.append(("metadata.labels", "Invalid value: must be a map", "FieldValueTypeInvalid"))
    else:
        for key, value in labels.items():
            for err in qualified_name_errors(key):
                causes.append(_invalid("metadata.labels", key, err))
            if value is None:
                value = ""
            for err in label_value_errors(value):
                causes.append(_invalid("metadata.labels", value, err))
    annotations = meta.get("annotations") or {}
    if isinstance(annotations, dict):
        for key, value in annotations.items():
            for err in qualified_name_errors(key):
                causes.append(_invalid("metadata.annotations", key, err))
            if not isinstance(value, str):
                causes.append(("metadata.annotations", "Invalid value: annotation values must be strings",
                               "FieldValueTypeInvalid"))
    spec = obj.get("spec") or {}
    if res.name == "nodes":
        causes.extend(validate_taints(spec.get("taints"), "spec.taints"))
    if res.name == "pods":
        causes.extend(validate_pod_spec(spec, "spec"))
    if res.kind in ("DaemonSet", "Deployment", "ReplicaSet", "Job"):
        causes.extend(validate_workload(res, spec))
    if res.name == "configmaps":
        for key in list((obj.get("data") or {})) + list((obj.get("binaryData") or {})):
            if not re.match(r"^[-._a-zA-Z0-9]+$", key) or len(key) > 253:
                causes.append(_invalid("data", key, "a valid config key must consist of alphanumeric "
                                       "characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME', "
                                       " or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')"))
    if res.name == "runtimeclasses":
        handler = obj.get("handler")
        if not handler:
            causes.append(("handler", "Required value", "FieldValueRequired"))
        elif not _DNS1123_LABEL.match(handler):
            causes.append(_invalid("handler", handler, DNS_LABEL_MSG))
    if res.name == "priorityclasses" and not isinstance(obj.get("value"), int):
        causes.append(("value", "Required value", "FieldValueRequired"))
    if res.group == "resource.k8s.io":
        from . import dra
        causes.extend(dra.validate(res, obj))
    if res.name == "poddisruptionbudgets":
        if spec.get("minAvailable") is not None and spec.get("maxUnavailable") is not None:
            causes.append(("spec", "Invalid value: minAvailable and maxUnavailable cannot be both set",
                           "FieldValueInvalid"))
    return causes


def validate_taints(taints, path):
    causes = []
    seen = set()
    for i, taint in enumerate(taints or []):
        where = "%s[%d]" % (path, i)
        if not isinstance(taint, dict):
            causes.append((where, "Invalid value: must be an object", "FieldValueTypeInvalid"))
            continue
        key = taint.get("key") or ""
        if not key:
            causes.append((where + ".key", "Required value", "FieldValueRequired"))
        for err in qualified_name_errors(key) if key else ():
            causes.append(_invalid(where + ".key", key, err))
        value = taint.get("value") or ""
        for err in label_value_errors(value):
            causes.append(_invalid(where + ".value", value, err))
        effect = taint.get("effect") or ""
        if not effect:
            causes.append((where + ".effect", "Required value", "FieldValueRequired"))
        elif effect not in TAINT_EFFECTS:
            causes.append((where + ".effect", 'Unsupported value: "%s": supported values: '
                           '"NoSchedule", "PreferNoSchedule", "NoExecute"' % effect,
                           "FieldValueNotSupported"))
        if (key, effect) in seen:
            causes.append((where, 'Duplicate value: "%s"' % key, "FieldValueDuplicate"))
        seen.add((key, effect))
    return causes


def validate_tolerations(tolerations, path):
    causes = []
    for i, tol in enumerate(tolerations or []):
        where = "%s[%d]" % (path, i)
        op = tol.get("operator") or "Equal"
        if op not in ("Equal", "Exists"):
            causes.append((where + ".operator", 'Unsupported value: "%s": supported values: '
                           '"Equal", "Exists"' % op, "FieldValueNotSupported"))
        if op == "Exists" and tol.get("value"):
            causes.append(_invalid(where + ".operator", op,
                                   "value must be empty when `operator` is 'Exists'"))
        if not tol.get("key") and op != "Exists":
            causes.append(_invalid(where + ".operator", op,
                                   "operator must be Exists when `key` is empty, which means "
                                   "\"match all values and all keys\""))
        effect = tol.get("effect")
        if effect and effect not in TAINT_EFFECTS:
            causes.append((where + ".effect", 'Unsupported value: "%s": supported values: '
                           '"NoSchedule", "PreferNoSchedule", "NoExecute"' % effect,
                           "FieldValueNotSupported"))
        if tol.get("key"):
            for err in qualified_name_errors(tol["key"]):
                causes.append(_invalid(where + ".key", tol["key"], err))
    return causes


def validate_pod_spec(spec, path):
    causes = []
    containers = spec.get("containers")
    if not containers:
        causes.append((path + ".containers", "Required value", "FieldValueRequired"))
    names = set()
    for i, ctr in enumerate((containers or []) + (spec.get("initContainers") or [])):
        where = "%s.containers[%d]" % (path, i)
        name = ctr.get("name") if isinstance(ctr, dict) else None
        if not name:
            causes.append((where + ".name", "Required value", "FieldValueRequired"))
        elif not _DNS1123_LABEL.match(name):
            causes.append(_invalid(where + ".name", name, DNS_LABEL_MSG))
        elif name in names:
            causes.append((where + ".name", 'Duplicate value: "%s"' % name, "FieldValueDuplicate"))
        names.add(name)
        if isinstance(ctr, dict) and not ctr.get("image"):
            causes.append((where + ".image", "Required value", "FieldValueRequired"))
        if isinstance(ctr, dict):
            resources = ctr.get("resources") or {}
            limits = resources.get("limits") or {}
            requests = resources.get("requests") or {}
            for rname, value in requests.items():
                if rname.startswith("nvidia.com/") and rname in limits and str(limits[rname]) != str(value):
                    causes.append(_invalid("%s.resources.requests[%s]" % (where, rname), value,
                                           "must be equal to %s limit of %s" % (rname, limits[rname])))
                if rname.startswith("nvidia.com/") and rname not in limits:
                    causes.append(("%s.resources.limits" % where,
                                   "Required value: Limit must be set for non overcommitable resources",
                                   "FieldValueRequired"))
    causes.extend(validate_tolerations(spec.get("tolerations"), path + ".tolerations"))
    policy = spec.get("restartPolicy")
    if policy and policy not in ("Always", "OnFailure", "Never"):
        causes.append((path + ".restartPolicy", 'Unsupported value: "%s": supported values: '
                       '"Always", "OnFailure", "Never"' % policy, "FieldValueNotSupported"))
    return causes


def validate_workload(res, spec):
    from .labelsel import matches, selector_from_dict

    causes = []
    template = spec.get("template") or {}
    selector = spec.get("selector")
    if res.kind != "Job":
        if not selector:
            causes.append(("spec.selector", "Required value", "FieldValueRequired"))
        elif not matches(selector_from_dict(selector),
                         (template.get("metadata") or {}).get("labels") or {}):
            causes.append(_invalid("spec.template.metadata.labels",
                                   (template.get("metadata") or {}).get("labels"),
                                   "`selector` does not match template `labels`"))
    tspec = template.get("spec") or {}
    causes.extend(validate_pod_spec(tspec, "spec.template.spec"))
    policy = tspec.get("restartPolicy")
    if res.kind == "Job":
        if policy not in ("Never", "OnFailure"):
            causes.append(("spec.template.spec.restartPolicy", 'Required value: valid values: '
                           '"OnFailure", "Never"', "FieldValueRequired"))
    elif policy not in (None, "Always"):
        causes.append(("spec.template.spec.restartPolicy", 'Unsupported value: "%s": supported '
                       'values: "Always"' % policy, "FieldValueNotSupported"))
    return causes
