"""Unit tests for the filter kubegpu.nvidia.container_image (plugins/filter/container_image.py)."""
import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.kubegpu.nvidia.plugins.filter.container_image import FilterModule, container_image

DIGEST = "sha256:" + "0123456789abcdef" * 4


def test_returns_the_reference_and_no_error():
    parts = {"registry": "nvcr.io", "repository": "nvidia/k8s-device-plugin", "tag": "v0.20.0", "digest": DIGEST}
    assert container_image(parts) == {"reference": "nvcr.io/nvidia/k8s-device-plugin:v0.20.0@" + DIGEST, "error": ""}
    assert container_image(dict(parts, tag="")) == {"reference": "nvcr.io/nvidia/k8s-device-plugin@" + DIGEST,
                                                    "error": ""}


def test_a_bad_part_gives_the_reason_instead_of_failing():
    result = container_image({"registry": "nvcr.io", "repository": "nvidia/x", "tag": "v1", "digest": "sha256:12"},
                             "k8s_device_plugin_image")
    assert result["reference"] == ""
    assert result["error"].startswith("k8s_device_plugin_image_digest 'sha256:12' is not a digest")


def test_missing_parts_count_as_empty():
    assert container_image({"repository": "nvidia/x"})["error"] == (
        "image_tag and image_digest are both empty: pin the image by a tag, a digest or both")


@pytest.mark.parametrize("value", [None, "nvcr.io/nvidia/x:v1", ["nvcr.io"]])
def test_input_must_be_a_dict(value):
    with pytest.raises(AnsibleFilterError, match="container_image expects a dict"):
        container_image(value)


def test_registered():
    assert FilterModule().filters()["container_image"] is container_image
