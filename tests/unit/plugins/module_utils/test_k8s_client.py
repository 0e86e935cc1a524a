"""Unit tests of module_utils/k8s_client.py: the request path, retries and timeouts, and the connection options
(no server: DynamicClient.request is replaced by a stand-in; tests/functional drive the real one over HTTP)."""
import base64
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest
import yaml

pytest.importorskip("kubernetes")

from kubernetes.client.exceptions import ApiException  # noqa: E402
from urllib3.exceptions import (  # noqa: E402
    MaxRetryError, NewConnectionError, ProtocolError, ReadTimeoutError, SSLError)

from ansible_collections.kubegpu.nvidia.plugins.module_utils import k8s_client as kc  # noqa: E402
from ansible_collections.kubegpu.nvidia.plugins.module_utils.errors import InputError  # noqa: E402

HOST = "https://192.0.2.1:6443"
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))
TLS = os.path.join(ROOT, "tests", "support")


class Answer:
    def __init__(self, obj=None, data=None):
        self.status = 200
        self.data = data if data is not None else json.dumps(obj).encode()


def status(code, message, headers=None):
    exc = ApiException(status=code, reason="Reason%d" % code)
    exc.body = json.dumps({"kind": "Status", "message": message})
    exc.headers = headers or {}
    return exc


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        self.now += seconds


def session(monkeypatch, answers, cls=kc.NodeAPI, **kwargs):
    """An ApiSession over a real ApiClient whose DynamicClient.request answers from ``answers`` in order.

    An answer that is an exception is raised; a callable is called with the request and its result used.
    """
    cfg = kc.k8s.Configuration()
    cfg.host = HOST
    clock = Clock()
    kwargs.setdefault("sleep", clock.sleep)
    api = cls(kc.k8s.ApiClient(configuration=cfg), clock=clock, **kwargs)
    sent = []

    def request(method, path, body=None, **params):
        sent.append(dict(params, method=method, path=path, body=body, at=clock.now))
        answer = answers.pop(0)
        if callable(answer) and not isinstance(answer, Answer):
            answer = answer(sent[-1])
        if isinstance(answer, Exception):
            raise answer
        return answer
    monkeypatch.setattr(api.client, "request", request)
    return api, sent, clock


# ------------------------------------------------------------------------------------------- one request path
def test_every_request_goes_by_path_through_the_dynamic_client_with_a_timeout(monkeypatch):
    api, sent, _clock = session(monkeypatch, [
        Answer({"metadata": {}, "items": [{"metadata": {"name": "a b"}}]}), Answer({}),
        Answer({"metadata": {"name": "a b"}})], request_timeout=7)
    assert api.list_nodes(field_selector="metadata.name=a b") == [{"metadata": {"name": "a b"}}]
    assert api.patch_node("a b", {"metadata": {"labels": {"x": "1"}}}) is None
    assert api.get_node("a b") == {"metadata": {"name": "a b"}}
    assert [(s["method"], s["path"]) for s in sent] == [
        ("GET", "/api/v1/nodes"), ("PATCH", "/api/v1/nodes/a%20b"), ("GET", "/api/v1/nodes/a%20b")]
    assert sent[0]["query_params"] == [("limit", 500), ("fieldSelector", "metadata.name=a b")]
    assert sent[1]["content_type"] == kc.STRATEGIC_MERGE_PATCH
    assert sent[1]["body"] == {"metadata": {"labels": {"x": "1"}}}
    assert all(s["serialize"] is False and s["_request_timeout"] == (7.0, 7.0) for s in sent)
    assert all(s["header_params"] == {"Accept": "application/json"} for s in sent)
    assert api.counts == {"list": 1, "patch": 1, "get": 1}


def test_the_dynamic_client_discovers_nothing(monkeypatch):
    # the library's default discoverer would ask the server for its API groups when the client is made
    api, _sent, _clock = session(monkeypatch, [])
    assert isinstance(api.client.resources, kc._PathDiscoverer)


