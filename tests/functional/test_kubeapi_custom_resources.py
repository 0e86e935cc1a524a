"""The API test server serves a custom resource only while its CustomResourceDefinition exists, as
kube-apiserver's apiextensions-apiserver does (staging/src/k8s.io/apiextensions-apiserver/pkg/apiserver/
customresource_handler.go: no CRD, 404; discovery lists the resource only once the CRD is there)."""
import pytest

kubernetes = pytest.importorskip("kubernetes")


def namespaced_crd(group, kind, version, subresources=None):
    """A namespaced CustomResourceDefinition of ``kind`` (plural: lower-case kind + "s") with one served and
    stored ``version`` whose schema keeps unknown fields."""
    singular = kind.lower()
    served = {"name": version, "served": True, "storage": True,
              "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}}
    if subresources:
        served["subresources"] = subresources
    return {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "%ss.%s" % (singular, group)},
        "spec": {"group": group, "scope": "Namespaced", "versions": [served],
                 "names": {"plural": singular + "s", "singular": singular, "kind": kind, "listKind": kind + "List"}},
    }


CRD = namespaced_crd("monitoring.coreos.com", "ServiceMonitor", "v1")
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


# kubernetes-sigs/dra-driver-nvidia-gpu v0.4.1 deployments/helm/dra-driver-nvidia-gpu/crds/
# resource.nvidia.com_computedomains.yaml (namespaced, v1beta1, status subresource); demo/specs/imex/channel-injection.yaml
CD_CRD = namespaced_crd("resource.nvidia.com", "ComputeDomain", "v1beta1", subresources={"status": {}})
DOMAIN = {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "ComputeDomain",
          "metadata": {"name": "imex-channel-injection", "namespace": "default"},
          "spec": {"numNodes": 1, "channel": {"resourceClaimTemplate": {"name": "imex-channel-0"}}},
          "status": {"status": "Ready"}}


def test_a_computedomain_is_served_while_its_crd_exists_and_its_status_is_a_subresource(kube_server, kube):
    client = kube.api_client()
    custom = kubernetes.client.CustomObjectsApi(client)
    ext = kubernetes.client.ApiextensionsV1Api(client)
    args = ("resource.nvidia.com", "v1beta1", "default", "computedomains")
    with pytest.raises(kubernetes.client.ApiException) as err:
        custom.create_namespaced_custom_object(*args, DOMAIN)
    assert err.value.status == 404
    ext.create_custom_resource_definition(CD_CRD)
    created = custom.create_namespaced_custom_object(*args, DOMAIN)
    # the status of a resource with a status subresource is not set on create (only through /status)
    assert "status" not in created and created["spec"]["numNodes"] == 1
    custom.patch_namespaced_custom_object_status(*args, "imex-channel-injection", {"status": {"status": "Ready"}})
    assert custom.get_namespaced_custom_object(*args, "imex-channel-injection")["status"] == {"status": "Ready"}
    ext.delete_custom_resource_definition(CD_CRD["metadata"]["name"])
    with pytest.raises(kubernetes.client.ApiException) as err:
        custom.get_namespaced_custom_object(*args, "imex-channel-injection")
    assert err.value.status == 404
