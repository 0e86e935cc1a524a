# -*- coding: utf-8 -*-
# Copyright: kubegpu.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter kubegpu.nvidia.container_image: an image reference pinned by tag and/or digest, checked."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# The filters import the module_utils they use when called, not here (docs/development.md, Conventions).

from ansible.errors import AnsibleFilterError


def container_image(parts, prefix="image"):
    """``{"reference": "<registry>/<repository>[:<tag>][@<digest>]", "error": ""}``.

    When a part is not valid, ``reference`` is empty and ``error`` is one line naming the variable
    ``<prefix>_<part>`` and what is wrong, for an ``assert`` to show.
    """
    from ansible_collections.kubegpu.nvidia.plugins.module_utils.container_image import image_reference
    from ansible_collections.kubegpu.nvidia.plugins.module_utils.errors import InputError

    if not isinstance(parts, dict):
        raise AnsibleFilterError("container_image expects a dict with registry, repository, tag and digest, got %s"
                                 % type(parts).__name__)
    try:
        reference = image_reference(parts.get("registry"), parts.get("repository"), parts.get("tag"),
                                    parts.get("digest"), prefix=prefix)
    except InputError as err:
        return {"reference": "", "error": err.msg}
    return {"reference": reference, "error": ""}


class FilterModule:
    """The collection's filters."""

    def filters(self):
        return {"container_image": container_image}
