"""What stops the device plugin role before it applies anything (module_utils/device_plugin_checks.py).

The role's own rendering of these checks (roles/k8s_device_plugin/vars/main.yml) is covered in
tests/unit/roles/test_device_plugin_manifests.py; here each decision of the two functions, one case each.
"""
import pytest

from ansible_collections.kubegpu.nvidia.plugins.filter.device_plugin import device_plugin_nfd_problem
from ansible_collections.kubegpu.nvidia.plugins.module_utils.device_plugin_checks import (
    NODEFEATURE_CRD, input_problems, nfd_problem)

MPS_ROOT = 'k8s_device_plugin_mps_root %s is not an absolute path'
GFD_USER = 'k8s_device_plugin_gfd_run_as_user %s is not a user ID (0 for root, or above)'


@pytest.mark.parametrize("mps_root, problem", [
    ("/run/nvidia/mps", None),
    ("/var/run/mps", None),
    ("run/nvidia/mps", '"run/nvidia/mps"'),   # relative
    ("/", '"/"'),                              # the root itself: the daemon would mount over /
    ("/run/my mps", '"/run/my mps"'),          # a blank
    ("/run/nvidia/mps\n", '"/run/nvidia/mps\\n"'),
    ("/run/\u00e9", '"/run/\\u00e9"'),          # not ASCII
    (None, "null"),
])
def test_the_mps_root_must_be_an_absolute_path_when_a_configuration_uses_mps(mps_root, problem):
    assert input_problems([], True, mps_root, False, 1000) == ([MPS_ROOT % problem] if problem else [])
    # without MPS the root is not used, and not checked
    assert input_problems([], False, mps_root, False, 1000) == []


@pytest.mark.parametrize("user, problem", [
    (1000, None),
    (0, None),
    ("65534", None),
    ("1000\n", None),                          # a block scalar's line break: the role's int filter takes it
    (-1, "-1"),
    ("nobody", '"nobody"'),
    (True, "true"),
    (1.5, "1.5"),
    ("", '""'),
])
def test_the_gfd_user_must_be_a_user_id_when_gfd_is_deployed(user, problem):
    assert input_problems([], False, "/run/nvidia/mps", True, user) == ([GFD_USER % problem] if problem else [])
    assert input_problems([], False, "/run/nvidia/mps", False, user) == []


def test_image_errors_come_first_and_empty_ones_are_left_out():
    found = input_problems(["", "k8s_device_plugin_image_tag is empty", ""], True, "mps", True, "x")
    assert found == ["k8s_device_plugin_image_tag is empty", MPS_ROOT % '"mps"', GFD_USER % '"x"']
    assert input_problems(None, False, "", False, "") == []


def crd(manager=None):
    labels = {"app.kubernetes.io/managed-by": manager} if manager else None
    return {"kind": "CustomResourceDefinition", "metadata": {"name": NODEFEATURE_CRD, "labels": labels}}


@pytest.mark.parametrize("nfd_deploy, existing, problem", [
    (True, None, ""),                          # a fresh cluster: the role deploys NFD
    (True, crd("kubegpu.nvidia"), ""),         # the NFD an earlier run deployed
    (True, crd("Helm"), "Node Feature Discovery is already installed (CustomResourceDefinition "
                        "nodefeatures.nfd.k8s-sigs.io managed by Helm): set k8s_device_plugin_nfd_deploy: false "
                        "to have GPU Feature Discovery publish to it"),
    (True, crd(), "Node Feature Discovery is already installed (CustomResourceDefinition "
                  "nodefeatures.nfd.k8s-sigs.io not managed by kubegpu.nvidia): set k8s_device_plugin_nfd_deploy: "
                  "false to have GPU Feature Discovery publish to it"),
    (False, crd("Helm"), ""),                  # GFD publishes to the NFD the cluster has
    (False, None, "k8s_device_plugin_gfd_enabled needs Node Feature Discovery: GPU Feature Discovery publishes its "
                  "labels as NodeFeature objects that only nfd-master turns into node labels, and the "
                  "CustomResourceDefinition nodefeatures.nfd.k8s-sigs.io does not exist; set "
                  "k8s_device_plugin_nfd_deploy: true or install Node Feature Discovery v0.14 or newer first"),
])
def test_gfd_needs_a_node_feature_discovery_it_can_publish_to(nfd_deploy, existing, problem):
    assert nfd_problem(True, nfd_deploy, existing) == problem
    # without GFD nothing is asked of NFD
    assert nfd_problem(False, nfd_deploy, existing) == ""
    # the filter takes the k8s_info result as registered (no CRD: an empty resources list, or no lookup at all)
    info = {"resources": [existing] if existing else []}
    assert device_plugin_nfd_problem(info, True, nfd_deploy) == problem
    if existing is None:
        assert device_plugin_nfd_problem({}, True, nfd_deploy) == problem
        assert device_plugin_nfd_problem(None, True, nfd_deploy) == problem
