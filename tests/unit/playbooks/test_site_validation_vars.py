"""Which GPU nodes site.yml's validation play trusts the records of, rendered from the playbook's own vars.

The play passes the role gpu_validation the nodes as the facts play listed them, less those this run
changed: the driver installed or loaded (nvidia_driver_changed), the toolkit changed
(nvidia_container_toolkit_changed), the host failed in the driver or toolkit play (not among the hosts
still in the run), or the labels play wrote the node's labels; kubegpu_revalidate trusts none.
"""
import json
import os

import yaml
from ansible.template import Templar, trust_as_template

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
HOSTS = ["gpu-a", "gpu-b", "gpu-c"]


def validation_play_vars():
    with open(os.path.join(ROOT, "playbooks", "site.yml")) as handle:
        plays = yaml.safe_load(handle)
    (play,) = [p for p in plays if p["name"] == "Validate every GPU node with a CUDA pod"]
    return play["vars"]


def listed(name):
    return {"name": name, "changed": False, "labels": {}, "allocatable": {}, "node_info": {}, "annotations": {}}


def trusted(hostvars_extra=None, labelled_changed=(), active=None, **extra):
    hostvars = {}
    for host in HOSTS:
        hostvars[host] = {"k8s_gpu_node_name": host}
        hostvars[host].update((hostvars_extra or {}).get(host, {}))
    matched = {"nodes": [dict(listed(h), host=h) for h in HOSTS]}
    labelled = {"nodes": [dict(listed(h), changed=h in labelled_changed) for h in HOSTS]}
    for host in HOSTS:
        hostvars[host].update(kubegpu_site_nodes=matched, k8s_gpu_node_result=labelled)
        if active is not None:
            hostvars[host]["kubegpu_site_active_hosts"] = active
    variables = {key: trust_as_template(value) if isinstance(value, str) else value
                 for key, value in validation_play_vars().items()}
    variables.update(groups={"all": HOSTS, "gpu_nodes": HOSTS, "kubegpu_gpu": HOSTS, "k8s_control": ["localhost"]},
                     hostvars=dict(hostvars, localhost={"ansible_connection": "local"}), **extra)
    templar = Templar(variables=variables)
    nodes = json.loads(json.dumps(templar.template(trust_as_template("{{ gpu_validation_known_nodes }}"))))
    return [node["name"] for node in nodes]


def test_nodes_nothing_changed_on_are_trusted():
    assert trusted(active=HOSTS) == HOSTS
    # the labels play did not run (tags): nothing tells of a failed host
    assert trusted() == HOSTS


def test_nodes_this_run_changed_or_whose_host_failed_are_not():
    assert trusted({"gpu-a": {"nvidia_driver_changed": True}}, active=HOSTS) == ["gpu-b", "gpu-c"]
    assert trusted({"gpu-b": {"nvidia_container_toolkit_changed": True}}, active=HOSTS) == ["gpu-a", "gpu-c"]
    assert trusted(labelled_changed=["gpu-c"], active=HOSTS) == ["gpu-a", "gpu-b"]
    assert trusted(active=["gpu-a", "gpu-c"]) == ["gpu-a", "gpu-c"]


def test_revalidate_trusts_no_record():
    assert trusted(active=HOSTS, kubegpu_revalidate=True) == []