def test_the_module_path_does_not_import_core_v1_api(tmp_path):
    # CoreV1Api and the models it pulls in cost about half a second per module run (measured in
    # docs/k8s_gpu_label.md); the requests go by path and need none of it.
    script = (
        "import sys, json\n"
        "from ansible_collections.kubegpu.nvidia.plugins.module_utils import k8s_client as kc, k8s_pods\n"
        "cfg = kc.k8s.Configuration(); cfg.host = 'https://192.0.2.1:6443'\n"
        "api = k8s_pods.PodAPI(kc.k8s.ApiClient(cfg))\n"
        "class A:\n    data = b'{\"items\": []}'\n"
        "api.client.request = lambda *a, **k: A()\n"
        "api.list_pods('ns'); api.list_nodes()\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('kubernetes.client.api.'))))\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, check=True)
    assert json.loads(out.stdout) == []


def test_listings_follow_continue_tokens(monkeypatch):
    api, sent, _clock = session(monkeypatch, [
        Answer({"metadata": {"continue": "t1"}, "items": [{"metadata": {"name": "a"}}]}),
        Answer({"metadata": {}, "items": [{"metadata": {"name": "b"}}]})], page_size=1)
    assert [n["metadata"]["name"] for n in api.list_nodes()] == ["a", "b"]
    assert sent[1]["query_params"] == [("limit", 1), ("continue", "t1")]
    assert api.counts == {"list": 2}


# ------------------------------------------------------------------------------------------- retries
def test_throttling_and_server_errors_are_retried_honouring_retry_after(monkeypatch):
    api, _sent, clock = session(monkeypatch, [
        status(429, "slow down", {"Retry-After": "3"}), status(503, "unavailable"), Answer({"items": []})])
    assert api.list_nodes() == []
    assert clock.now == 100 + 3.0 + 1.0  # Retry-After, then backoff 0.5 * 2**1
    assert api.counts == {"list": 3}


def test_retries_are_bounded_and_the_message_says_how_many(monkeypatch):
    api, _sent, _clock = session(monkeypatch, [status(500, "etcd down")] * 3, retries=2)
    with pytest.raises(kc.K8sError) as err:
        api.patch_node("n1", {})
    assert err.value.msg == "patching node n1 failed after 3 attempts: 500 Reason500: etcd down"
    assert err.value.kind == "api" and err.value.status == 500
    assert api.counts == {"patch": 3}


def test_a_timed_out_request_is_retried_at_once_within_the_retry_budget(monkeypatch):
    timeout = MaxRetryError(None, "/api/v1/nodes", ReadTimeoutError(None, "/api/v1/nodes", "Read timed out."))
    api, sent, clock = session(monkeypatch, [timeout, timeout, Answer({"items": []})], retries=2,
                               request_timeout=4)
    assert api.list_nodes() == []
    assert [s["at"] for s in sent] == [100, 100, 100]  # no backoff after a timeout: the wait was the timeout
    assert api.counts == {"list": 3}
    api, _sent, clock = session(monkeypatch, [timeout] * 3, retries=2, request_timeout=4)
    with pytest.raises(kc.K8sError) as err:
        api.list_nodes()
    assert err.value.kind == "timeout"
    assert err.value.msg == ("listing nodes failed: the API server at %s did not answer within 4s "
                             "(request_timeout), 3 attempts" % HOST)


def test_a_deadline_caps_each_request_and_stops_retries(monkeypatch):
    timeout = MaxRetryError(None, "/x", ReadTimeoutError(None, "/x", "Read timed out."))

    def slow(request):
        # as the server took the whole timeout to not answer
        api.clock.now += request["_request_timeout"][1]
        return timeout
    api, sent, _clock = session(monkeypatch, [slow] * 6, request_timeout=30, retries=5)
    api.within(5)
    with pytest.raises(kc.K8sError) as err:
        api.list_nodes()
    assert [s["_request_timeout"] for s in sent] == [(5.0, 5.0)]
    assert err.value.kind == "timeout" and "within 5s" in err.value.msg
    # a deadline (nearly) spent still leaves each request MIN_REQUEST_TIMEOUT
    api, sent, clock = session(monkeypatch, [Answer({"items": []})], request_timeout=30)
    api.within(0.2)
    api.list_nodes()
    assert sent[0]["_request_timeout"] == (kc.MIN_REQUEST_TIMEOUT, kc.MIN_REQUEST_TIMEOUT)
    # no retry starts after the deadline
    api, sent, clock = session(monkeypatch, [status(429, "slow", {"Retry-After": "10"}), Answer({"items": []})])
    api.within(5)
    with pytest.raises(kc.K8sError) as err:
        api.list_nodes()
    assert len(sent) == 1 and "429" in err.value.msg


def test_a_dropped_connection_is_retried_with_backoff(monkeypatch):
    dropped = MaxRetryError(None, "/x", ProtocolError("Connection aborted.", ConnectionResetError(104, "reset")))
    api, sent, _clock = session(monkeypatch, [dropped, Answer({})])
    api.patch_node("n1", {})
    assert [s["at"] for s in sent] == [100, 100.5]
    api, sent, _clock = session(monkeypatch, [dropped] * 2, retries=1)
    with pytest.raises(kc.K8sError) as err:
        api.patch_node("n1", {})
    assert "closed the connection without answering (2 attempts)" in err.value.msg and err.value.kind == "api"


def test_a_refused_connection_fails_at_once(monkeypatch):
    refused = MaxRetryError(None, "/x", NewConnectionError(
        None, "Failed to establish a new connection: [Errno 111] Connection refused"))
    api, sent, _clock = session(monkeypatch, [refused])
    with pytest.raises(kc.K8sError) as err:
        api.list_nodes()
    assert len(sent) == 1 and err.value.kind == "api"
    assert err.value.msg == ("listing nodes failed: cannot connect to the API server at %s: [Errno 111] "
                             "Connection refused" % HOST)


@pytest.mark.parametrize("error, hint", [
    (MaxRetryError(None, "/x", SSLError("[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: "
                                        "unable to get local issuer certificate (_ssl.c:1006)")), "validate_certs"),
    (ApiException(status=0, reason="SSLError\n[SSL: WRONG_VERSION_NUMBER] wrong version number"), "http://"),
    (MaxRetryError(None, "/x", SSLError("[SSL: TLSV1_ALERT_UNKNOWN_CA] tlsv1 alert unknown ca")), "client_cert"),
], ids=["untrusted-server", "not-tls", "client-cert-refused"])
def test_tls_failures_are_one_line_with_a_hint(monkeypatch, error, hint):
    api, sent, _clock = session(monkeypatch, [error])
    with pytest.raises(kc.K8sError) as err:
        api.list_nodes()
    assert len(sent) == 1 and "\n" not in err.value.msg and hint in err.value.msg
    assert err.value.msg.startswith("listing nodes failed: TLS error with the API server at %s" % HOST)


def test_plain_http_to_a_tls_port_says_so(monkeypatch):
    exc = ApiException(status=400, reason="Bad Request")
    exc.body = b"Client sent an HTTP request to an HTTPS server.\n"
    api, _sent, _clock = session(monkeypatch, [exc])
    with pytest.raises(kc.K8sError) as err:
        api.list_nodes()
    assert err.value.msg == ("listing nodes failed: 400 Bad Request: Client sent an HTTP request to an HTTPS "
                             "server. (the server's URL starts with https://)")


def test_an_answer_that_is_not_json(monkeypatch):
    api, _sent, _clock = session(monkeypatch, [Answer(data=b"<html>proxy error</html>")])
    with pytest.raises(kc.K8sError, match="listing nodes failed: the API server's answer is not JSON"):
        api.list_nodes()


def test_counts_stay_exact_when_threads_send_at_once(monkeypatch):
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible
    try:
        cfg = kc.k8s.Configuration()
        cfg.host = HOST
        api = kc.NodeAPI(kc.k8s.ApiClient(cfg))
        monkeypatch.setattr(api.client, "request", lambda *a, **k: Answer({}))

        def send(_index):
            for _i in range(2000):
                api.patch_node("n", {})
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(send, range(8)))
    finally:
        sys.setswitchinterval(interval)
    assert api.counts == {"patch": 16000}


