"""Shared fixtures of the gpu_facts scenario: the profiles, the module runner, fault injection."""
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[4]
SUPPORT = ROOT / "tests" / "support"
if str(SUPPORT) not in sys.path:
    sys.path.insert(0, str(SUPPORT))

import ansible_run  # noqa: E402  pylint: disable=wrong-import-position
from fakenvml.profile import PROFILES, load_profile  # noqa: E402  pylint: disable=wrong-import-position

FAKENVML = ROOT / ".cache" / "fakenvml"
NODE_NVML = "/usr/local/lib/libnvidia-ml.so.1"
NODE_CONFIG = "/etc/fakenvml/gpus.conf"
NODE_SMI = "/usr/local/bin/nvidia-smi"
MODULE = "kubegpu.nvidia.nvidia_gpu_facts"


def run_module_on(inventory, pattern, module, args="", check=False):
    """Run one module with the ad-hoc ``ansible`` command; return {host: result} for the hosts of pattern.

    testinfra's host.ansible() reads results through the tree callback, which under
    ansible-core 2.19 drops ``failed`` and ``warnings``; the json callback keeps them.
    """
    return ansible_run.run_module(module, args, hosts=pattern, inventory=inventory, check=check, python=None,
                                  env={"ANSIBLE_DEPRECATION_WARNINGS": "false"}, timeout=300).hosts()


def run_module(host, module, args="", check=False):
    """run_module_on() for the one node of a testinfra host."""
    name = host.backend.host
    results = run_module_on(host.backend.ansible_inventory, name, module, args, check)
    if name not in results:
        pytest.fail("ansible gave no result for %s: %s" % (name, results))
    return results[name]


def run_facts(host, args="", check=False):
    """Run nvidia_gpu_facts on the node and return the module result."""
    return run_module(host, MODULE, args, check=check)


@pytest.fixture(name="profile")
def fixture_profile(host):
    """The node's lab profile name and its parsed content (None for the cpu profile)."""
    name = host.ansible.get_variables()["lab_gpu_profile"]
    return name, (None if name == "cpu" else load_profile(name))


class NodeFaults:
    """Swap a node's fake NVML config or library for a test; put the profile's back afterwards."""

    def __init__(self, host):
        self.host = host
        self.name = host.backend.host  # the container is named as the inventory host
        self.profile = host.ansible.get_variables()["lab_gpu_profile"]
        self.original_config = host.file(NODE_CONFIG).content_string

    def _copy(self, source, dest):
        subprocess.run(["docker", "cp", str(source), "%s:%s" % (self.name, dest)], check=True,
                       capture_output=True)

    def use_profile(self, profile_name):
        self._copy(PROFILES / ("%s.conf" % profile_name), NODE_CONFIG)

    def use_library(self, flavour):
        self._copy(FAKENVML / flavour / "libnvidia-ml.so.1", NODE_NVML)

    def use_nvidia_smi(self, script):
        """Install an nvidia-smi stand-in (a shell script body) on the node."""
        subprocess.run(["docker", "exec", "-i", self.name, "sh", "-c", "cat > %s && chmod 755 %s" % (NODE_SMI, NODE_SMI)],
                       input="#!/bin/sh\n" + script, text=True, check=True, capture_output=True)

    def restore(self):
        self.use_profile(self.profile)
        self.use_library("full")
        subprocess.run(["docker", "exec", self.name, "rm", "-f", NODE_SMI], check=True, capture_output=True)
        assert self.host.file(NODE_CONFIG).content_string == self.original_config


@pytest.fixture
def faults(host):
    node = NodeFaults(host)
    try:
        yield node
    finally:
        node.restore()


_ALL_NODES = {}


@pytest.fixture(name="facts_result")
def fixture_facts_result(host):
    """nvidia_gpu_facts' result on this node, from one run over all the nodes at once."""
    inventory = host.backend.ansible_inventory
    if inventory not in _ALL_NODES:
        _ALL_NODES[inventory] = run_module_on(inventory, "gpu_nodes", MODULE)
    return _ALL_NODES[inventory][host.backend.host]
