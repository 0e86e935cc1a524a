"""What stops the device plugin role before it applies anything (module_utils/device_plugin_checks.py).

The role's own rendering of these checks (roles/k8s_device_plugin/vars/main.yml) is covered in
tests/unit/roles/test_device_plugin_manifests.py; here each decision of the two functions, one case each.
"""
import pytest

from ansible_collections.kubegpu.nvidia.plugins.filter.device_plugin import device_plugin_nfd_problem
from ansible_collections.kubegpu.nvidia.plugins.module_utils.device_plugin_checks import (
    NODEFEATURE_CRD, health_checks, input_problems, nfd_problem)

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


# The device plugin's health check environment, as k8s-device-plugin v0.20 internal/rm/health.go reads it
# (getDisabledHealthCheckXids, newHealthCheckXIDs, disabledXIDs.IsAllDisabled / IsDisabled).
@pytest.mark.parametrize("enabled, ignored, forced, env", [
    (True, [], [], {}),                                        # nothing set: the plugin's own list only
    (False, [], [], {"DP_DISABLE_HEALTHCHECKS": "all"}),       # "all" (or "xids"): a no-op health provider
    (True, [94, 48], [], {"DP_DISABLE_HEALTHCHECKS": "48,94"}),  # extra Xids, on top of 13, 31, 43, 45, 68, 109
    (True, ["63", " 64 ", 63], [], {"DP_DISABLE_HEALTHCHECKS": "63,64"}),  # strings of digits (TrimSpace), once each
    (True, [], [109], {"DP_ENABLE_HEALTHCHECKS": "109"}),      # an always-ignored Xid watched again
    (True, [48], [13, 31], {"DP_DISABLE_HEALTHCHECKS": "48", "DP_ENABLE_HEALTHCHECKS": "13,31"}),
    (True, None, None, {}),
])
def test_the_health_checks_become_the_plugin_environment(enabled, ignored, forced, env):
    found = health_checks(enabled, ignored, forced)
    assert found["problems"] == []
    assert dict((e["name"], e["value"]) for e in found["env"]) == env
    # the order the container lists them in: disable first
    assert [e["name"] for e in found["env"]] == sorted(env)


IGNORED = "k8s_device_plugin_health_ignored_xids"
FORCED = "k8s_device_plugin_health_forced_xids"
NOT_XID = "%s: %s is not an Xid (a whole number from 1; 0 would stand for every Xid in the device plugin)"


@pytest.mark.parametrize("enabled, ignored, forced, problems", [
    # health.go keys "every Xid" as 0: an ignored 0 would turn every check off
    (True, [0], [], [NOT_XID % (IGNORED, "0")]),
    (True, ["all"], [], [NOT_XID % (IGNORED, '"all"')]),       # the switch is k8s_device_plugin_health_checks
    (True, [-1], [], [NOT_XID % (IGNORED, "-1")]),
    (True, [True], [], [NOT_XID % (IGNORED, "true")]),
    (True, [48.0], [], [NOT_XID % (IGNORED, "48.0")]),
    (True, ["0x30"], [], [NOT_XID % (IGNORED, '"0x30"')]),     # ParseUint base 10: the plugin would skip it
    (True, [2 ** 64], [], [NOT_XID % (IGNORED, str(2 ** 64))]),  # beyond ParseUint's 64 bits
    (True, [], ["109,13"], [NOT_XID % (FORCED, '"109,13"')]),   # one Xid per item
    (True, "48", [], ['%s must be a list of Xids (integers), got "48"' % IGNORED]),
    # an Xid both ignored and forced: health.go lets the forced one win without a word
    (True, [48, 79], [79], ["Xid 79 both ignored and forced: remove it from %s or from %s" % (IGNORED, FORCED)]),
    (True, [48, 79], ["79", 48], ["Xid 48, 79 both ignored and forced: remove them from %s or from %s"
                                  % (IGNORED, FORCED)]),
    # with every check off, IsAllDisabled is true and the plugin never reads the forced Xids
    (False, [], [79], ["k8s_device_plugin_health_checks is false, so the device plugin watches no Xid: %s and %s "
                       "must be empty (to watch only some Xids, keep the checks on and ignore the others)"
                       % (IGNORED, FORCED)]),
    (False, [48], [], ["k8s_device_plugin_health_checks is false, so the device plugin watches no Xid: %s and %s "
                       "must be empty (to watch only some Xids, keep the checks on and ignore the others)"
                       % (IGNORED, FORCED)]),
    (True, [0], [0], [NOT_XID % (IGNORED, "0"), NOT_XID % (FORCED, "0")]),
    ("yes", [], [], ['k8s_device_plugin_health_checks must be true or false, got "yes"']),
])
def test_health_check_variables_the_plugin_would_misread_are_refused_one_line_each(enabled, ignored, forced,
                                                                                   problems):
    found = health_checks(enabled, ignored, forced)
    assert found == {"env": [], "problems": problems}
    assert all("\n" not in problem for problem in problems)