# ------------------------------------------------------------------------------------------- options and kubeconfig
def write_kubeconfig(path, token="s3cret-t0ken", server="https://192.0.2.1:6443", **cluster):
    doc = {"apiVersion": "v1", "kind": "Config", "current-context": "c",
           "clusters": [{"name": "k", "cluster": dict({"server": server}, **cluster)}],
           "users": [{"name": "u", "user": {"token": token}}],
           "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}},
                        {"name": "other", "context": {"cluster": "k", "user": "u"}}]}
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def params(**kwargs):
    out = dict((key, None) for key in kc.AUTH_ARG_SPEC)
    out["request_timeout"] = kc.DEFAULT_REQUEST_TIMEOUT
    out.update(kwargs)
    return out


def test_explicit_options_override_the_kubeconfig_also_after_its_credential_refresh(tmp_path):
    # kubernetes.core's precedence (plugins/module_utils/k8s/client.py, _create_configuration: "Override any
    # values in the default configuration with Ansible parameters"). The kubeconfig loader re-applies the
    # kubeconfig before each request when its user has a token: the options must survive that.
    kubeconfig = write_kubeconfig(tmp_path / "kc")
    client = kc.get_api_client(params(kubeconfig=kubeconfig, host="http://127.0.0.1:8001/", validate_certs=False,
                                      api_key="0ther-t0ken"))
    cfg = client.configuration
    for _request in range(2):
        assert cfg.get_api_key_with_prefix("BearerToken", alias="authorization") == "Bearer 0ther-t0ken"
        assert cfg.host == "http://127.0.0.1:8001"
        assert cfg.verify_ssl is False
    # without options, the kubeconfig as it is
    cfg = kc.get_api_client(params(kubeconfig=kubeconfig)).configuration
    assert cfg.get_api_key_with_prefix("BearerToken", alias="authorization") == "Bearer s3cret-t0ken"
    assert cfg.host == "https://192.0.2.1:6443" and cfg.verify_ssl is True


