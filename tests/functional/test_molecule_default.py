"""Molecule from the collection root without -s: the default scenario runs, and no CRITICAL line.

Molecule 26 targets the scenario named ``default`` when no ``-s`` is given (molecule ``constants.py``
``MOLECULE_DEFAULT_SCENARIO_NAME``; ``command/base.py`` stops with ``'<glob>' glob failed.  Exiting.`` when it is
missing). ``extensions/molecule/default`` is a syntax check of the collection's playbooks that starts no container.
"""
import os
import pathlib
import subprocess

ROOT = pathlib.Path(__file__).resolve().parents[2]


def molecule(*args):
    return subprocess.run(["molecule"] + list(args), cwd=ROOT, env=dict(os.environ), capture_output=True, text=True,
                          timeout=300, check=False)


def test_molecule_test_without_a_scenario_runs_the_default_syntax_check():
    proc = molecule("test")
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output
    assert "CRITICAL" not in output and "glob failed" not in output, output
    assert "[default > syntax] Executed: Successful" in output, output
    assert "playbook: %s" % (ROOT / "extensions" / "molecule" / "default" / "converge.yml") in output


def test_molecule_list_names_every_scenario_without_a_critical_line():
    proc = molecule("list")
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output
    assert "CRITICAL" not in output, output
    scenarios = sorted(path.parent.name for path in (ROOT / "extensions" / "molecule").glob("*/molecule.yml"))
    assert "default" in scenarios
    for name in scenarios:
        assert "[%s > list] Executed: Successful" % name in output, output
