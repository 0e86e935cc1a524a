# -*- coding: utf-8 -*-
# Copyright: kubegpu.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter kubegpu.nvidia.gpu_validation_recorded: the nodes whose recorded GPU validation still holds."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# The filters import the module_utils they use when called, not here (docs/development.md, Conventions).

from ansible.errors import AnsibleFilterError


def gpu_validation_recorded(nodes, revision=""):
    """The results, without a pod, of the ``nodes`` whose record (``k8s_gpu_validate`` with ``record``) still holds.

    ``nodes``: Node objects as the API lists them, or nodes as ``k8s_gpu_label`` returns them with
    ``return_nodes``. ``revision``: the revision the records were written with.
    """
    from ansible_collections.kubegpu.nvidia.plugins.module_utils.gpu_validation import recorded_results

    if nodes is None:
        return []
    if not isinstance(nodes, list) or not all(isinstance(node, dict) for node in nodes):
        raise AnsibleFilterError("gpu_validation_recorded expects a list of nodes (dicts), got %s" % type(nodes).__name__)
    if not isinstance(revision, str):
        raise AnsibleFilterError("gpu_validation_recorded: revision must be a string, got %s" % type(revision).__name__)
    return recorded_results(nodes, revision)


class FilterModule:
    """The collection's filters."""

    def filters(self):
        return {"gpu_validation_recorded": gpu_validation_recorded}
