# -*- coding: utf-8 -*-
# Copyright: kubegpu.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters of the role nvidia_container_toolkit: its plan from the facts' toolkit state, the runtimes to restart, and
the record of their configuration."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# The filters import the module_utils they use when called, not here (docs/development.md, Conventions).

from ansible.errors import AnsibleFilterError


def _results(configured):
    if configured is None:
        return []
    if not isinstance(configured, dict):
        raise AnsibleFilterError("expects the registered result of the configuration task (a dict), got %s"
                                 % type(configured).__name__)
    results = configured.get("results", [])
    if not isinstance(results, list):
        raise AnsibleFilterError("the configuration task's results are not a list")
    return [result for result in results if isinstance(result, dict)]


def _node(node):
    if not isinstance(node, dict) or "services" not in node:
        raise AnsibleFilterError("expects the result of kubegpu.nvidia.nvidia_container_toolkit_info as its argument")
    return node


def toolkit_restarts(configured, node):
    """The container runtimes to restart, in the order the role configures them, each a dict:

    ``name`` (runtime), ``service`` (unit), ``backup_files`` (what the configuration module saved, for the
    rollback), ``new_files`` (CRI-O's drop-in when the module created it, which a rollback removes).

    A runtime is restarted when the configuration module changed its files in a way that needs it
    (``restart_required``), or when k3s or RKE2 have to start again to find the NVIDIA runtime themselves
    (``node.k3s_actions``).
    """
    node = _node(node)
    wanted = {}
    for result in _results(configured):
        item = result.get("item") or {}
        name = item.get("name") if isinstance(item, dict) else None
        if name and result.get("restart_required") and not result.get("skipped"):
            backups = list(result.get("backup_files") or [])
            # CRI-O's drop-in is the module's own file: changed without a backup, it did not exist before (the
            # role's rollback removes it only when backups are on)
            new_files = [result["path"]] if name == "crio" and not backups and result.get("path") else []
            wanted[name] = {"backup_files": backups, "new_files": new_files}
    for action in node.get("k3s_actions") or []:
        wanted.setdefault(action["name"], {"backup_files": [], "new_files": []})
    return [dict(name=name, service=node["services"][name], **wanted[name])
            for name in node.get("runtimes", []) if name in wanted]


def toolkit_runtime_record(configured, record):
    """The content of the runtime configuration record after this run.

    ``configured``: the configuration task's registered result; ``record``: ``nvidia_container_toolkit_info``'s
    ``record`` (``keys`` per runtime, the ``rows`` recorded before).
    """
    from ansible_collections.kubegpu.nvidia.plugins.module_utils.toolkit_node import record_text

    if not isinstance(record, dict) or "keys" not in record:
        raise AnsibleFilterError("toolkit_runtime_record expects the 'record' of kubegpu.nvidia.nvidia_container_toolkit_info")
    results = _results(configured)
    ran = set()
    for result in results:
        item = result.get("item") or {}
        if isinstance(item, dict) and item.get("name"):
            ran.add(item["name"])
    # runtimes whose module did not run this time keep their rows
    kept = [{"item": {"name": name}} for name in record["keys"] if name not in ran]
    return record_text(results + kept, record["keys"], record.get("rows") or [])


def toolkit_plan(state, options):
    """What ``nvidia_container_toolkit_info`` with ``options`` would return on the node whose toolkit state is ``state``
    (``ansible_facts.nvidia_gpu.toolkit_state``), or None: the state does not answer that read (another family,
    packages, record or CDI path; a node read that failed), an option is bad, or the node is one the role stops on.
    The role then runs the module, which reads the node and fails with its one-line message where it has to."""
    from ansible_collections.kubegpu.nvidia.plugins.module_utils import toolkit_state
    from ansible_collections.kubegpu.nvidia.plugins.module_utils.errors import KubegpuError

    if state is None:
        return None
    if not isinstance(state, dict):
        raise AnsibleFilterError("toolkit_plan expects the toolkit state of the GPU facts (a dict), got %s" % type(state).__name__)
    if not isinstance(options, dict):
        raise AnsibleFilterError("toolkit_plan expects the options of nvidia_container_toolkit_info as a dict, got %s"
                                 % type(options).__name__)
    try:
        params = toolkit_state.check_params(options)
        answering = toolkit_state.state_for(state, params)
        return None if answering is None else dict(toolkit_state.plan(answering, params), changed=False)
    except KubegpuError:
        return None


class FilterModule:
    """The collection's filters."""

    def filters(self):
        return {"toolkit_plan": toolkit_plan, "toolkit_restarts": toolkit_restarts,
                "toolkit_runtime_record": toolkit_runtime_record}