def test_host_alone_reads_no_kubeconfig(tmp_path, monkeypatch):
    monkeypatch.setenv("KUBECONFIG", write_kubeconfig(tmp_path / "kc"))
    cfg = kc.get_api_client(params(host="https://10.0.0.1:6443", api_key="t")).configuration
    assert cfg.host == "https://10.0.0.1:6443"
    assert cfg.get_api_key_with_prefix("BearerToken", alias="authorization") == "Bearer t"
    assert cfg.refresh_api_key_hook is None


def test_context_picks_the_kubeconfig_context(tmp_path):
    path = tmp_path / "kc"
    doc = yaml.safe_load(open(write_kubeconfig(path)))
    doc["clusters"].append({"name": "k2", "cluster": {"server": "https://198.51.100.7:6443"}})
    doc["contexts"][1]["context"]["cluster"] = "k2"
    path.write_text(yaml.safe_dump(doc))
    assert kc.get_api_client(params(kubeconfig=str(path), context="other")).configuration.host == \
        "https://198.51.100.7:6443"


def test_relative_files_in_a_kubeconfig_are_relative_to_it(tmp_path):
    ca = _server_ca()
    os.makedirs(str(tmp_path / "sub"))
    relative = os.path.relpath(ca, str(tmp_path / "sub"))
    kubeconfig = write_kubeconfig(tmp_path / "sub" / "kc", **{"certificate-authority": relative})
    cfg = kc.get_api_client(params(kubeconfig=kubeconfig)).configuration
    assert cfg.ssl_ca_cert == ca


