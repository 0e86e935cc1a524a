# -*- coding: utf-8 -*-
# Copyright: kubegpu.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters kubegpu.nvidia.daemonset_ready, daemonset_revision and daemonset_rollout_status: a DaemonSet's rollout."""

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


def _checked(daemonset, name):
    if daemonset is None:
        return {}
    if not isinstance(daemonset, dict):
        raise AnsibleFilterError("%s expects a DaemonSet object (a dict), got %s" % (name, type(daemonset).__name__))
    return daemonset


def daemonset_revision(daemonset):
    """``<uid>/<generation>`` of a DaemonSet: another object, or a new spec of it, gives another revision; "" for none."""
    metadata = _checked(daemonset, "daemonset_revision").get("metadata") or {}
    if "uid" not in metadata:
        return ""
    return "%s/%s" % (metadata["uid"], metadata.get("generation", ""))


def daemonset_rollout_status(daemonset):
    """The rollout as ``kubectl rollout status`` would judge it, in words; ``not found`` for no object."""
    daemonset = _checked(daemonset, "daemonset_rollout_status")
    if not daemonset:
        return "not found"
    status = daemonset.get("status") or {}
    return "desired %s, updated %s, ready %s, observedGeneration %s of generation %s" % (
        status.get("desiredNumberScheduled", "?"), status.get("updatedNumberScheduled", 0),
        status.get("numberReady", 0), status.get("observedGeneration", "none"),
        (daemonset.get("metadata") or {}).get("generation", "?"))


class FilterModule:
    """The collection's filters."""

    def filters(self):
        return {"daemonset_ready": daemonset_ready, "daemonset_revision": daemonset_revision,
                "daemonset_rollout_status": daemonset_rollout_status}
