# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.nvidia maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters toolkit_restarts and toolkit_runtime_record of the role nvidia_container_toolkit."""

from __future__ import absolute_import, division, print_function

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.kubegpu.nvidia.plugins.filter.toolkit_runtimes import toolkit_restarts, toolkit_runtime_record

NODE = {"runtimes": ["containerd", "k3s", "crio", "docker"],
        "services": {"containerd": "containerd", "k3s": "k3s-agent", "crio": "crio", "docker": "docker"},
        "k3s_actions": []}


def result(name, **fields):
    return dict({"item": {"name": name}, "changed": True, "restart_required": True}, **fields)


def test_only_runtimes_whose_change_needs_it_are_restarted_in_order_with_their_backups():
    configured = {"results": [
        result("docker", backup_files=["/etc/docker/daemon.json.1.2026-01-01@10:00:00~"], path="/etc/docker/daemon.json"),
        result("containerd", restart_required=False, changed=False),
        result("crio", path="/etc/crio/crio.conf.d/99-nvidia.toml"),
    ]}
    assert toolkit_restarts(configured, NODE) == [
        {"name": "crio", "service": "crio", "backup_files": [], "new_files": ["/etc/crio/crio.conf.d/99-nvidia.toml"]},
        {"name": "docker", "service": "docker", "backup_files": ["/etc/docker/daemon.json.1.2026-01-01@10:00:00~"],
         "new_files": []},
    ]


def test_k3s_that_finds_the_runtime_itself_is_restarted_on_its_own_unit():
    node = dict(NODE, k3s_actions=[{"name": "k3s", "path": "/etc/rancher/k3s/config.yaml.d/x.yaml", "content": None,
                                    "write": False}])
    assert toolkit_restarts({"results": []}, node) == [
        {"name": "k3s", "service": "k3s-agent", "backup_files": [], "new_files": []}]
    # a play that configured nothing (the task skipped) restarts nothing
    assert toolkit_restarts({"skipped": True, "results": []}, NODE) == []
    assert toolkit_restarts(None, NODE) == []


def test_the_record_has_the_new_checksums_and_keeps_the_old_rows_of_the_others():
    record = {"keys": {"containerd": "k1", "docker": "k2"},
              "rows": [["docker", "k2", "/etc/docker/daemon.json", "d" * 64], ["containerd", "k0", "/c.toml", "0" * 64]]}
    text = toolkit_runtime_record({"results": [result("containerd", checksums={"/c.toml": "c" * 64})]}, record)
    assert text.splitlines()[1:] == ["containerd k1 /c.toml " + "c" * 64, "docker k2 /etc/docker/daemon.json " + "d" * 64]


@pytest.mark.parametrize("call", [
    lambda: toolkit_restarts("x", NODE),
    lambda: toolkit_restarts({"results": []}, {"runtimes": []}),
    lambda: toolkit_runtime_record({"results": []}, {"rows": []}),
])
def test_wrong_arguments_fail_as_filter_errors(call):
    with pytest.raises(AnsibleFilterError):
        call()
