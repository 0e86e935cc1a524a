"""The API test server's optional admission plugins PodTolerationRestriction and ExtendedResourceToleration.

Cases are derived from kubernetes/kubernetes
plugin/pkg/admission/podtolerationrestriction/admission_test.go (TestPodAdmission),
plugin/pkg/admission/extendedresourcetoleration/admission_test.go (TestAdmit) and
pkg/util/tolerations/tolerations_test.go (TestMergeTolerations, TestVerifyAgainstWhitelist), and run over HTTP
with the real kubernetes client; the server enables the plugins only when asked, as kube-apiserver does.
"""
import json

import pytest

from kubeapi import KubeAPIServer  # pylint: disable=import-error
from kubeapi import admission  # pylint: disable=import-error

kubernetes = pytest.importorskip("kubernetes")

DEFAULTS = admission.NS_DEFAULT_TOLERATIONS
WHITELIST = admission.NS_WHITELIST_TOLERATIONS
NOT_READY = {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute",
             "tolerationSeconds": 300}
UNREACHABLE = {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute",
               "tolerationSeconds": 300}
MEMORY = admission.MEMORY_PRESSURE
GPU_EXISTS = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
GPU_EQUAL = {"key": "nvidia.com/gpu", "operator": "Equal", "value": "present", "effect": "NoSchedule"}
TEST_KEY = {"key": "testKey", "operator": "Equal", "value": "testValue", "effect": "NoSchedule"}
TEST_KEY_OTHER = {"key": "testKey", "operator": "Equal", "value": "testValue1", "effect": "NoSchedule"}
TEST_KEY_EXISTS = {"key": "testKey", "operator": "Exists", "effect": "NoSchedule"}


@pytest.fixture
def server(tmp_path):
    srv = KubeAPIServer(tls=True, kubeconfig_path=str(tmp_path / "kubeconfig"),
                        admission_plugins=admission.PLUGINS).start()
    try:
        yield srv
    finally:
        srv.stop()


def core(srv):
    return kubernetes.client.CoreV1Api(kubernetes.config.new_client_from_config(srv.kubeconfig_path))


def namespace(api, name, annotations=None):
    api.create_namespace({"metadata": {"name": name, "annotations": annotations or {}}})
    return name


def pod(api, ns, tolerations=None, limits=None, init_limits=None, requests=None):
    ctr = {"name": "c", "image": "busybox:1.36"}
    if limits or requests:
        ctr["resources"] = {}
        if limits:
            ctr["resources"]["limits"] = limits
        if requests:
            ctr["resources"]["requests"] = requests
    spec = {"containers": [ctr], "restartPolicy": "Never"}
    if init_limits:
        spec["initContainers"] = [{"name": "i", "image": "busybox:1.36", "resources": {"limits": init_limits}}]
    if tolerations is not None:
        spec["tolerations"] = tolerations
    created = api.create_namespaced_pod(ns, {"metadata": {"generateName": "p-"}, "spec": spec})
    return [{k: v for k, v in t.items() if v is not None}
            for t in api.api_client.sanitize_for_serialization(created.spec.tolerations or [])]


