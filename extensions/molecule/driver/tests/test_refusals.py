"""Bad input stops the role with one message before anything changes on the node.

All cases run in one ansible-playbook run (one play per node): each case runs the role once more
(include_role, the case's variables as its vars) in a block whose rescue records the refusal. Per
case: the role fails once, at the expected task with the expected message, the node's state is read
again (no fact of an earlier case stands in for it) and nothing is installed; per run: no traceback,
nothing reported changed, the node's driver packages and holds the same afterwards.
"""
import json
import os

import pytest
import testinfra

from conftest import installed_versions, run_playbook

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


READ = "Read the driver state of the node"
DECIDE = "Decide the kernel module flavour and check the GPUs, the branch and Secure Boot"
INSTALL = "Install the driver packages"


def case_marker(index):
    return "Start refusal case %d" % index


def refusal_playbook():
    """One play per node; each case is the role in a block, its failure recorded by the rescue."""
    plays = []
    for name in sorted(CASES):
        tasks = []
        for index, (extra, _task, _message) in enumerate(CASES[name]):
            tasks.append({
                "name": "Refusal case %d" % index,
                "block": [
                    {"name": case_marker(index), "ansible.builtin.debug": {"msg": extra}},
                    {"name": "Run the role with case %d's variables" % index,
                     "ansible.builtin.include_role": {"name": "kubegpu.nvidia.nvidia_driver"},
                     "vars": extra},
                ],
                "rescue": [
                    {"name": "Record the refusal of case %d" % index,
                     "ansible.builtin.set_fact": {
                         "refusals": "{{ refusals | default({}) | combine({'%d': {'task': ansible_failed_task.name, "
                                     "'msg': ansible_failed_result.msg}}) }}" % index}},
                ],
            })
        tasks.append({"name": "Report the refusals", "ansible.builtin.debug": {"var": "refusals"}})
        plays.append({"name": "Refuse bad input on %s" % name, "hosts": name, "gather_facts": False,
                      "tasks": tasks})
    return plays


def node_state(host):
    return installed_versions(host), host.check_output("apt-mark showhold")


@pytest.fixture(name="refusals", scope="module")
def fixture_refusals(tmp_path_factory):
    """(Run, {node: state before}, {node: state after}) of the one run of all cases."""
    hosts = {name: testinfra.get_host("ansible://%s?ansible_inventory=%s" % (name, os.environ["MOLECULE_INVENTORY_FILE"]))
             for name in CASES}
    before = {name: node_state(host) for name, host in hosts.items()}
    playbook = tmp_path_factory.mktemp("refusals") / "refusals.yml"
    playbook.write_text(json.dumps(refusal_playbook(), indent=1))
    run = run_playbook(str(playbook))
    after = {name: node_state(host) for name, host in hosts.items()}
    return run, before, after


def case_events(run, host):
    """{case index: [(task name, result)]} of `host`, split at each case's first task."""
    cases, current = {}, None
    markers = {case_marker(index): index for index in range(len(CASES[host]))}
    for name, res in run.events(host):
        if name in markers:
            current = markers[name]
            cases[current] = []
        if current is not None:
            cases[current].append((name, res))
    return cases


@pytest.mark.parametrize("name", sorted(CASES))
def test_bad_input_is_refused_before_anything_changes(refusals, name):
    run, before, after = refusals
    assert run.rc == 0, run.stdout[-2000:]
    assert "Traceback" not in run.stdout + run.stderr
    stats = run.stats(name)
    assert stats["changed"] == 0, stats
    # every case failed in the role and was rescued, no other failure
    assert stats["rescued"] == len(CASES[name]), stats
    assert stats["failures"] == 0, stats
    recorded = run.result(name, "Report the refusals")["refusals"]
    events = case_events(run, name)
    wrong = []
    for index, (extra, task, message) in enumerate(CASES[name]):
        failures = [(task_name, res.get("msg")) for task_name, res in events.get(index, []) if res.get("failed")]
        ran = [task_name for task_name, res in events.get(index, []) if not res.get("skipped")]
        problems = []
        if len(failures) != 1:
            problems.append("failures %r" % failures)
        elif failures[0][0] != task or message not in (failures[0][1] or ""):
            problems.append("failed at %r: %r" % failures[0])
        if recorded.get(str(index), {}).get("task", "").split(" : ")[-1] != task:
            problems.append("rescue recorded %r" % recorded.get(str(index)))
        # the role's facts are all taken again: the node's state read and the decision made in this case
        if task != ARGUMENTS and not (READ in ran and DECIDE in ran):
            problems.append("did not read the node and decide again: %r" % ran)
        # nothing ran on the node but the reads
        if INSTALL in ran:
            problems.append("installed")
        if problems:
            wrong.append((index, extra, problems))
    assert not wrong, wrong
    assert after[name] == before[name]
