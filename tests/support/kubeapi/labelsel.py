"""Label and field selectors as kube-apiserver parses and applies them."""

import re

from .errors import bad_request

_TOKEN = re.compile(r"\s*(!=|==|=|!|,|\(|\)|>|<|[^\s!=,()<>]+)")


class Requirement:
    def __init__(self, key, op, values=()):
        self.key = key
        self.op = op
        self.values = list(values)

    def matches(self, labels):
        labels = labels or {}
        present = self.key in labels
        value = labels.get(self.key)
        if self.op == "exists":
            return present
        if self.op == "!exists":
            return not present
        if self.op in ("=", "==", "in"):
            return present and value in self.values
        if self.op in ("!=", "notin"):
            return not present or value not in self.values
        if self.op in (">", "<"):
            try:
                number = int(value)
            except (TypeError, ValueError):
                return False
            limit = int(self.values[0])
            return number > limit if self.op == ">" else number < limit
        return False


def _tokens(text):
    pos, out = 0, []
    text = text.strip()
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if not match or match.end() == pos:
            raise bad_request("unable to parse requirement: invalid selector %r" % text)
        out.append(match.group(1))
        pos = match.end()
        while pos < len(text) and text[pos].isspace():
            pos += 1
    return out


def parse_label_selector(text):
    """A list of Requirement; raises a 400 ApiError on syntax errors."""
    if not text or not text.strip():
        return []
    toks = _tokens(text)
    reqs, i = [], 0

    def fail(msg):
        raise bad_request("unable to parse requirement: %s" % msg)

    while i < len(toks):
        tok = toks[i]
        if tok == "!":
            if i + 1 >= len(toks):
                fail("missing key after '!'")
            reqs.append(Requirement(toks[i + 1], "!exists"))
            i += 2
        else:
            key = tok
            if key in (",", "(", ")", "=", "==", "!="):
                fail("found '%s', expected: identifier" % key)
            i += 1
            if i >= len(toks) or toks[i] == ",":
                reqs.append(Requirement(key, "exists"))
            else:
                op = toks[i]
                i += 1
                if op in ("=", "==", "!=", ">", "<"):
                    value = ""
                    if i < len(toks) and toks[i] not in (",",):
                        value = toks[i]
                        i += 1
                    if op in (">", "<"):
                        try:
                            int(value)
                        except ValueError:
                            fail("for 'Gt', 'Lt' operators, the value must be an integer")
                    reqs.append(Requirement(key, op, [value]))
                elif op in ("in", "notin"):
                    if i >= len(toks) or toks[i] != "(":
                        fail("found '%s', expected: '('" % (toks[i] if i < len(toks) else ""))
                    i += 1
                    values = []
                    while i < len(toks) and toks[i] != ")":
                        if toks[i] != ",":
                            values.append(toks[i])
                        i += 1
                    if i >= len(toks):
                        fail("found '', expected: ')'")
                    i += 1
                    reqs.append(Requirement(key, op, values))
                else:
                    fail("found '%s', expected: in, notin, =, ==, !=, gt, lt" % op)
        if i < len(toks):
            if toks[i] != ",":
                fail("found '%s', expected: ','" % toks[i])
            i += 1
    for req in reqs:
        _check_key(req.key)
    return reqs


def _check_key(key):
    from .validation import qualified_name_errors

    errs = qualified_name_errors(key)
    if errs:
        raise bad_request("unable to parse requirement: invalid label key %r: %s" % (key, errs[0]))


def selector_from_dict(selector):
    """Requirements from a LabelSelector object ({matchLabels, matchExpressions})."""
    reqs = []
    if not selector:
        return reqs
    for key, value in (selector.get("matchLabels") or {}).items():
        reqs.append(Requirement(key, "=", [value]))
    for expr in selector.get("matchExpressions") or []:
        op = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!exists"}.get(
            expr.get("operator"), "in")
        reqs.append(Requirement(expr.get("key"), op, expr.get("values") or []))
    return reqs


def matches(reqs, labels):
    return all(req.matches(labels) for req in reqs)


FIELDS_ANY = ("metadata.name", "metadata.namespace")
FIELDS = {
    "pods": ("spec.nodeName", "status.phase", "spec.restartPolicy", "spec.schedulerName",
             "spec.serviceAccountName", "status.podIP", "status.nominatedNodeName",
             "spec.hostNetwork"),
    "nodes": ("spec.unschedulable",),
    "secrets": ("type",),
    "events": ("involvedObject.kind", "involvedObject.name", "involvedObject.namespace",
               "involvedObject.uid", "reason", "type", "source"),
    "namespaces": ("status.phase",),
    "jobs": ("status.successful",),
    # pkg/registry/resource/resourceslice/strategy.go toSelectableFields
    "resourceslices": ("spec.driver", "spec.nodeName"),
}


def parse_field_selector(text, resource_name):
    """[(field, op, value)]; 400 for fields kube-apiserver does not index."""
    out = []
    if not text:
        return out
    allowed = FIELDS_ANY + FIELDS.get(resource_name, ())
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        for op in ("!=", "==", "="):
            if op in part:
                field, value = part.split(op, 1)
                break
        else:
            raise bad_request("invalid selector: '%s'; can't understand '%s'" % (text, part))
        field = field.strip()
        if field not in allowed:
            raise bad_request('field label not supported: %s' % field)
        out.append((field, "!=" if op == "!=" else "=", value.strip()))
    return out


def field_value(obj, path):
    cur = obj
    for part in path.split("."):
        if not isinstance(cur, dict):
            return ""
        cur = cur.get(part)
    if cur is None:
        if path == "spec.unschedulable" or path == "spec.hostNetwork":
            return "false"
        return ""
    if isinstance(cur, bool):
        return "true" if cur else "false"
    return str(cur)


def fields_match(reqs, obj):
    for field, op, value in reqs:
        actual = field_value(obj, field)
        if (actual == value) != (op == "="):
            return False
    return True