# ExtendedResourceToleration: extendedresourcetoleration/admission_test.go TestAdmit (requests of containers and
# init containers; the test server defaults requests from limits first, as the real defaulting does)
@pytest.mark.parametrize("limits, init_limits, requests, tolerations, expected", [
    # "empty pod without any extended resources, expect no change in tolerations"
    (None, None, None, None, [NOT_READY, UNREACHABLE]),
    # "pod with container without any extended resources, expect no change in tolerations"
    ({"cpu": "1"}, None, None, None, [NOT_READY, UNREACHABLE]),
    # "pod with container with extended resource, expect toleration to be added"
    ({"nvidia.com/gpu": "1"}, None, None, None, [NOT_READY, UNREACHABLE, GPU_EXISTS]),
    # "pod with init container with extended resource, expect toleration to be added"
    (None, {"nvidia.com/gpu": "1"}, None, None, [NOT_READY, UNREACHABLE, GPU_EXISTS]),
    # "pod with existing tolerations and container with extended resource, expect existing tolerations to be
    # preserved and new toleration to be added"
    ({"nvidia.com/gpu": "1"}, None, None, [TEST_KEY], [TEST_KEY, NOT_READY, UNREACHABLE, GPU_EXISTS]),
    # "pod with multiple extended resources, expect multiple tolerations to be added" (sorted by name)
    ({"nvidia.com/mig-1g.10gb": "1", "example.com/device-ek": "1"}, None, None, None,
     [NOT_READY, UNREACHABLE, {"key": "example.com/device-ek", "operator": "Exists", "effect": "NoSchedule"},
      {"key": "nvidia.com/mig-1g.10gb", "operator": "Exists", "effect": "NoSchedule"}]),
    # "pod with container with extended resource, existing toleration for the same resource": no duplicate
    ({"nvidia.com/gpu": "1"}, None, None, [GPU_EXISTS], [GPU_EXISTS, NOT_READY, UNREACHABLE]),
    # a toleration of the same key but another operator is kept and the plugin's is added
    ({"nvidia.com/gpu": "1"}, None, None, [GPU_EQUAL], [GPU_EQUAL, NOT_READY, UNREACHABLE, GPU_EXISTS]),
    # kubernetes.io resources are not extended resources (helper.IsExtendedResourceName)
    (None, None, {"hugepages-2Mi": "2Mi"}, None, [NOT_READY, UNREACHABLE]),
])
def test_extended_resource_toleration(tmp_path, limits, init_limits, requests, tolerations, expected):
    srv = KubeAPIServer(tls=True, kubeconfig_path=str(tmp_path / "kubeconfig"),
                        admission_plugins=[admission.EXTENDED_RESOURCE_TOLERATION]).start()
    try:
        api = core(srv)
        ns = namespace(api, "ert")
        assert pod(api, ns, tolerations, limits, init_limits, requests) == expected
    finally:
        srv.stop()


# PodTolerationRestriction: podtolerationrestriction/admission_test.go TestPodAdmission (BestEffort pods, so
# no memory-pressure toleration unless a case says otherwise)
@pytest.mark.parametrize("ns_defaults, ns_whitelist, tolerations, expected", [
    # "default tolerations of the namespace are added to a pod without tolerations"
    ([TEST_KEY], None, None, [NOT_READY, UNREACHABLE, TEST_KEY]),
    # "pod tolerations are kept and the namespace's added"
    ([TEST_KEY], None, [GPU_EQUAL], [GPU_EQUAL, NOT_READY, UNREACHABLE, TEST_KEY]),
    # "a namespace toleration and a pod toleration with the same key but other values are both kept"
    ([TEST_KEY], None, [TEST_KEY_OTHER], [TEST_KEY_OTHER, NOT_READY, UNREACHABLE, TEST_KEY]),
    # "the pod's Exists toleration covers the namespace's Equal one" (MergeTolerations keeps the superset)
    ([TEST_KEY], None, [TEST_KEY_EXISTS], [TEST_KEY_EXISTS, NOT_READY, UNREACHABLE]),
    # "the namespace's Exists toleration replaces the pod's Equal one"
    ([TEST_KEY_EXISTS], None, [TEST_KEY], [NOT_READY, UNREACHABLE, TEST_KEY_EXISTS]),
    # an empty default annotation adds nothing
    ("", None, None, [NOT_READY, UNREACHABLE]),
    # "whitelist covers the merged tolerations": Exists with an empty key tolerates everything
    ([TEST_KEY], [{"operator": "Exists"}], None, [NOT_READY, UNREACHABLE, TEST_KEY]),
])
def test_pod_toleration_restriction(server, ns_defaults, ns_whitelist, tolerations, expected):
    api = core(server)
    annotations = {}
    if ns_defaults is not None:
        annotations[DEFAULTS] = ns_defaults if isinstance(ns_defaults, str) else json.dumps(ns_defaults)
    if ns_whitelist is not None:
        annotations[WHITELIST] = json.dumps(ns_whitelist)
    ns = namespace(api, "ptr", annotations)
    assert pod(api, ns, tolerations) == expected


