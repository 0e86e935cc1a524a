# -*- coding: utf-8 -*-
# Copyright: kubegpu.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What stops the device plugin role before it applies anything, as one-line reasons.

``input_problems`` checks the role variables the manifests take as they are (images, the MPS root, the user GPU
Feature Discovery runs as); ``nfd_problem`` checks that GPU Feature Discovery has a Node Feature Discovery to
publish to, from the NodeFeature CustomResourceDefinition as the cluster has it.  Configurations the device
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
