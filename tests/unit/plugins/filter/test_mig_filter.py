"""plugins/filter/mig.py: the role nvidia_mig's filters turn the module_utils' input errors into filter errors."""
from __future__ import absolute_import, division, print_function

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.kubegpu.nvidia.plugins.filter.mig import mig_decide, mig_reboot_blockers, mig_state_patch


def test_mig_decide_label_wins():
    node = {"metadata": {"labels": {"nvidia.com/mig.config": "all-1g.5gb"}}}
    assert mig_decide(node, "all-balanced")["config"] == "all-1g.5gb"


def test_mig_decide_refuses_a_list_as_config():
    with pytest.raises(AnsibleFilterError, match="nvidia_mig_config must be the name of a MIG config"):
        mig_decide({}, ["all-balanced"])


def test_mig_state_patch_refuses_an_unknown_state():
    with pytest.raises(AnsibleFilterError, match="MIG config state must be one of"):
        mig_state_patch("done")


def test_mig_reboot_blockers_take_ansible_values():
    assert mig_reboot_blockers(True, False, None) == []
    assert mig_reboot_blockers(True, True, "") == ["Ansible runs on the node itself (local connection)"]
