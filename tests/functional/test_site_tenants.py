"""kubegpu.nvidia.site with GPU tenants, against the Kubernetes API test server with PodTolerationRestriction and
ExtendedResourceToleration on (tests/support/kubeapi/admission.py): the tenants play creates the tenant after the
device plugin play, its quota checked against the capacity that play read; the validation's tenant path runs a pod
without tolerations in the tenant namespace, which lands on the T4 node and counts against the quota; a second
run changes nothing.
"""
import pytest

from test_site_preflight import (  # noqa: F401  pylint: disable=import-error,unused-import
    fixture_fake_nvml, fixture_site, local)

kubernetes = pytest.importorskip("kubernetes")

TENANTS_PLAY = "Deploy the device plugin, the DRA driver, dcgm-exporter and the GPU tenants"
EXTRA = {
    "gpu_tenants_tenants": [{"namespace": "team-t4", "quota": {"nvidia.com/gpu": 4},
                             "subjects": [{"kind": "Group", "name": "t4-users"}]}],
    # GFD's product label of a time-sliced GPU not renamed: Tesla-T4-SHARED
    "gpu_validation_tenants": [{"namespace": "team-t4", "product": "Tesla-T4-SHARED"}],
    # the T4 shared four ways under nvidia.com/gpu, as in the lab
    "k8s_device_plugin_configs": {"t4-shared": {"sharing_strategy": "time-slicing", "replicas": 4}},
    "k8s_device_plugin_product_configs": {"Tesla-T4": "t4-shared"},
    "k8s_device_plugin_wait_delay": 1, "gpu_validation_delay": 1, "gpu_validation_nvidia_default_runtime": True,
}


def _tasks(result, play):
    """{task name without its role's prefix: result} of the control host in ``play``."""
    return {t["task"]["name"].split(" : ")[-1]: res for p in result.out["plays"] if p["play"]["name"] == play
            for t in p["tasks"] for res in t["hosts"].values()}


def test_site_creates_the_tenants_and_validates_them_without_tolerations(site, kube_server):
    import json

    from kubeapi import admission  # pylint: disable=import-error

    kube_server.store.admission_plugins = set(admission.PLUGINS)
    site.kube.node(site.gpu_host, annotations={"kubegpu.io/simulated-gpus": "1"})
    inventory = site.inventory(control={"localhost": local()})
    extra = ["-e", json.dumps(EXTRA), "--tags", "labels,device_plugin,tenants,validation"]
    result = site.run(inventory, None, *extra)
    assert result.rc == 0, (result.failures, result.stderr[-2000:])
    applied = _tasks(result, TENANTS_PLAY)["Apply the GPU tenants"]
    assert applied["changed"] is True
    # the capacity the device plugin play read (T4 x 4 time-slicing replicas): no node listing of its own
    assert applied["capacity"] == [{"resource": "nvidia.com/gpu", "quota": 4, "allocatable": 4}]
    assert applied["api_requests"]["list"] == 5
    validation = _tasks(result, "Validate every GPU node with a CUDA pod")
    (tenant,) = validation["Validate the GPU tenants with a pod without tolerations"]["results"]
    assert (tenant["node"], tenant["passed"], tenant["quota_used"], tenant["quota_hard"]) == (
        site.gpu_host, True, 1, 4)
    assert "nvidia.com/gpu" in tenant["tolerations"]
    summary = _tasks(result, "Summarise the GPU nodes")["Print the GPU tenants"]["msg"]
    assert summary[0].split() == ["TENANT", "QUOTA", "TIER", "VALIDATION"]
    assert summary[1].split() == ["team-t4", "nvidia.com/gpu=4", "-", "PASS", "on", site.gpu_host, "(quota", "used",
                                  "1", "of", "4)"]

    # a second run changes nothing
    result = site.run(inventory, None, *extra)
    assert result.rc == 0, (result.failures, result.stderr[-2000:])
    assert result.changed == [], result.changed
    assert _tasks(result, TENANTS_PLAY)["Apply the GPU tenants"]["changed"] is False

    # no tenant declared: the play is skipped
    result = site.run(inventory, None, "--tags", "labels,device_plugin,tenants", "-e",
                      json.dumps(dict(EXTRA, gpu_tenants_tenants=[])))
    assert result.rc == 0, (result.failures, result.stderr[-2000:])
    assert _tasks(result, TENANTS_PLAY)["Apply the GPU tenants"].get("skipped") is True
