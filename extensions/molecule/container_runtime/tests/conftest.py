"""Shared fixture of the container_runtime scenario's tests that run a playbook of their own."""
import os
import subprocess

import pytest


@pytest.fixture(name="run_playbook")
def fixture_run_playbook():
    """run_playbook(playbook, inventory=None) -> (return code, stdout + stderr) of ansible-playbook.

    The default callback without colours, so the tests read the messages as a user sees them; the
    inventory defaults to the scenario's.
    """
    def run(playbook, inventory=None):
        result = subprocess.run(
            ["ansible-playbook", "-i", str(inventory or os.environ["MOLECULE_INVENTORY_FILE"]), str(playbook)],
            capture_output=True, text=True, check=False, env=dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0"))
        return result.returncode, result.stdout + result.stderr
    return run
