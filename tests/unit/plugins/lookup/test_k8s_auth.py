"""The k8s_auth lookup: one Kubernetes connection from the kubegpu_* variables."""
import pytest

from ansible.errors import AnsibleLookupError

from ansible_collections.kubegpu.nvidia.plugins.lookup.k8s_auth import OPTIONS, connection


def test_only_the_options_that_are_set_come_back():
    variables = {"kubegpu_kubeconfig": "/etc/kubernetes/admin.conf", "kubegpu_context": "", "kubegpu_host": None,
                 "kubegpu_validate_certs": False, "kubegpu_impersonate_groups": [], "unrelated": "x"}
    assert connection(variables) == {"kubeconfig": "/etc/kubernetes/admin.conf", "validate_certs": False}


def test_every_module_connection_option_has_a_kubegpu_variable():
    variables = dict(("kubegpu_" + option, [] if kind is list else True if kind is bool else "v")
                     for option, kind in OPTIONS.items())
    variables["kubegpu_impersonate_groups"] = ["system:masters"]
    assert sorted(connection(variables)) == sorted(OPTIONS)
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
    with pytest.raises(AnsibleLookupError, match=message):
        connection({name: value})


def test_a_deprecated_role_variable_is_read_with_a_warning_when_the_new_one_is_unset():
    warnings = []
    variables = {"k8s_device_plugin_kubeconfig": "/old", "k8s_device_plugin_context": "",
                 "kubegpu_host": "https://new:6443", "k8s_device_plugin_host": "https://old:6443"}
    result = connection(variables, ["k8s_device_plugin_"], warnings.append)
    assert result == {"kubeconfig": "/old", "host": "https://new:6443"}
    assert warnings == ["k8s_device_plugin_kubeconfig is deprecated: set kubegpu_kubeconfig instead "
                        "(one connection for every play and role of kubegpu.nvidia)"]
