"""A run of the role on a node whose driver is installed, held and loaded changes nothing and runs at most
3 tasks on the node beyond the facts.

The Hopper node gets the fake NVML library with the h100x8 profile (lab/prepare.yml), its driver set to
535.183.01, the version converge installed (the profile's own is 570, for the lab's DRA node): the facts
then show the wanted driver loaded.
"""
import os
import subprocess

import testinfra.utils.ansible_runner

from conftest import CONTROLLER_ACTIONS, ROOT

testinfra_hosts = testinfra.utils.ansible_runner.AnsibleRunner(
    os.environ["MOLECULE_INVENTORY_FILE"]).get_hosts("driver-hopper")

FACTS = {"Gather the platform facts the role needs", "Gather the GPU facts"}


def test_noop_run_costs_at_most_three_node_tasks(host, run_role):
    subprocess.run(["ansible-playbook", "-i", os.environ["MOLECULE_INVENTORY_FILE"],
                    os.path.join(ROOT, "lab", "prepare.yml"), "-e", "lab_prepare_hosts=driver-hopper",
                    "-e", "lab_gpu_profile=h100x8"], check=True, capture_output=True)
    host.run_test("sed -i 's/^driver_version = .*/driver_version = 535.183.01/' /etc/fakenvml/gpus.conf")
    try:
        run = run_role("driver-hopper")
        assert run.rc == 0, run.failures("driver-hopper")
        assert run.stats("driver-hopper")["changed"] == 0
        assert "NVIDIA driver 535.183.01 is loaded on 8 GPU(s) of driver-hopper" in run.result(
            "driver-hopper", "Check the GPUs and the options, and report what the role does")["msg"]
        on_node = [name for name, res in run.events("driver-hopper")
                   if not res.get("skipped") and res.get("action") not in CONTROLLER_ACTIONS and name not in FACTS]
        print("tasks that ran on the node beyond the facts: %d (%s)" % (len(on_node), ", ".join(on_node)))
        assert len(on_node) <= 3, on_node
        summary = run.facts("driver-hopper")["nvidia_driver_summary"]
        assert summary["text"] == "535.183.01, held, open"
    finally:
        host.run_test("rm -rf /usr/local/lib/libnvidia-ml.so.1 /etc/fakenvml && ldconfig")