def _server_ca():
    sys.path.insert(0, TLS)
    try:
        from kubeapi.tlsutil import certificate_files
    finally:
        sys.path.remove(TLS)
    return certificate_files()[0]


def _client_cert():
    sys.path.insert(0, TLS)
    try:
        from kubeapi.tlsutil import client_certificate_files
    finally:
        sys.path.remove(TLS)
    return client_certificate_files("unit-test", ("system:masters",))


GARBAGE = b"\x00\x01\x02\xff\xfe\x80binary"


@pytest.mark.parametrize("content, message", [
    (GARBAGE, "is not a text file (not UTF-8 at byte 3)"),
    (b"- a\n- b\n", "is not a kubeconfig: it holds a list, not a mapping with clusters, contexts and users"),
    (b"apiVersion: v1\nusers:\n- name: u\n  user: {token: s3cret-t0ken\n", "is not valid YAML at line 5, column 1"),
    (b"", "is empty"),
    (b"just text", "it holds a string"),
    (b"apiVersion: v1\nclusters: 5\n", "clusters must be a list, not a number"),
    (b"apiVersion: v1\ncurrent-context: c\ncontexts: [{name: c, context: {cluster: k}}]\n",
     "context c names cluster k, which the file does not define"),
    (b"apiVersion: v1\ncontexts: [{name: c, context: {cluster: k}}]\nclusters: [{name: k, cluster: {server: x}}]\n",
     "has no current-context: name one with context (contexts: c)"),
    (b"current-context: c\ncontexts: [{name: c, context: {cluster: k, user: u}}]\n"
     b"clusters: [{name: k, cluster: {server: 'https://h'}}]\n",
     "context c names user u, which the file does not define"),
    (b"current-context: c\ncontexts: [{name: c, context: {cluster: k}}]\nclusters: [{name: k, cluster: {}}]\n",
     "cluster k has no server (or give host)"),
    (b"current-context: c\ncontexts: [{name: c, context: {cluster: k, user: u}}]\n"
     b"clusters: [{name: k, cluster: {server: 'https://h'}}]\n"
     b"users: [{name: u, user: {client-certificate: /nonexistent/client.crt, client-key: /nonexistent/k}}]\n",
     "the client-certificate file /nonexistent/client.crt of user u does not exist"),
    (b"current-context: c\ncontexts: [{name: c, context: {cluster: k}}]\n"
     b"clusters: [{name: k, cluster: {server: 'https://h', certificate-authority-data: '%%%not base64'}}]\n",
     "certificate-authority-data of cluster k is not base64"),
    (b"current-context: c\ncontexts: [{name: c, context: {cluster: k}}]\n"
     b"clusters: [{name: k, cluster: {server: 'https://h', certificate-authority-data: '" +
     base64.b64encode(b"not a certificate") + b"'}}]\n", "the CA certificate data is not a PEM certificate"),
], ids=["binary", "list", "yaml-error", "empty", "scalar", "section-type", "missing-cluster", "no-current-context",
        "missing-user", "no-server", "missing-cert-file", "bad-base64", "ca-not-pem"])
def test_a_kubeconfig_that_cannot_be_used_fails_with_one_line_naming_it(tmp_path, content, message):
    path = tmp_path / "kubeconfig"
    path.write_bytes(content)
    with pytest.raises(InputError) as err:
        kc.get_api_client(params(kubeconfig=str(path)))
    assert err.value.msg.startswith("kubeconfig %s" % path)
    assert message in err.value.msg, err.value.msg
    assert "\n" not in err.value.msg and "s3cret" not in err.value.msg
    assert err.value.kind == "input"


def test_a_context_the_kubeconfig_lacks_is_named(tmp_path):
    kubeconfig = write_kubeconfig(tmp_path / "kc")
    with pytest.raises(InputError, match=r"kubeconfig .* has no context nope \(contexts: c, other\)"):
        kc.get_api_client(params(kubeconfig=kubeconfig, context="nope"))


