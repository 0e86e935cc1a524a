# -*- coding: utf-8 -*-
# Copyright: kubegpu.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Filters kubegpu.nvidia.site_summary, summary_table and validation_table: the tables a site run prints."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# The filters import the module_utils they use when called, not here (docs/development.md, Conventions).

from ansible.errors import AnsibleFilterError


def site_summary(hosts, hostvars, matches=None, labelled=None, capacity=None, validation=None, check_mode=False,
                 health=None):
    """One row per host of ``hosts`` (module_utils/site_summary.py says what each column holds)."""
    from ansible_collections.kubegpu.nvidia.plugins.module_utils.site_summary import summary_rows

    if isinstance(hosts, str):
        hosts = [hosts]
    try:
        return summary_rows(hosts, hostvars, matches=matches, labelled=labelled, capacity=capacity,
                            validation=validation, check_mode=check_mode, health=health)
    except (AttributeError, TypeError, KeyError) as exc:
        raise AnsibleFilterError("site_summary: the results it was given are not of the expected shape: %s" % exc)


def table(rows, columns=None):
    """The rows as the lines of a text table."""
    from ansible_collections.kubegpu.nvidia.plugins.module_utils.site_summary import COLUMNS, summary_table

    if not isinstance(rows, list) or not all(isinstance(row, dict) for row in rows):
        raise AnsibleFilterError("summary_table expects a list of rows (dicts)")
    return summary_table(rows, tuple(columns) if columns else COLUMNS)


def validation(results):
    """The validation results (k8s_gpu_validate's results) as the lines of a table."""
    from ansible_collections.kubegpu.nvidia.plugins.module_utils.site_summary import validation_table

    if not isinstance(results, list) or not all(isinstance(row, dict) for row in results):
        raise AnsibleFilterError("validation_table expects the validation results (a list of dicts)")
    return validation_table(results)


def tenants(tenants_, validation_=None, check_mode=False):
    """The GPU tenants (k8s_gpu_tenants' tenants) and the tenant path's results as the lines of a table."""
    from ansible_collections.kubegpu.nvidia.plugins.module_utils.site_summary import tenant_table

    for what, value in (("tenants", tenants_), ("tenant validation results", validation_ or [])):
        if not isinstance(value, list) or not all(isinstance(row, dict) for row in value):
            raise AnsibleFilterError("tenant_table expects the %s as a list of dicts" % what)
    return tenant_table(tenants_, validation_, check_mode)


class FilterModule:
    """The collection's filters."""

    def filters(self):
        return {"site_summary": site_summary, "summary_table": table, "validation_table": validation,
                "tenant_table": tenants}
