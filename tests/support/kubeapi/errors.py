"""Kubernetes `Status` errors."""


class ApiError(Exception):
    """An error answered as a meta/v1 Status object."""

    def __init__(self, code, reason, message, details=None, headers=None):
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details
        self.headers = headers or {}

    def status(self):
        body = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details is not None:
            body["details"] = self.details
        return body


def _details(res, name, **extra):
    details = {}
    if name:
        details["name"] = name
    if res is not None:
        if res.group:
            details["group"] = res.group
        details["kind"] = res.name
    details.update(extra)
    return details


def not_found(res, name):
    return ApiError(404, "NotFound", '%s "%s" not found' % (res.qualified, name),
                    _details(res, name))


def already_exists(res, name):
    return ApiError(409, "AlreadyExists", '%s "%s" already exists' % (res.qualified, name),
                    _details(res, name))


def conflict(res, name):
    return ApiError(
        409, "Conflict",
        'Operation cannot be fulfilled on %s "%s": the object has been modified; '
        "please apply your changes to the latest version and try again" % (res.qualified, name),
        _details(res, name))


def invalid(res, name, causes):
    """causes: [(field, message, reason)]"""
    text = "; ".join("%s: %s" % (field, msg) for field, msg, _reason in causes)
    details = _details(res, name, causes=[
        {"reason": reason, "message": msg, "field": field} for field, msg, reason in causes])
    details["kind"] = res.kind
    return ApiError(422, "Invalid", '%s "%s" is invalid: %s' % (res.kind, name, text), details)


def bad_request(message):
    return ApiError(400, "BadRequest", message)


def forbidden(message, res=None, name=None):
    return ApiError(403, "Forbidden", message, _details(res, name))


def unauthorized():
    return ApiError(401, "Unauthorized", "Unauthorized")


def method_not_allowed():
    return ApiError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")


def unsupported_media_type(ctype):
    return ApiError(415, "UnsupportedMediaType",
                    "the body of the request was in an unknown format - accepted media types include: "
                    "application/json-patch+json, application/merge-patch+json, "
                    "application/strategic-merge-patch+json (got %s)" % ctype)
