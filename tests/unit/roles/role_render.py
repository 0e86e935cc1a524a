"""Render a role's variables and templates with Ansible's own templar, as a play would.

The role's defaults/main.yml and vars/main.yml are loaded with Ansible's DataLoader,
the caller's variables override the defaults (role parameters/extra vars), and the
named variable is templated with the role's templates/ directory as the search path,
so ``query('ansible.builtin.template', ...)`` finds the same files the role uses.
"""
import json
import os

from ansible.errors import AnsibleError
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
ROLES = os.path.join(ROOT, "roles")


def role_variables(role, overrides=None, extra=None):
    """Variables a task of ``role`` sees: defaults < inventory-like ``extra`` < role vars, ``overrides`` last.

    Ansible's plugin loader (and with it the collection's own filters) is set up by tests/conftest.py.
    """
    loader = DataLoader()
    role_dir = os.path.join(ROLES, role)
    variables = {}
    for part in ("defaults", "vars"):
        path = os.path.join(role_dir, part, "main.yml")
        if part == "vars":
            variables.update(extra or {})
        if os.path.exists(path):
            variables.update(loader.load_from_file(path, trusted_as_template=True) or {})
    variables.update(overrides or {})
    variables.setdefault("groups", {"all": [], "ungrouped": []})
    variables.setdefault("hostvars", {})
    variables.setdefault("omit", "__omit_place_holder__render")
    variables["ansible_search_path"] = [role_dir, os.path.join(role_dir, "tasks")]
    variables["role_path"] = role_dir
    loader.set_basedir(role_dir)
    return loader, variables


def render(role, expression, overrides=None, extra=None):
    """Template ``expression`` (e.g. ``"{{ _k8s_device_plugin_manifests }}"``) in ``role``'s context.

    For k8s_device_plugin, as the role's first step (tasks/settings.yml) does, the resolved configuration is
    recorded as ``k8s_device_plugin_resolved`` first (unless given, or the settings do not resolve).
    """
    loader, variables = role_variables(role, overrides, extra)
    if role == "k8s_device_plugin" and "k8s_device_plugin_resolved" not in variables:
        try:
            variables["k8s_device_plugin_resolved"] = Templar(loader=loader, variables=variables).template(
                trust_as_template("{{ _k8s_device_plugin_resolved }}"))
        except AnsibleError:
            pass
    templar = Templar(loader=loader, variables=variables)
    # plain Python types (Ansible tags what it templates)
    return json.loads(json.dumps(templar.template(trust_as_template(expression))))


def manifests(overrides=None, extra=None):
    """The list of Kubernetes objects k8s_device_plugin applies for these variables."""
    return render("k8s_device_plugin", "{{ _k8s_device_plugin_manifests }}", overrides, extra)
