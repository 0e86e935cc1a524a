"""Reliability of k8s_gpu_label and k8s_gpu_validate under bad input and faults: one table per module.

Each case runs the module through `ansible-playbook -vvv` over real HTTP against the Kubernetes API test
server (tests/support/kubeapi), whose bearer tokens are recognisable secrets. Every case asserts:

- the outcome: success, or a failure of the expected `error_kind` with a one-line message (Ansible's own
  argument errors carry no `error_kind`);
- nothing half-applied on the cluster: for k8s_gpu_label, exactly the nodes the result reports as written
  carry the new labels (none when the module failed before writing); for k8s_gpu_validate, no validation
  pod is left behind;
- no traceback anywhere in what ansible-playbook printed;
- no secret (the tokens of the kubeconfig, an `api_key`) in what ansible-playbook -vvv printed.
"""
import json
import secrets
import socket

import pytest

import ansible_run

kubernetes = pytest.importorskip("kubernetes")

SECRET_PREFIX = "kubegpu-secret-"
NODES = ["rel-node-1", "rel-node-2", "rel-node-3"]
SELECTOR = "kubegpu.io/reliability=yes"
LABELS = {"app.kubernetes.io/name": "gpu-validation-reliability"}
T4 = {"present": True, "count": 1, "source": "nvml", "driver_version": "535.183.01", "cuda_driver_version": "12.2",
      "machine": "lab", "devices": [{"name": "Tesla T4", "memory_mib": 15360, "compute_capability": "7.5",
                                     "mig": {"current": None, "pending": None}}]}


@pytest.fixture
def srv(tmp_path):
    from kubeapi import KubeAPIServer

    server = KubeAPIServer(tls=True, token=SECRET_PREFIX + secrets.token_hex(8),
                           readonly_token=SECRET_PREFIX + "ro-" + secrets.token_hex(8),
                           kubeconfig_path=str(tmp_path / "kubeconfig")).start()
    core = kubernetes.client.CoreV1Api(kubernetes.config.new_client_from_config(config_file=server.kubeconfig_path))
    for name in NODES:
        core.create_node({"metadata": {"name": name, "labels": {"kubegpu.io/reliability": "yes"}}})
    server.core = core
    server.reset_counts()
    yield server
    server.stop()


def closed_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def write(tmp_path, name, data):
    path = tmp_path / name
    path.write_bytes(data)
    return str(path)


def kubeconfig_with(srv, tmp_path, name, change):
    import yaml

    with open(srv.kubeconfig_path) as handle:
        doc = yaml.safe_load(handle)
    change(doc)
    return write(tmp_path, name, yaml.safe_dump(doc).encode())


def missing_cert_file(doc):
    doc["users"][0]["user"] = {"client-certificate": "/nonexistent/admin.crt", "client-key": "/nonexistent/admin.key"}


# The kubeconfig variants a user gets wrong: (id, content or a change of the server's kubeconfig, message part)
BAD_KUBECONFIGS = [
    ("kubeconfig-binary", b"\x7fELF\x02\x01\x01\x00\x00\x00\xff\xfe", "is not a text file"),
    ("kubeconfig-list", b"- apiVersion: v1\n- kind: Config\n", "holds a list"),
    ("kubeconfig-yaml-error", None, "is not valid YAML at line"),
    ("kubeconfig-missing-cert-file", missing_cert_file, "the client-certificate file /nonexistent/admin.crt"),
]


def bad_kubeconfig(srv, tmp_path, case_id):
    for name, content, _message in BAD_KUBECONFIGS:
        if name != case_id:
            continue
        if content is None:  # a YAML error on the line that holds the token
            with open(srv.kubeconfig_path) as handle:
                text = handle.read()
            return write(tmp_path, name, text.replace("token: ", "token: [", 1).encode())
        if callable(content):
            return kubeconfig_with(srv, tmp_path, name, content)
        return write(tmp_path, name, content)
    raise KeyError(case_id)


def with_bad_kubeconfig(make_args, case_id):
    """Args (a function of the server and tmp_path) with ``kubeconfig`` one of BAD_KUBECONFIGS."""
    def args(srv, tmp_path):
        return make_args(kubeconfig=bad_kubeconfig(srv, tmp_path, case_id))
    return args


def run_task(srv, tmp_path, module, args, env=None):
    """Run one task with ansible-playbook -vvv; returns (result of the task, everything printed)."""
    playbook = tmp_path / "play.yml"
    playbook.write_text(json.dumps([{"name": "Reliability", "hosts": "localhost", "gather_facts": False,
                                     "tasks": [{"name": "Case", module: args}]}]))
    run = ansible_run.run(["-vvv", "-i", "localhost,", "-c", "local", str(playbook)], kubeconfig=srv.kubeconfig_path,
                          env=env, timeout=300)
    printed = run.stdout + run.stderr
    lines = run.stdout.splitlines()
    assert "{" in lines, printed[-3000:]
    data = json.loads("\n".join(lines[lines.index("{"):]))
    result = data["plays"][0]["tasks"][0]["hosts"]["localhost"]
    return result, printed


