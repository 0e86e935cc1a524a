"""Unit tests for the filter kubegpu.nvidia.daemonset_ready (plugins/filter/daemonset_ready.py)."""
import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.kubegpu.nvidia.plugins.filter.daemonset_ready import FilterModule, daemonset_ready

READY = {"desiredNumberScheduled": 3, "updatedNumberScheduled": 3, "numberReady": 3, "observedGeneration": 2}


def daemonset(status, generation=2):
    return {"kind": "DaemonSet", "metadata": {"name": "nvidia-device-plugin", "generation": generation},
            "status": status}


@pytest.mark.parametrize("obj, ready", [
    (daemonset(READY), True),
    (daemonset(READY, generation=3), False),                              # new spec not observed yet
    (daemonset(dict(READY, numberReady=2)), False),                       # a pod not ready
    (daemonset(dict(READY, updatedNumberScheduled=1)), False),            # still rolling
    (daemonset({}, generation=1), False),                                 # just created: no status
    (daemonset(None, generation=1), False),                               # status null
    (daemonset(dict(READY, desiredNumberScheduled=0, updatedNumberScheduled=0, numberReady=0)), True),  # no node selected
    ({}, False),                                                          # none found
    (None, False),
])
def test_ready_as_kubectl_rollout_status_judges_it(obj, ready):
    assert daemonset_ready(obj) is ready


def test_a_value_that_is_no_object_is_an_error():
    with pytest.raises(AnsibleFilterError, match="daemonset_ready expects a DaemonSet object"):
        daemonset_ready(["nvidia-device-plugin"])


def test_registered_under_its_name():
    assert FilterModule().filters()["daemonset_ready"] is daemonset_ready
    assert sorted(FilterModule().filters()) == ["daemonset_ready", "daemonset_revision", "daemonset_rollout_status"]


def test_revision_is_uid_and_generation():
    from ansible_collections.kubegpu.nvidia.plugins.filter.daemonset_ready import daemonset_revision
    assert daemonset_revision({"metadata": {"uid": "u-1", "generation": 3}}) == "u-1/3"
    assert daemonset_revision({}) == ""
    assert daemonset_revision({"metadata": {"name": "x"}}) == ""


def test_rollout_status_in_words():
    from ansible_collections.kubegpu.nvidia.plugins.filter.daemonset_ready import daemonset_rollout_status
    ds = {"metadata": {"generation": 2},
          "status": {"desiredNumberScheduled": 3, "updatedNumberScheduled": 2, "numberReady": 1, "observedGeneration": 2}}
    assert daemonset_rollout_status(ds) == "desired 3, updated 2, ready 1, observedGeneration 2 of generation 2"
    assert daemonset_rollout_status({"metadata": {}}) == (
        "desired ?, updated 0, ready 0, observedGeneration none of generation ?")
    assert daemonset_rollout_status({}) == "not found"
