"""Unit tests of the filter kubegpu.nvidia.gpu_validation_recorded."""
import re

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.kubegpu.nvidia.plugins.filter.gpu_validation_recorded import gpu_validation_recorded
from ansible_collections.kubegpu.nvidia.plugins.module_utils import gpu_validation as gv


def returned_node(name, boot="b1", record_for=None):
    """A node as k8s_gpu_label returns it with return_nodes, with a record written for its state under
    ``record_for`` (a revision) when given."""
    node = {"name": name, "changed": False, "labels": {"nvidia.com/gpu.count": "4"},
            "allocatable": {"nvidia.com/gpu": "4"}, "addresses": [],
            "node_info": {"bootID": boot, "kubeletVersion": "v1.31.2"}, "annotations": {}}
    if record_for is not None:
        node["annotations"][gv.RECORD_ANNOTATION] = gv.record_value(gv.node_state(node, record_for), "2026-11-21T10:00:00Z")
    return node


def test_only_the_nodes_whose_record_holds_for_the_revision_are_returned():
    held = returned_node("held", record_for="rev")
    rebooted = returned_node("rebooted", record_for="rev")
    rebooted["node_info"]["bootID"] = "b2"
    nodes = [returned_node("none"), held, rebooted, returned_node("old", record_for="older")]
    assert [r["node"] for r in gpu_validation_recorded(nodes, "rev")] == ["held"]
    assert gpu_validation_recorded(nodes, "rev")[0]["phase"] == "Recorded"
    assert gpu_validation_recorded(None) == [] and gpu_validation_recorded([]) == []


@pytest.mark.parametrize("nodes, revision, message", [
    ({"name": "n"}, "", "expects a list of nodes (dicts), got dict"),
    (["n"], "", "expects a list of nodes (dicts), got list"),
    ([], 3, "revision must be a string, got int"),
])
def test_bad_input_is_refused_with_one_line(nodes, revision, message):
    with pytest.raises(AnsibleFilterError, match=re.escape(message)):
        gpu_validation_recorded(nodes, revision)
