"""The collection's error model: a kind on every failure, and a bug told as a bug."""
import pytest

from ansible_collections.kubegpu.nvidia.plugins.module_utils import errors
from ansible_collections.kubegpu.nvidia.plugins.module_utils.config_file import ConfigFileError
from ansible_collections.kubegpu.nvidia.plugins.module_utils.gpu_validation import ValidationError
from ansible_collections.kubegpu.nvidia.plugins.module_utils.host_facts import HostFactsError
from ansible_collections.kubegpu.nvidia.plugins.module_utils.k8s_client import K8sError
from ansible_collections.kubegpu.nvidia.plugins.module_utils.node_labels import (
    NodeLabelError, NodeLabelRunFailed, NodeMatchError)


class Exit(Exception):
    pass


class FakeModule:
    def __init__(self):
        self.out = None

    def exit_json(self, **kw):
        self.out = kw
        raise Exit()

    def fail_json(self, **kw):
        self.out = dict(kw, failed=True)
        raise Exit()


def run(work, extra=None):
    module = FakeModule()
    with pytest.raises(Exit):
        errors.run_module(module, work, extra)
    return module.out


@pytest.mark.parametrize("exc, kind", [
    (ConfigFileError("x"), "input"),
    (ConfigFileError("x", kind="runtime"), "runtime"),
    (ValidationError("x"), "input"),
    (HostFactsError("x"), "input"),
    (NodeLabelError("x"), "input"),
    (NodeMatchError("x"), "node_match"),
    (NodeLabelRunFailed("x", []), "write"),
    (K8sError("x"), "api"),
    (K8sError("x", status=403), "api"),
    (K8sError("x", status=404), "not_found"),
    (K8sError("x", status=409), "conflict"),
    (errors.TimeoutExpired("x"), "timeout"),
])
def test_every_collection_error_carries_its_kind(exc, kind):
    assert isinstance(exc, errors.KubegpuError)

    def work(module):
        raise exc
    out = run(work)
    assert out["failed"] is True
    assert out["msg"] == "x"
    assert out["error_kind"] == kind
    assert "exception" not in out  # a failure the user can act on carries no traceback


def test_details_become_result_keys_and_override_the_extra_ones():
    def work(module):
        raise NodeLabelRunFailed("write failed", [{"name": "n1", "changed": True}])
    out = run(work, extra=lambda: {"changed": False, "api_requests": {"patch": 2}})
    assert out["changed"] is True
    assert out["nodes"] == [{"name": "n1", "changed": True}]
    assert out["api_requests"] == {"patch": 2}


def test_a_value_error_from_the_code_is_a_bug_not_bad_input():
    def work(module):
        return int("not a number")
    out = run(work)
    assert out["failed"] is True
    assert out["error_kind"] == "bug"
    assert out["msg"].startswith("bug in kubegpu.nvidia (ValueError: invalid literal")
    assert "please report it" in out["msg"]
    assert "\n" not in out["msg"]
    assert "Traceback" in out["exception"]  # for -vvv and the report


def test_success_exits_with_the_work_result():
    assert run(lambda module: {"changed": False, "x": 1}) == {"changed": False, "x": 1}


def test_an_unknown_kind_is_refused():
    with pytest.raises(ValueError, match="unknown error kind 'whatever'"):
        raise errors.KubegpuError("x", kind="whatever")
