"""tests/support/kubeapi/cel.py: the DRA selector environment of the API test server on cel-python.

Cases follow kubernetes/kubernetes staging/src/k8s.io/dynamic-resource-allocation/cel/compile_test.go
(driver, attribute and capacity lookups, default domain, missing domain, missing attribute, version and
quantity comparisons, cel.bind), apiserver pkg/cel/library/quantity_test.go and semver_test.go, and the
DeviceClasses of kubernetes-sigs/dra-driver-nvidia-gpu deployments/helm/dra-driver-nvidia-gpu/templates.
"""

import pytest

pytest.importorskip("celpy")
from kubeapi import cel  # noqa: E402

DRIVER = "gpu.nvidia.com"
H100 = {"name": "gpu-0",
        "attributes": {"type": {"string": "gpu"}, "productName": {"string": "NVIDIA H100 80GB HBM3"},
                       "cudaComputeCapability": {"version": "9.0.0"}, "driverVersion": {"version": "570.124.6"},
                       "resource.kubernetes.io/pciBusID": {"string": "0000:18:00.0"},
                       "index": {"int": 0}, "migCapable": {"bool": True}},
        "capacity": {"memory": {"value": "81559Mi"}}}

MATCHES = [
    # (expression, expected) for H100
    ("device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'", True),
    ("device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'mig'", False),
    ("device.attributes['gpu.nvidia.com'].productName == 'NVIDIA H100 80GB HBM3'", True),
    # an attribute without a domain takes the driver's name as its domain; a qualified one keeps its own
    ("device.attributes['resource.kubernetes.io'].pciBusID == '0000:18:00.0'", True),
    ("device.attributes['gpu.nvidia.com'].index == 0 && device.attributes['gpu.nvidia.com'].migCapable", True),
    # a domain the device does not have is an empty map, not an error
    ("device.attributes['dra.example.com'].size() == 0", True),
    ("!('nvlink' in device.attributes['gpu.nvidia.com'])", True),
    # quantities (library.Quantity)
    ("device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('40Gi')) >= 0", True),
    ("device.capacity['gpu.nvidia.com'].memory.isGreaterThan(quantity('80Gi'))", False),
    ("device.capacity['gpu.nvidia.com'].memory.isLessThan(quantity('85520000k'))", False),
    ("device.capacity['gpu.nvidia.com'].memory.asInteger() == 81559 * 1024 * 1024", True),
    ("quantity('1.5Gi').isInteger() && quantity('500m').sign() == 1 && !quantity('500m').isInteger()", True),
    ("quantity('1Gi').add(quantity('1Gi')).compareTo(quantity('2Gi')) == 0", True),
    ("isQuantity('1Gi') && !isQuantity('1 Gi')", True),
    # versions (library.SemverLib)
    ("device.attributes['gpu.nvidia.com'].driverVersion.isGreaterThan(semver('565.0.0'))", True),
    ("device.attributes['gpu.nvidia.com'].cudaComputeCapability.compareTo(semver('9.0.0')) == 0", True),
    ("device.attributes['gpu.nvidia.com'].driverVersion.major() >= 565", True),
    ("semver('1.0.0-alpha').isLessThan(semver('1.0.0'))", True),
    # standard CEL string functions and cel.bind (ext.Bindings)
    ("device.attributes['gpu.nvidia.com'].productName.matches('^NVIDIA H1[0-9]0')", True),
    ("cel.bind(g, device.attributes['gpu.nvidia.com'], g.type == 'gpu' && g.productName.startsWith('NVIDIA'))", True),
]


@pytest.mark.parametrize("expression,expected", MATCHES)
def test_selectors_evaluate_against_a_device_as_kubernetes_defines_it(expression, expected):
    assert cel.compile_expression(expression).matches(DRIVER, H100) is expected


COMPILE_ERRORS = [
    ("device.driver ==", "compilation failed: ERROR: <input>:1:"),
    ("gpu.type == 'gpu'", "undeclared reference to 'gpu'"),
    ("device.driver", "must evaluate to bool or the unknown type, not string"),
    ("1 + 2", "must evaluate to bool or the unknown type, not int"),
]


@pytest.mark.parametrize("expression,message", COMPILE_ERRORS)
def test_expressions_that_do_not_compile_are_refused_with_the_compilers_message(expression, message):
    with pytest.raises(cel.CelError) as err:
        cel.compile_expression(expression)
    assert message in str(err.value)


def test_a_missing_attribute_is_a_runtime_error_naming_it():
    program = cel.compile_expression("device.attributes['gpu.nvidia.com'].nvlink == true")
    with pytest.raises(cel.CelError) as err:
        program.matches(DRIVER, H100)
    assert str(err.value) == "no such key: nvlink"


@pytest.mark.parametrize("text,value", [
    ("81559Mi", 81559 * 2 ** 20), ("40Gi", 40 * 2 ** 30), ("1k", 1000), ("500m", 0.5), ("1e3", 1000),
    ("1.5G", 1.5e9), ("-2", -2)])
def test_quantities_parse_as_apimachinery_reads_them(text, value):
    assert cel.parse_quantity(text) == value


@pytest.mark.parametrize("text", ["", "1 Gi", "Gi", "1GiB", "1.2.3"])
def test_strings_that_are_not_quantities_are_refused(text):
    with pytest.raises(ValueError):
        cel.parse_quantity(text)
