"""Bad input stops the role with one message before anything changes on the node.

Each case runs the role (role.yml) once more on one node with other variables; the node's driver
packages and holds are the same afterwards and nothing is reported changed.
"""
import os

import pytest
import testinfra

from conftest import installed_versions

CHECK = "Check the GPUs and the options, and report what the role does"
ARGUMENTS = "Validating arguments against arg spec 'main' - Install the NVIDIA GPU driver and load it"

CASES = {
    "driver-blackwell": [
        # a branch below the GPU's minimum
        ({"nvidia_driver_version": "535.183.01"}, CHECK,
         "nvidia_driver on driver-blackwell: driver branch 535 cannot drive NVIDIA B200 (0x2901, blackwell): "
         "the lowest branch that supports it is 570"),
        ({"nvidia_driver_kernel_module_type": "proprietary"}, CHECK,
         "nvidia_driver on driver-blackwell: nvidia_driver_kernel_module_type=proprietary cannot drive NVIDIA B200 "
         "(0x2901, blackwell): it needs the open kernel modules"),
        # a MOK key path that does not exist, a key without its certificate
        ({"nvidia_driver_mok_key": "/nonexistent/mok.key"}, CHECK,
         "nvidia_driver on driver-blackwell: nvidia_driver_mok_key: /nonexistent/mok.key does not exist on the "
         "controller"),
        ({"nvidia_driver_mok_cert": ""}, CHECK,
         "nvidia_driver on driver-blackwell: nvidia_driver_mok_key is set without nvidia_driver_mok_cert"),
        # Secure Boot on, Debian ships no signed modules, and no key to sign DKMS's build with
        ({"nvidia_driver_mok_key": "", "nvidia_driver_mok_cert": ""}, CHECK,
         "nvidia_driver on driver-blackwell: Secure Boot is on and the NVIDIA module would be built by DKMS unsigned "
         "on Debian 12"),
    ],
    "driver-pascal": [
        # an unknown flavour: the role's argument spec
        ({"nvidia_driver_kernel_module_type": "nouveau"}, ARGUMENTS,
         "value of nvidia_driver_kernel_module_type must be one of: auto, open, proprietary, got: nouveau"),
        ({"nvidia_driver_kernel_module_type": "open"}, CHECK,
         "nvidia_driver on driver-pascal: nvidia_driver_kernel_module_type=open cannot drive Tesla P100-PCIE-16GB "
         "(0x15F8, pascal): it needs the proprietary kernel modules"),
        ({"nvidia_driver_version": "590.48.01"}, CHECK,
         "nvidia_driver on driver-pascal: driver branch 590 cannot drive Tesla P100-PCIE-16GB (0x15F8, pascal): "
         "the last branch that supports it is 580"),
        # a held package at another version than asked
        ({"nvidia_driver_version": "535.216.01"}, CHECK,
         "nvidia_driver on driver-pascal: libcuda1 is held at 535.183.01-1~standin1 but driver 535.216.01 is asked "
         "(4 held package(s) of the driver in all): upgrade with kubegpu.nvidia.upgrade_driver (it releases and "
         "re-takes the hold), or release the hold (apt-mark unhold) first"),
        ({"nvidia_driver_module_parameters": {"modeset": 1}}, CHECK,
         "nvidia_driver on driver-pascal: nvidia_driver_module_parameters: 'modeset' is not an NVreg_* parameter"),
    ],
}


CASE_LIST = [(name, case) for name in sorted(CASES) for case in CASES[name]]


@pytest.mark.parametrize("name,case", CASE_LIST, ids=["%s-%d" % (name, CASES[name].index(case)) for name, case in CASE_LIST])
def test_bad_input_is_refused_before_anything_changes(run_role, name, case):
    host = testinfra.get_host("ansible://%s?ansible_inventory=%s" % (name, os.environ["MOLECULE_INVENTORY_FILE"]))
    extra, task, message = case
    before = (installed_versions(host), host.check_output("apt-mark showhold"))
    run = run_role(name, **extra)
    assert run.rc == 2, run.stdout[-2000:]
    failures = run.failures(name)
    assert len(failures) == 1, failures
    assert failures[0][0] == task
    assert message in failures[0][1], failures[0][1]
    assert "Traceback" not in run.stdout + run.stderr
    assert run.stats(name)["changed"] == 0
    # nothing ran on the node but the reads
    assert "Install the driver packages" not in [n for n, res in run.events(name) if not res.get("skipped")]
    assert (installed_versions(host), host.check_output("apt-mark showhold")) == before
