# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.nvidia maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Container image references, pinned by tag, by digest or by both.

A reference is ``[registry/]repository[:tag][@sha256:<64 hex>]`` with at least a tag or a digest, the
grammar of the OCI distribution reference (github.com/distribution/reference ``regexp.go``): the
registry is a host name or IP address with an optional port, the repository is ``/``-separated
lowercase components (``[a-z0-9]+`` joined by ``.``, ``_``, ``__`` or dashes), a tag is
``[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}`` and the digest is ``sha256:`` and 64 lowercase hex digits.
A runtime pulls a reference with a digest by that digest (the tag beside it is then informative).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.kubegpu.nvidia.plugins.module_utils.errors import InputError

_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_HOST = r"(?:%s(?:\.%s)*|\[[0-9A-Fa-f:]+\])" % (_DOMAIN_COMPONENT, _DOMAIN_COMPONENT)
REGISTRY = re.compile(r"^%s(?::[0-9]+)?$" % _HOST)
PATH_COMPONENT = re.compile(r"^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$")
TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
# distribution/reference NameTotalLengthMax: registry and repository together
NAME_MAX = 255


def _text(value, what):
    if value is None:
        return ""
    if not isinstance(value, str):
        raise InputError("%s must be a string, got %s" % (what, type(value).__name__))
    return value.strip()


def image_reference(registry, repository, tag="", digest="", prefix="image"):
    """``registry/repository[:tag][@digest]``, or InputError naming the ``<prefix>_*`` part that is wrong.

    ``registry`` may be empty (then the repository's first component may itself be a registry, as in
    ``localhost:5000/team/plugin``). At least one of ``tag`` and ``digest`` must be given.
    """
    names = dict((part, "%s_%s" % (prefix, part)) for part in ("registry", "repository", "tag", "digest"))
    registry = _text(registry, names["registry"])
    repository = _text(repository, names["repository"])
    tag = _text(tag, names["tag"])
    digest = _text(digest, names["digest"])

    if registry:
        if "://" in registry:
            raise InputError("%s %r is a host with an optional port, without a scheme (e.g. registry.example.com:5000)"
                             % (names["registry"], registry))
        if not REGISTRY.match(registry):
            raise InputError("%s %r is not a registry host[:port]" % (names["registry"], registry))
    if not repository:
        raise InputError("%s is empty: give the image's repository (e.g. nvidia/k8s-device-plugin)"
                         % names["repository"])
    if "@" in repository or re.search(r":[^/]*$", repository):
        raise InputError("%s %r carries a tag or digest: give the tag in %s and the digest in %s"
                         % (names["repository"], repository, names["tag"], names["digest"]))
    components = repository.split("/")
    if not registry and len(components) > 1 and ("." in components[0] or ":" in components[0]
                                                 or components[0] == "localhost"):
        if not REGISTRY.match(components[0]):
            raise InputError("%s %r starts with %r, which is not a registry host[:port]"
                             % (names["repository"], repository, components[0]))
        components = components[1:]
    for component in components:
        if not PATH_COMPONENT.match(component):
            raise InputError("%s %r has the component %r: components are lowercase letters and digits joined by "
                             "'.', '_', '__' or '-'" % (names["repository"], repository, component))
    name = "/".join(part for part in (registry, repository) if part)
    if len(name) > NAME_MAX:
        raise InputError("%s and %s together are %d characters, more than %d"
                         % (names["registry"], names["repository"], len(name), NAME_MAX))

    if "@" in tag:
        raise InputError("%s %r carries a digest: give it in %s" % (names["tag"], tag, names["digest"]))
    if tag and not TAG.match(tag):
        raise InputError("%s %r is not a tag (up to 128 letters, digits, '_', '.' and '-', not starting with "
                         "'.' or '-')" % (names["tag"], tag))
    if digest and not DIGEST.match(digest):
        raise InputError("%s %r is not a digest: sha256: followed by 64 lowercase hex digits" % (names["digest"], digest))
    if not tag and not digest:
        raise InputError("%s and %s are both empty: pin the image by a tag, a digest or both"
                         % (names["tag"], names["digest"]))

    return name + (":" + tag if tag else "") + ("@" + digest if digest else "")
