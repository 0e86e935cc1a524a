# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
"""Ansible's own host facts, gathered inside another module's run.

``ansible.builtin.setup`` is a module run of its own on every host; a facts module that needs a few
of its subsets anyway can gather them in its own run with the same collectors, so that a play makes
one module run per host instead of two. The facts are exactly setup's: the same collectors, subset
rules, minimal subset and C(ansible_) prefix.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.kubegpu.nvidia.plugins.module_utils.errors import InputError

# setup's minimal subset: gathered unless the subsets include '!min'
MINIMAL_GATHER_SUBSET = frozenset(["apparmor", "caps", "cmdline", "date_time", "distribution", "dns", "env", "fips",
                                   "local", "lsb", "pkg_mgr", "platform", "python", "selinux", "service_mgr",
                                   "ssh_pub_keys", "user"])


class HostFactsError(InputError):
    """A subset that no collector gathers, or collectors that depend on each other in a loop."""


def gather_host_facts(module, gather_subset, gather_timeout=10):
    """The facts setup returns for ``gather_subset`` (``ansible_``-prefixed keys), gathered in this run.

    The collectors are imported here, not at module load: loading them is most of what a setup run
    costs, and only a run that asks for host facts pays it.
    """
    from ansible.module_utils.facts import ansible_collector, default_collectors
    from ansible.module_utils.facts.collector import CollectorNotFoundError, CycleFoundInFactDeps, UnresolvedFactDep
    from ansible.module_utils.facts.namespace import PrefixFactNamespace

    try:
        collector = ansible_collector.get_ansible_collector(
            all_collector_classes=default_collectors.collectors,
            namespace=PrefixFactNamespace(namespace_name="ansible", prefix="ansible_"),
            filter_spec=[],
            gather_subset=gather_subset,
            gather_timeout=gather_timeout,
            minimal_gather_subset=MINIMAL_GATHER_SUBSET)
    except (TypeError, CollectorNotFoundError, CycleFoundInFactDeps, UnresolvedFactDep) as exc:
        raise HostFactsError("gather_subset %s: %s" % (", ".join(gather_subset), exc))
    return collector.collect(module=module)