def test_pod_toleration_restriction_adds_memory_pressure_to_pods_that_are_not_best_effort(server):
    # admission.go: qoshelper.GetPodQOS(pod) != BestEffort -> memory-pressure toleration
    api = core(server)
    ns = namespace(api, "burstable")
    assert pod(api, ns, requests={"cpu": "100m"}) == [NOT_READY, UNREACHABLE, MEMORY]


@pytest.mark.parametrize("whitelist, tolerations", [
    # "pod toleration that the whitelist does not cover is refused"
    ([TEST_KEY], [GPU_EQUAL]),
    # "namespace default tolerations merged in must be covered too": the default not-ready toleration is not
    ([TEST_KEY], None),
])
def test_pod_toleration_restriction_refuses_tolerations_outside_the_whitelist(server, whitelist, tolerations):
    api = core(server)
    ns = namespace(api, "wl", {WHITELIST: json.dumps(whitelist)})
    with pytest.raises(kubernetes.client.ApiException) as info:
        pod(api, ns, tolerations)
    # a plain error of the plugin: kube-apiserver answers 500 with its text
    assert info.value.status == 500
    assert json.loads(info.value.body)["message"] == admission.WHITELIST_MESSAGE
    assert api.list_namespaced_pod(ns).items == []


def test_pod_toleration_restriction_refuses_an_annotation_that_is_not_a_toleration_list(server):
    api = core(server)
    ns = namespace(api, "bad", {DEFAULTS: "{not json"})
    with pytest.raises(kubernetes.client.ApiException) as info:
        pod(api, ns)
    assert info.value.status == 500


def test_the_plugins_are_off_unless_enabled(kube_server, kube):
    api = kubernetes.client.CoreV1Api(kube.api_client())
    ns = namespace(api, "off", {DEFAULTS: json.dumps([TEST_KEY])})
    assert pod(api, ns, limits={"nvidia.com/gpu": "1"}) == [NOT_READY, UNREACHABLE]
    kube_server.store.admission_plugins = set(admission.PLUGINS)
    # a GPU pod is Burstable: the memory-pressure toleration as well
    assert pod(api, ns, limits={"nvidia.com/gpu": "1"}) == [NOT_READY, UNREACHABLE, TEST_KEY, MEMORY, GPU_EXISTS]


def test_unknown_plugin_names_are_refused():
    with pytest.raises(ValueError, match="unknown admission plugin"):
        KubeAPIServer(admission_plugins=["AlwaysPullImages"])


@pytest.mark.parametrize("first, second, expected", [
    # tolerations_test.go TestMergeTolerations: "disjoint", "identical", "superset first", "superset second"
    ([TEST_KEY], [GPU_EQUAL], [TEST_KEY, GPU_EQUAL]),
    ([TEST_KEY], [TEST_KEY], [TEST_KEY]),
    ([TEST_KEY_EXISTS], [TEST_KEY], [TEST_KEY_EXISTS]),
    ([TEST_KEY], [TEST_KEY_EXISTS], [TEST_KEY_EXISTS]),
    # a NoExecute toleration with more seconds covers one with fewer, not the other way round
    ([dict(NOT_READY, tolerationSeconds=60)], [NOT_READY], [NOT_READY]),
    ([NOT_READY], [dict(NOT_READY, tolerationSeconds=60)], [NOT_READY]),
])
def test_merge_tolerations(first, second, expected):
    assert admission.merge_tolerations(first, second) == expected