def assert_clean(srv, result, printed, expect, message):
    assert "Traceback" not in printed, printed[-4000:]
    for secret in (srv.token, srv.readonly_token):
        assert secret not in printed, "a token was printed"
    assert SECRET_PREFIX not in printed
    if expect == "ok":
        assert not result.get("failed"), result.get("msg")
        return
    assert result.get("failed") is True, result
    assert "\n" not in result["msg"], result["msg"]
    assert result.get("error_kind") == (None if expect == "ansible" else expect), result["msg"]
    if message:
        assert message in result["msg"], result["msg"]


# --------------------------------------------------------------------------------------------- k8s_gpu_label
def label_args(**extra):
    args = {"nodes": [{"name": name, "facts": T4} for name in NODES], "labels": {"team": "ml"},
            "taints": ["nvidia.com/gpu=present:NoSchedule"], "request_timeout": 2, "retries": 1}
    args.update(extra)
    return args


def third_node(**changes):
    args = label_args()
    args["nodes"][2].update(changes)
    return args


LABEL_CASES = [
    # (id, args or a function (srv, tmp_path) -> args, setup (srv) or None, expected kind or "ok", message part)
    ("valid-batch", label_args(), None, "ok", None),
    ("valid-batch-api-key", lambda srv, tmp: label_args(api_key=srv.token), None, "ok", None),
    ("invalid-label-key-on-the-third-node", third_node(labels={"bad key": "x"}), None, "input",
     'node rel-node-3: label key "bad key": name part must consist of'),
    ("invalid-label-value", third_node(labels={"example.com/zone": "-eu-"}), None, "input",
     'label "example.com/zone" value "-eu-": must be empty or consist of'),
    ("invalid-taint-effect", label_args(taints=["nvidia.com/gpu=present:Sometimes"]), None, "input",
     "effect must be one of NoSchedule, PreferNoSchedule, NoExecute"),
    ("unreadable-taint", third_node(taints=["no-effect-here"]), None, "input",
     'nodes[2].taints[0]: taint "no-effect-here" must look like key=value:Effect'),
    ("facts-devices-as-strings", third_node(facts=dict(T4, devices=["Tesla T4"])), None, "input",
     "nodes[2].facts.devices[0] must be a mapping"),
    ("facts-count-as-text", third_node(facts=dict(T4, count="1")), None, "input",
     'nodes[2].facts.count must be a whole number, not the string "1"'),
] + [
    (case_id, with_bad_kubeconfig(label_args, case_id), None, "input", message)
    for case_id, _content, message in BAD_KUBECONFIGS
] + [
    ("kubeconfig-context-missing", label_args(context="production"), None, "input",
     "has no context production (contexts: kubeapi, kubeapi-readonly)"),
    ("never-answering-server", label_args(), lambda srv: srv.inject(hang=True, times=0), "timeout",
     "did not answer within 2s (request_timeout), 2 attempts"),
    ("refused-connection", lambda srv, tmp: label_args(host="https://127.0.0.1:%d" % closed_port(), api_key=srv.token),
     None, "api", "Connection refused"),
    ("read-only-token-403", lambda srv, tmp: label_args(api_key=srv.readonly_token), None, "write", "403 Forbidden"),
    ("403-storm", label_args(), lambda srv: srv.inject(method="PATCH", status=403, times=0), "write", "403"),
    ("404-on-the-listing", label_args(), lambda srv: srv.inject(method="GET", path_regex="/api/v1/nodes$",
                                                                status=404, times=0), "not_found", "404"),
    ("409-storm", label_args(), lambda srv: srv.inject(method="PATCH", status=409, times=0), "write",
     "gave up after 6 conflicting writes"),
    ("500-storm", label_args(), lambda srv: srv.inject(method="PATCH", status=500, times=0), "write",
     "failed after 2 attempts: 500"),
    ("500-storm-on-one-node", label_args(concurrency=1),
     lambda srv: srv.inject(method="PATCH", path_regex="/api/v1/nodes/rel-node-2$", status=500, times=0), "write",
     "patching node rel-node-2 failed after 2 attempts"),
    ("option-type-retries", label_args(retries="many"), None, "ansible", "retries"),
    ("option-type-request-timeout", label_args(request_timeout="soon"), None, "ansible", "request_timeout"),
    ("option-type-nodes", label_args(nodes=["rel-node-1"]), None, "ansible", "dictionary requested"),
    ("option-value-request-timeout", label_args(request_timeout=0), None, "input",
     "request_timeout must be more than 0 seconds"),
]


