# -*- coding: utf-8 -*-
# Copyright: kubegpu.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filter kubegpu.nvidia.daemonset_ready: whether a DaemonSet object has rolled out."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError


def daemonset_ready(daemonset):
    """True when the controller has seen the DaemonSet's current spec and every pod it wants is updated and ready.

    That is ``kubectl rollout status``'s test: ``status.observedGeneration`` equals ``metadata.generation``
    and ``desiredNumberScheduled`` equals both ``updatedNumberScheduled`` and ``numberReady``. An empty
    object (none found) is not ready.
    """
    if daemonset is None or daemonset == {}:
        return False
    if not isinstance(daemonset, dict):
        raise AnsibleFilterError("daemonset_ready expects a DaemonSet object (a dict), got %s" % type(daemonset).__name__)
    metadata = daemonset.get("metadata") or {}
    status = daemonset.get("status") or {}
    desired = status.get("desiredNumberScheduled")
    if desired is None:
        return False
    return (status.get("observedGeneration", -1) == metadata.get("generation", 0)
            and desired == status.get("updatedNumberScheduled", 0)
            and desired == status.get("numberReady", 0))


class FilterModule:
    """The collection's filters."""

    def filters(self):
        return {"daemonset_ready": daemonset_ready}
