"""Shared fixtures of the driver scenario's tests: run the role (role.yml) again with other variables."""
import json
import os
import subprocess

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SCENARIO = os.path.dirname(HERE)
ROOT = os.path.abspath(os.path.join(SCENARIO, "..", "..", ".."))
# actions that run on the controller; every other task runs on the node
CONTROLLER_ACTIONS = {"ansible.builtin.set_fact", "ansible.builtin.assert", "ansible.builtin.debug",
                      "ansible.builtin.include_vars", "ansible.builtin.include_tasks", "ansible.builtin.fail",
                      "ansible.builtin.meta", "ansible.builtin.validate_argument_spec", "set_fact", "assert", "debug",
                      "include_vars", "include_tasks", "meta", "validate_argument_spec"}


class Run:
    """One ansible-playbook run with the JSON callback: rc, and what ran on each host."""

    def __init__(self, proc):
        self.rc = proc.returncode
        self.stdout = proc.stdout
        self.stderr = proc.stderr
        try:
            self.data = json.loads(proc.stdout)
        except ValueError:
            raise AssertionError("no JSON from ansible-playbook (rc %d)\n%s\n%s" % (self.rc, proc.stdout, proc.stderr))

    def events(self, host):
        """[(task name, result)] of `host`, in order (role tasks without the role prefix)."""
        return [(task["task"]["name"].split(" : ")[-1], task["hosts"][host])
                for play in self.data["plays"] for task in play["tasks"] if host in task["hosts"]]

    def result(self, host, name):
        found = [res for task, res in self.events(host) if task == name]
        assert found, "task %r did not run on %s" % (name, host)
        return found[-1]

    def failures(self, host):
        return [(name, res.get("msg")) for name, res in self.events(host) if res.get("failed")]

    def stats(self, host):
        return self.data["stats"][host]

    def facts(self, host):
        """The facts the role set (set_fact results), the latest of each."""
        facts = {}
        for _name, res in self.events(host):
            facts.update(res.get("ansible_facts") or {})
        return facts


def run_playbook(playbook, **extra_vars):
    """ansible-playbook on the scenario's inventory with the JSON callback -> Run (playbook: a path or a
    file name in the scenario)."""
    env = dict(os.environ, ANSIBLE_STDOUT_CALLBACK="ansible.posix.json", ANSIBLE_NOCOLOR="1")
    proc = subprocess.run(
        ["ansible-playbook", "-i", os.environ["MOLECULE_INVENTORY_FILE"], os.path.join(SCENARIO, playbook),
         "-e", json.dumps(extra_vars)],
        capture_output=True, text=True, check=False, env=env)
    return Run(proc)


@pytest.fixture(name="run_role")
def fixture_run_role():
    """run_role(host, **extra_vars) -> Run: the role on one host with the scenario's variables and these."""
    def run(host, playbook="role.yml", **extra_vars):
        return run_playbook(playbook, **dict(extra_vars, driver_hosts=host))
    return run


def installed_versions(host):
    """{name: version} of the node's NVIDIA driver packages."""
    out = host.check_output("dpkg-query -W -f='${Package} ${Version}\\n'")
    return dict(line.split(" ", 1) for line in out.splitlines()
                if line.startswith(("nvidia-", "libcuda", "libnvidia")))
