"""The API test server serves a custom resource only while its CustomResourceDefinition exists, as
kube-apiserver's apiextensions-apiserver does (staging/src/k8s.io/apiextensions-apiserver/pkg/apiserver/
customresource_handler.go: no CRD, 404; discovery lists the resource only once the CRD is there)."""
import pytest

kubernetes = pytest.importorskip("kubernetes")

CRD = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": "servicemonitors.monitoring.coreos.com"},
    "spec": {"group": "monitoring.coreos.com", "scope": "Namespaced",
             "names": {"plural": "servicemonitors", "singular": "servicemonitor", "kind": "ServiceMonitor",
                       "listKind": "ServiceMonitorList"},
             "versions": [{"name": "v1", "served": True, "storage": True,
                           "schema": {"openAPIV3Schema": {"type": "object",
                                                          "x-kubernetes-preserve-unknown-fields": True}}}]},
}
MONITOR = {"apiVersion": "monitoring.coreos.com/v1", "kind": "ServiceMonitor",
           "metadata": {"name": "m", "namespace": "default"},
           "spec": {"selector": {"matchLabels": {"app": "x"}}, "endpoints": [{"port": "metrics"}]}}


def test_a_servicemonitor_is_served_only_while_its_crd_exists(kube_server, kube):
    client = kube.api_client()
    custom = kubernetes.client.CustomObjectsApi(client)
    apis = kubernetes.client.ApisApi(client)
    ext = kubernetes.client.ApiextensionsV1Api(client)

    def groups():
        return [g.name for g in apis.get_api_versions().groups]

    assert "monitoring.coreos.com" not in groups()
    with pytest.raises(kubernetes.client.ApiException) as err:
        custom.create_namespaced_custom_object("monitoring.coreos.com", "v1", "default", "servicemonitors", MONITOR)
    assert err.value.status == 404

    ext.create_custom_resource_definition(CRD)
    assert "monitoring.coreos.com" in groups()
    custom.create_namespaced_custom_object("monitoring.coreos.com", "v1", "default", "servicemonitors", MONITOR)
    got = custom.get_namespaced_custom_object("monitoring.coreos.com", "v1", "default", "servicemonitors", "m")
    assert got["spec"]["endpoints"] == [{"port": "metrics"}]

    ext.delete_custom_resource_definition(CRD["metadata"]["name"])
    assert "monitoring.coreos.com" not in groups()
    with pytest.raises(kubernetes.client.ApiException) as err:
        custom.list_namespaced_custom_object("monitoring.coreos.com", "v1", "default", "servicemonitors")
    assert err.value.status == 404
