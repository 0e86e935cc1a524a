# -*- coding: utf-8 -*-
# Copyright: kubegpu.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What stops the device plugin role before it applies anything, as one-line reasons.

``input_problems`` checks the role variables the manifests take as they are (images, the MPS root, the user GPU
Feature Discovery runs as); ``health_checks`` turns the health check variables into the plugin's environment
(``DP_DISABLE_HEALTHCHECKS``, ``DP_ENABLE_HEALTHCHECKS``) or the reasons they cannot be; ``nfd_problem`` checks
that GPU Feature Discovery has a Node Feature Discovery to publish to, from the NodeFeature
CustomResourceDefinition as the cluster has it.  Configurations the device
plugin itself would refuse are device_plugin_config.py's.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import re

NODEFEATURE_CRD = "nodefeatures.nfd.k8s-sigs.io"
MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGER = "kubegpu.nvidia"

# an absolute path below / of printable ASCII without blanks (the path lands in the DaemonSet's hostPath volumes)
_ABSOLUTE_PATH = re.compile(r"/[!-~]+")
_USER_ID = re.compile(r"[0-9]+")

# health.go keeps "every Xid" under the key 0 of its map: an Xid 0 in either list would stand for all of them
_XID = re.compile(r"[1-9][0-9]*")
_XID_MAX = 2 ** 64 - 1   # health.go parses each with strconv.ParseUint(value, 10, 64)


def input_problems(image_errors, uses_mps, mps_root, gfd_enabled, gfd_run_as_user):
    """The reasons the role variables cannot make valid manifests, in the order the role reports them.

    ``image_errors``: the errors of the image references (the container_image filter's ``error``, empty when
    valid); ``mps_root`` counts when a configuration uses MPS, ``gfd_run_as_user`` when GFD is deployed.
    """
    problems = [error for error in image_errors or [] if error]
    if uses_mps and not _ABSOLUTE_PATH.fullmatch(str(mps_root)):
        problems.append("k8s_device_plugin_mps_root %s is not an absolute path" % json.dumps(mps_root))
    # the role reads the user with Jinja's int filter, which takes blanks around the digits
    if gfd_enabled and not _USER_ID.fullmatch(str(gfd_run_as_user).strip()):
        problems.append("k8s_device_plugin_gfd_run_as_user %s is not a user ID (0 for root, or above)"
                        % json.dumps(gfd_run_as_user))
    return problems


def _xids(variable, value):
    """(sorted unique Xids, problem or "") of a list variable of Xids (integers, or strings of digits)."""
    if value is None or value == "":
        return [], ""
    if not isinstance(value, (list, tuple)):
        return [], "%s must be a list of Xids (integers), got %s" % (variable, json.dumps(value))
    xids = set()
    for item in value:
        text = str(item).strip() if not isinstance(item, bool) else ""
        if isinstance(item, float) or not _XID.fullmatch(text) or int(text) > _XID_MAX:
            return [], ("%s: %s is not an Xid (a whole number from 1; 0 would stand for every Xid in the device "
                        "plugin)" % (variable, json.dumps(item)))
        xids.add(int(text))
    return sorted(xids), ""


def health_checks(enabled, ignored_xids, forced_xids):
    """``{"env": [...], "problems": [...]}``: the device plugin container's health check environment.

    Read as k8s-device-plugin v0.20 ``internal/rm/health.go`` reads it: ``DP_DISABLE_HEALTHCHECKS`` is ``all``
    (every Xid ignored: the plugin then watches nothing) or a comma list of Xids to ignore on top of
    the plugin's own list (13, 31, 43, 45, 68, 109: application errors); ``DP_ENABLE_HEALTHCHECKS`` is a comma list
    of Xids watched even when ignored (those of the plugin's own list among them).  The plugin skips a malformed value silently, so every value is checked
    here; an Xid both ignored and forced, and a list given while every check is off (health.go returns before it
    reads the forced Xids), are refused.  ``env`` is empty when there are problems, or nothing to set.
    """
    problems = []
    ignored, problem = _xids("k8s_device_plugin_health_ignored_xids", ignored_xids)
    if problem:
        problems.append(problem)
    forced, problem = _xids("k8s_device_plugin_health_forced_xids", forced_xids)
    if problem:
        problems.append(problem)
    if not isinstance(enabled, bool):
        problems.append("k8s_device_plugin_health_checks must be true or false, got %s" % json.dumps(enabled))
    elif not enabled and (ignored or forced):
        problems.append("k8s_device_plugin_health_checks is false, so the device plugin watches no Xid: "
                        "k8s_device_plugin_health_ignored_xids and k8s_device_plugin_health_forced_xids must be "
                        "empty (to watch only some Xids, keep the checks on and ignore the others)")
    both = sorted(set(ignored) & set(forced))
    if both:
        problems.append("Xid %s both ignored and forced: remove %s from k8s_device_plugin_health_ignored_xids or "
                        "from k8s_device_plugin_health_forced_xids" % (", ".join(str(x) for x in both),
                                                                       "it" if len(both) == 1 else "them"))
    if problems:
        return {"env": [], "problems": problems}
    env = []
    if enabled is False:
        env.append({"name": "DP_DISABLE_HEALTHCHECKS", "value": "all"})
    elif ignored:
        env.append({"name": "DP_DISABLE_HEALTHCHECKS", "value": ",".join(str(x) for x in ignored)})
    if forced:
        env.append({"name": "DP_ENABLE_HEALTHCHECKS", "value": ",".join(str(x) for x in forced)})
    return {"env": env, "problems": []}


def nfd_problem(gfd_enabled, nfd_deploy, crd):
    """Why GPU Feature Discovery would have nowhere to publish its labels, in one line; "" when it has.

    ``crd``: the CustomResourceDefinition nodefeatures.nfd.k8s-sigs.io as the API returned it, or None (or an
    empty dict) when it does not exist.  The role deploys Node Feature Discovery (``nfd_deploy``) only where
    none is installed, or where it is the one an earlier run of the role installed.
    """
    if not gfd_enabled:
        return ""
    if crd:
        if not nfd_deploy:
            return ""
        manager = ((crd.get("metadata") or {}).get("labels") or {}).get(MANAGED_BY) or ""
        if manager == MANAGER:
            return ""
        return ("Node Feature Discovery is already installed (CustomResourceDefinition %s %s): set "
                "k8s_device_plugin_nfd_deploy: false to have GPU Feature Discovery publish to it"
                % (NODEFEATURE_CRD, "managed by " + manager if manager else "not managed by " + MANAGER))
    if nfd_deploy:
        return ""
    return ("k8s_device_plugin_gfd_enabled needs Node Feature Discovery: GPU Feature Discovery publishes its labels "
            "as NodeFeature objects that only nfd-master turns into node labels, and the CustomResourceDefinition "
            "%s does not exist; set k8s_device_plugin_nfd_deploy: true or install Node Feature Discovery v0.14 or "
            "newer first" % NODEFEATURE_CRD)
