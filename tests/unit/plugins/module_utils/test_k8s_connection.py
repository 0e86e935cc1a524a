"""One Kubernetes connection from the kubegpu_* variables (lookup k8s_auth), and the retired role variables."""
import pytest

from ansible_collections.kubegpu.nvidia.plugins.filter.retired_connection import retired_connection
from ansible_collections.kubegpu.nvidia.plugins.module_utils.errors import InputError
from ansible_collections.kubegpu.nvidia.plugins.module_utils.k8s_client import AUTH_ARG_SPEC
from ansible_collections.kubegpu.nvidia.plugins.module_utils.k8s_connection import OPTIONS, connection


def test_only_the_options_that_are_set_come_back():
    variables = {"kubegpu_kubeconfig": "/etc/kubernetes/admin.conf", "kubegpu_context": "", "kubegpu_host": None,
                 "kubegpu_validate_certs": False, "kubegpu_impersonate_groups": [], "unrelated": "x"}
    assert connection(variables) == {"kubeconfig": "/etc/kubernetes/admin.conf", "validate_certs": False}


def test_every_option_is_one_the_collection_s_modules_take():
    # module_defaults hands each option to every module of group/kubegpu.nvidia.k8s
    assert set(OPTIONS) <= set(AUTH_ARG_SPEC)
    assert {"client_cert", "client_key", "proxy", "impersonate_user", "impersonate_groups"} <= set(OPTIONS)


@pytest.mark.parametrize("name, value, option, expected", [
    ("kubegpu_validate_certs", "false", "validate_certs", False),
    ("kubegpu_validate_certs", "yes", "validate_certs", True),
    ("kubegpu_impersonate_groups", "team-a, team-b", "impersonate_groups", ["team-a", "team-b"]),
    ("kubegpu_context", 7, "context", "7"),
])
def test_inventory_spellings_are_converted(name, value, option, expected):
    assert connection({name: value}) == {option: expected}


@pytest.mark.parametrize("name, value, message", [
    ("kubegpu_validate_certs", "maybe", "kubegpu_validate_certs must be a boolean, not str"),
    ("kubegpu_kubeconfig", ["/a", "/b"], "kubegpu_kubeconfig must be a str, not list"),
])
def test_a_value_of_the_wrong_type_is_refused_naming_the_variable(name, value, message):
    with pytest.raises(InputError, match=message):
        connection({name: value})


def test_retired_role_variables_are_named_with_what_to_set_instead():
    assert retired_connection([]) == ""
    message = retired_connection(["k8s_device_plugin_validate_certs", "k8s_device_plugin_kubeconfig"])
    assert message.startswith("k8s_device_plugin_kubeconfig, k8s_device_plugin_validate_certs no longer read: ")
    assert "(set kubegpu_kubeconfig, kubegpu_validate_certs, and give the play module_defaults: " in message
    assert "{group/kubegpu.nvidia.k8s: \"{{ lookup('kubegpu.nvidia.k8s_auth') }}\"}" in message
    assert "\n" not in message