def test_a_kubeconfig_that_does_not_exist_or_cannot_be_read(tmp_path):
    with pytest.raises(InputError, match=r"kubeconfig .*missing does not exist"):
        kc.get_api_client(params(kubeconfig=str(tmp_path / "missing")))
    with pytest.raises(InputError, match=r"kubeconfig .* is not a file"):
        kc.get_api_client(params(kubeconfig=str(tmp_path)))


@pytest.mark.parametrize("options, message", [
    ({"request_timeout": 0}, "request_timeout must be more than 0 seconds, not 0"),
    ({"host": "k8s.example.com:6443"}, "host must be the API server's URL, such as https://"),
    ({"host": "https://h", "ca_cert": "/nonexistent/ca.crt"}, "ca_cert /nonexistent/ca.crt does not exist"),
    ({"host": "https://h", "proxy": "proxy:3128"}, "proxy must be a URL"),
    ({"host": "https://h", "impersonate_groups": ["g"]}, "impersonate_groups needs impersonate_user"),
    ({"host": "https://h", "client_cert": __file__}, "a client certificate needs its key"),
], ids=["timeout", "host", "ca-file", "proxy", "groups-without-user", "cert-without-key"])
def test_connection_options_that_cannot_work_are_named(options, message):
    with pytest.raises(InputError) as err:
        kc.get_api_client(params(**options))
    assert message in err.value.msg


def test_a_client_certificate_and_key_that_do_not_load(tmp_path):
    cert, key = _client_cert()
    other = tmp_path / "not-a-key.pem"
    other.write_text("-----BEGIN PRIVATE KEY-----\nnot a key\n-----END PRIVATE KEY-----\n")
    with pytest.raises(InputError, match="cannot be used together"):
        kc.get_api_client(params(host="https://h", client_cert=cert, client_key=str(other)))
    cfg = kc.get_api_client(params(host="https://h", client_cert=cert, client_key=key)).configuration
    assert (cfg.cert_file, cfg.key_file) == (cert, key)


def test_client_certificate_options_override_the_kubeconfig_user(tmp_path):
    cert, key = _client_cert()
    kubeconfig = write_kubeconfig(tmp_path / "kc")
    cfg = kc.get_api_client(params(kubeconfig=kubeconfig, client_cert=cert, client_key=key)).configuration
    cfg.get_api_key_with_prefix("BearerToken", alias="authorization")  # the loader's refresh
    assert (cfg.cert_file, cfg.key_file) == (cert, key)


def test_impersonation_sends_one_header_per_group():
    client = kc.get_api_client(params(host="https://h", impersonate_user="alice",
                                      impersonate_groups=["system:masters", "gpu-admins"]))
    headers = client.default_headers
    assert headers["Impersonate-User"] == "alice"
    assert sorted(v for k, v in headers.items() if k == "Impersonate-Group" or str(k) == "Impersonate-Group") == [
        "gpu-admins", "system:masters"]


def test_proxy_options_and_environment(monkeypatch):
    monkeypatch.setenv("K8S_AUTH_PROXY_HEADERS_PROXY_BASIC_AUTH", "user:pass")
    cfg = kc.get_api_client(params(host="https://h", proxy="http://192.0.2.9:3128", no_proxy="10.0.0.0/8")).configuration
    assert cfg.proxy == "http://192.0.2.9:3128" and cfg.no_proxy == "10.0.0.0/8"
    assert cfg.proxy_headers["proxy-authorization"] == "Basic " + base64.b64encode(b"user:pass").decode()
    cfg = kc.get_api_client(params(host="https://h", proxy_headers={"user_agent": "kubegpu", "basic_auth": None,
                                                                    "proxy_basic_auth": None})).configuration
    assert cfg.proxy_headers == {"user-agent": "kubegpu"}