@pytest.mark.parametrize("case_id, args, setup, expect, message", LABEL_CASES, ids=[c[0] for c in LABEL_CASES])
def test_k8s_gpu_label_reliability(srv, tmp_path, case_id, args, setup, expect, message):
    if callable(args):
        args = args(srv, tmp_path)
    if setup:
        setup(srv)
    result, printed = run_task(srv, tmp_path, "kubegpu.nvidia.k8s_gpu_label", args)
    assert_clean(srv, result, printed, expect, message)
    srv.clear_faults()
    labelled = sorted(n.metadata.name for n in srv.core.list_node().items if (n.metadata.labels or {}).get("team"))
    if expect == "ok":
        assert labelled == NODES
        return
    # nothing half-applied: exactly the nodes the failure reports as written carry the labels
    reported = sorted(n["name"] for n in result.get("nodes") or [] if n.get("changed"))
    assert labelled == reported, (labelled, result.get("nodes"))
    if case_id == "500-storm-on-one-node":
        assert reported == ["rel-node-1"]
    else:
        assert labelled == []


# --------------------------------------------------------------------------------------------- k8s_gpu_validate
def validate_args(**extra):
    args = {"node_selector": SELECTOR, "namespace": "reliability", "timeout": 10, "unschedulable_timeout": 1,
            "poll_interval": 0.5, "request_timeout": 2, "retries": 1,
            "pod_template": {"metadata": {"labels": LABELS,
                                          "annotations": {"kubegpu.io/simulated-log": "Test PASSED\n"}},
                             "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 0,
                                      "containers": [{"name": "check", "image": "registry.example/check:1"}]}}}
    args.update(extra)
    return args


PODS = r"^/api/v1/namespaces/reliability/pods$"
VALIDATE_CASES = [
    ("all-nodes-pass", validate_args(), None, "ok", None),
    ("all-nodes-pass-api-key", lambda srv, tmp: validate_args(api_key=srv.token), None, "ok", None),
    ("pod-template-without-labels", validate_args(pod_template={"spec": {}}), None, "input",
     "pod_template needs metadata.labels"),
] + [
    (case_id, with_bad_kubeconfig(validate_args, case_id), None, "input", message)
    for case_id, _content, message in BAD_KUBECONFIGS
] + [
    ("kubeconfig-context-missing", validate_args(context="production"), None, "input", "has no context production"),
    ("never-answering-server", validate_args(timeout=2, request_timeout=30), lambda srv: srv.inject(hang=True, times=0),
     "timeout", "did not answer within 2s"),
    ("refused-connection",
     lambda srv, tmp: validate_args(host="https://127.0.0.1:%d" % closed_port(), api_key=srv.token), None, "api",
     "Connection refused"),
    ("read-only-token-403", lambda srv, tmp: validate_args(api_key=srv.readonly_token), None, "api", "403 Forbidden"),
    ("403-storm-on-create", validate_args(), lambda srv: srv.inject(method="POST", path_regex=PODS, status=403,
                                                                    times=0), "api", "403"),
    ("404-on-the-node-listing", validate_args(), lambda srv: srv.inject(method="GET", path_regex="/api/v1/nodes$",
                                                                        status=404, times=0), "not_found", "404"),
    ("409-storm-on-create", validate_args(), lambda srv: srv.inject(method="POST", path_regex=PODS, status=409,
                                                                    times=0), "conflict", "409"),
    ("500-storm-on-create", validate_args(), lambda srv: srv.inject(method="POST", path_regex=PODS, status=500,
                                                                    times=0), "api", "failed after 2 attempts: 500"),
    ("option-type-timeout", validate_args(timeout="soon"), None, "ansible", "timeout"),
    ("option-type-nodes", validate_args(nodes={"a": 1}), None, "ansible", "nodes"),
]


@pytest.mark.parametrize("case_id, args, setup, expect, message", VALIDATE_CASES, ids=[c[0] for c in VALIDATE_CASES])
def test_k8s_gpu_validate_reliability(srv, tmp_path, case_id, args, setup, expect, message):
    del case_id
    if callable(args):
        args = args(srv, tmp_path)
    if setup:
        setup(srv)
    result, printed = run_task(srv, tmp_path, "kubegpu.nvidia.k8s_gpu_validate", args)
    assert_clean(srv, result, printed, expect, message)
    srv.clear_faults()
    # nothing left behind: no validation pod, whatever happened
    assert srv.objects("pods", "reliability") == []
    if expect == "ok":
        assert [r["passed"] for r in result["results"]] == [True, True, True]
