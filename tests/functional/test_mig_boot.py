"""The boot-time apply (module_utils/mig_boot.py, run by kubegpu-mig.service) over the real pynvml and the fake
libnvidia-ml.so.1: a node whose GPU and compute instances were lost (a reboot: the fake's state file keeps the MIG
mode and loses the instances, as the hardware does) gets its declared geometry back; a second start writes nothing.

The entry point runs as the unit runs it, ``python3 -m ...mig_boot <declaration>``, in a process of its own.
"""
import json
import os
import pathlib
import subprocess
import sys

import pytest

from fakenvml.profile import PROFILES

ROOT = pathlib.Path(__file__).resolve().parents[2]
ENTRY = "ansible_collections.kubegpu.nvidia.plugins.module_utils.mig_boot"


@pytest.fixture(scope="module")
def libdir():
    out = subprocess.run([str(ROOT / "scripts" / "build-fakenvml.sh")], check=True, capture_output=True, text=True)
    return pathlib.Path(out.stdout.strip().splitlines()[-1])


def boot(libdir, state, declaration):
    env = dict(os.environ, LD_LIBRARY_PATH=str(libdir / "full"), FAKENVML_CONFIG=str(PROFILES / "a100x4-mig.conf"),
               FAKENVML_STATE=str(state), PYTHONPATH=os.pathsep.join(sys.path))
    return subprocess.run([sys.executable, "-m", ENTRY, str(declaration)], env=env, capture_output=True, text=True,
                          timeout=120, check=False)


def instances(state):
    return sorted(line for line in state.read_text().splitlines() if line.startswith(("gi = ", "ci = ")))


def writes(state):
    return int([line for line in state.read_text().splitlines() if line.startswith("writes = ")][0].split("=")[1])


def test_boot_restores_the_declared_geometry_after_the_instances_are_lost(libdir, tmp_path):
    state = tmp_path / "a100.state"
    declaration = tmp_path / "mig.yaml"
    declaration.write_text(json.dumps({"config": "all-balanced", "configs": None}))
    first = boot(libdir, state, declaration)
    assert first.returncode == 0, first.stderr
    assert first.stdout.strip() == "MIG config all-balanced applied on GPU 0, 1, 2, 3"
    applied = instances(state)
    assert len(applied) == 4 * 8  # 4 GPU instances and 4 compute instances per GPU
    # the reboot: the instances are gone, the MIG mode stays
    text = state.read_text()
    state.write_text("".join(line for line in text.splitlines(True) if not line.startswith(("gi = ", "ci = "))))
    assert instances(state) == []
    again = boot(libdir, state, declaration)
    assert again.returncode == 0, again.stderr
    assert instances(state) == applied
    # a start on a node already at its geometry reads and writes nothing
    count = writes(state)
    third = boot(libdir, state, declaration)
    assert third.returncode == 0, third.stderr
    assert third.stdout.strip() == "MIG config all-balanced: every GPU already at its geometry"
    assert writes(state) == count


def test_boot_applies_the_users_own_config(libdir, tmp_path):
    state = tmp_path / "a100.state"
    declaration = tmp_path / "mig.yaml"
    own = {"version": "v1", "mig-configs": {"two-3g": [
        {"devices": "all", "mig-enabled": True, "mig-devices": {"3g.20gb": 2}}]}}
    declaration.write_text(json.dumps({"config": "two-3g", "configs": own}))
    result = boot(libdir, state, declaration)
    assert result.returncode == 0, result.stderr
    # a100x4-mig starts at 3g.20gb x2 on GPU 0 only
    assert result.stdout.strip() == "MIG config two-3g applied on GPU 1, 2, 3"


@pytest.mark.parametrize("content, words", [
    (None, "cannot be read"),
    ("{not json", "is not the JSON the role nvidia_mig writes"),
    (json.dumps({"configs": None}), "names no MIG config"),
    (json.dumps({"config": "all-balancd"}), "MIG config 'all-balancd' does not exist (did you mean 'all-balanced'?)"),
])
def test_boot_refuses_a_bad_declaration_in_one_line_and_changes_nothing(libdir, tmp_path, content, words):
    state = tmp_path / "a100.state"
    declaration = tmp_path / "mig.yaml"
    if content is not None:
        declaration.write_text(content)
    result = boot(libdir, state, declaration)
    assert result.returncode == 1
    assert result.stdout == ""
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr
    assert result.stderr.startswith("kubegpu-mig: ") and words in result.stderr
    assert not state.exists() or writes(state) == 0