def test_urllib3_retries_nothing_and_the_pool_fits_the_workers():
    client = kc.get_api_client(params(host="https://h", api_key="x"), pool_size=64)
    assert client.configuration.retries.total == 0
    assert client.configuration.retries.respect_retry_after_header is False
    assert client.configuration.connection_pool_maxsize == 64
    default = kc.k8s.Configuration().connection_pool_maxsize
    assert kc.get_api_client(params(host="https://h"), pool_size=1).configuration.connection_pool_maxsize == default


def test_auth_options_take_the_kubernetes_core_environment_variables(monkeypatch):
    from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

    monkeypatch.setenv("K8S_AUTH_CERT_FILE", "/c.crt")
    monkeypatch.setenv("K8S_AUTH_KEY_FILE", "/c.key")
    monkeypatch.setenv("K8S_AUTH_IMPERSONATE_USER", "alice")
    monkeypatch.setenv("K8S_AUTH_IMPERSONATE_GROUPS", "g1,g2")
    monkeypatch.setenv("K8S_AUTH_PROXY", "http://p:3128")
    monkeypatch.setenv("K8S_AUTH_NO_PROXY", "localhost")
    monkeypatch.setenv("K8S_AUTH_REQUEST_TIMEOUT", "2.5")
    monkeypatch.setenv("K8S_AUTH_VERIFY_SSL", "no")
    result = ArgumentSpecValidator(kc.AUTH_ARG_SPEC).validate({})
    assert not result.error_messages, result.error_messages
    got = result.validated_parameters
    assert (got["client_cert"], got["client_key"], got["impersonate_user"], got["impersonate_groups"]) == (
        "/c.crt", "/c.key", "alice", ["g1", "g2"])
    assert (got["proxy"], got["no_proxy"], got["request_timeout"], got["validate_certs"]) == (
        "http://p:3128", "localhost", 2.5, False)
    assert kc.AUTH_ARG_SPEC["api_key"]["no_log"] is True
    assert kc.AUTH_ARG_SPEC["proxy_headers"]["options"]["proxy_basic_auth"]["no_log"] is True


def test_the_action_group_holds_every_module_that_talks_to_the_api():
    modules = os.path.join(ROOT, "plugins", "modules")
    talking = sorted(name[:-3] for name in os.listdir(modules)
                     if name.endswith(".py") and "AUTH_ARG_SPEC" in open(os.path.join(modules, name)).read())
    with open(os.path.join(ROOT, "meta", "runtime.yml")) as handle:
        group = yaml.safe_load(handle)["action_groups"]["k8s"]
    assert talking and sorted(entry for entry in group if isinstance(entry, str)) == talking
    assert {"metadata": {"extend_group": ["kubernetes.core.k8s"]}} in group


def test_an_exec_credential_plugin_runs_relative_to_the_kubeconfig(tmp_path):
    # as EKS and GKE kubeconfigs authenticate: a command that prints an ExecCredential
    os.makedirs(str(tmp_path / "conf" / "bin"))
    plugin = tmp_path / "conf" / "bin" / "token.sh"
    plugin.write_text('#!/bin/sh\necho \'{"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential", '
                      '"status": {"token": "from-exec"}}\'\n')
    plugin.chmod(0o755)
    path = tmp_path / "conf" / "kc"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "k", "cluster": {"server": HOST}}],
        "users": [{"name": "u", "user": {"exec": {"apiVersion": "client.authentication.k8s.io/v1",
                                                  "command": "./bin/token.sh", "interactiveMode": "Never"}}}],
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}]}))
    cfg = kc.get_api_client(params(kubeconfig=str(path))).configuration
    assert cfg.get_api_key_with_prefix("BearerToken", alias="authorization") == "Bearer from-exec"
    # api_key replaces the plugin
    cfg = kc.get_api_client(params(kubeconfig=str(path), api_key="given")).configuration
    assert cfg.get_api_key_with_prefix("BearerToken", alias="authorization") == "Bearer given"
