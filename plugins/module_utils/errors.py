# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.nvidia maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The collection's one error model.

Every failure a user can cause, or that the node or the cluster causes, is raised as a
``KubegpuError`` carrying a ``kind``; each module's ``main()`` hands its work to
``run_module``, which turns the error into one ``fail_json`` with ``msg`` and ``error_kind``.
Any other exception is a bug in the collection: it is reported as such, with the
exception's type, never as bad input and never as a bare traceback.

Kinds (``error_kind`` in a module's failure):

``input``       an option, a file's content or a fact the module cannot use
``api``         the Kubernetes API could not be reached, or refused a request
``conflict``    the API answered 409 and retries did not resolve it
``not_found``   something named does not exist (a node, a namespace, a file)
``timeout``     a command, a request or a wait ran out of time
``runtime``     the node could not do what was asked (a write, a command, a library)
``dependency``  a Python library the module needs is missing on the host it runs on
``node_match``  an inventory host matches no Kubernetes node, or two hosts one node
``write``       some node writes of a batch failed (the result tells which were done)
``bug``         anything else: a defect in the collection, to be reported
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import traceback

KINDS = ("input", "api", "conflict", "not_found", "timeout", "runtime", "dependency", "node_match", "write", "bug")
BUG_REPORT = "https://github.com/kubegpu/kubegpu.nvidia/issues"


class KubegpuError(Exception):
    """A failure with a one-line message for the user and what kind of failure it is.

    ``details`` are extra result keys for ``fail_json`` (for example ``rc``, ``stdout``, ``nodes``).
    """

    kind = "runtime"

    def __init__(self, msg, kind=None, **details):
        super(KubegpuError, self).__init__(msg)
        self.msg = msg
        if kind is not None:
            if kind not in KINDS:
                raise ValueError("unknown error kind %r" % kind)
            self.kind = kind
        self.details = details

    def __str__(self):
        return self.msg


class InputError(KubegpuError):
    """An option, a file or a fact the module cannot use."""

    kind = "input"


class ApiError(KubegpuError):
    """The Kubernetes API could not be used; ``status`` is the HTTP status when there was an answer."""

    kind = "api"

    def __init__(self, msg, status=None, kind=None, **details):
        if kind is None:
            kind = {404: "not_found", 409: "conflict"}.get(status)
        super(ApiError, self).__init__(msg, kind=kind, **details)
        self.status = status


class TimeoutExpired(KubegpuError):
    """A command, a request or a wait ran out of time."""

    kind = "timeout"


def bug_message(exc):
    """The message for an exception that is not a ``KubegpuError``: a defect of the collection."""
    return "bug in kubegpu.nvidia (%s: %s); please report it at %s with this message" % (
        type(exc).__name__, exc, BUG_REPORT)


def fail(module, exc, **result):
    """``fail_json`` for ``exc`` (a ``KubegpuError`` or any other exception) with ``result`` merged in.

    The traceback goes into the result's ``exception`` (shown with ``-vvv``) only for a bug.
    """
    if isinstance(exc, KubegpuError):
        result.update(exc.details)
        module.fail_json(msg=exc.msg, error_kind=exc.kind, **result)
    module.fail_json(msg=bug_message(exc), error_kind="bug", exception=traceback.format_exc(), **result)


def run_module(module, work, extra=None):
    """Run ``work(module)`` and ``exit_json`` with the dict it returns; fail once on any exception.

    ``extra`` is a callable returning result keys a failure carries as well (for example the API
    request counts so far).
    """
    try:
        result = work(module)
    except Exception as exc:  # pylint: disable=broad-except  # the one place failures become results
        fail(module, exc, **(extra() if extra else {}))
    module.exit_json(**result)
