"""The cluster's version from its /version answer (k8s.io/apimachinery pkg/version/types.go Info)."""
import pytest

from ansible_collections.kubegpu.nvidia.plugins.module_utils.errors import ApiError
from ansible_collections.kubegpu.nvidia.plugins.module_utils.k8s_cluster import parse_version, read_cluster


@pytest.mark.parametrize("info, version", [
    ({"major": "1", "minor": "34", "gitVersion": "v1.34.2"}, (1, 34, 2)),
    # distributions' suffixes: EKS, GKE, k3s, RKE2, OpenShift
    ({"major": "1", "minor": "31+", "gitVersion": "v1.31.4-eks-2d5f260"}, (1, 31, 4)),
    ({"major": "1", "minor": "33", "gitVersion": "v1.33.5-gke.1201000"}, (1, 33, 5)),
    ({"major": "1", "minor": "30", "gitVersion": "v1.30.6+k3s1"}, (1, 30, 6)),
    ({"major": "1", "minor": "32", "gitVersion": "v1.32.3+rke2r1"}, (1, 32, 3)),
    ({"major": "1", "minor": "34", "gitVersion": "v1.34.0-rc.1"}, (1, 34, 0)),
    # no usable gitVersion: major and minor ("+" marks a distribution build)
    ({"major": "1", "minor": "29+", "gitVersion": "v0.0.0-master+$Format:%H$"}, (0, 0, 0)),
    ({"major": "1", "minor": "29+"}, (1, 29, 0)),
    ({"major": "1", "minor": "35", "gitVersion": ""}, (1, 35, 0)),
])
def test_parse_version(info, version):
    assert parse_version(info) == version


@pytest.mark.parametrize("info", [
    {}, {"gitVersion": "main"}, {"major": "", "minor": ""}, ["v1.34.2"], "ok",
])
def test_an_answer_without_a_version_is_not_a_kubernetes_api_server(info):
    with pytest.raises(ApiError, match="is the URL a Kubernetes API server"):
        parse_version(info)


class _Session:
    host = "https://10.0.0.1:6443"

    def __init__(self, answer):
        self.answer = answer
        self.sent = []

    def request(self, verb, what, method, path):
        self.sent.append((verb, method, path))
        return self.answer


def test_read_cluster_sends_one_get_of_version():
    answer = {"major": "1", "minor": "34", "gitVersion": "v1.34.2", "platform": "linux/amd64"}
    api = _Session(answer)
    assert read_cluster(api) == {"server": "https://10.0.0.1:6443", "version": "1.34.2", "git_version": "v1.34.2",
                                 "version_info": answer}
    assert api.sent == [("get", "GET", "/version")]
