"""Unit tests for image references pinned by tag and/or digest (plugins/module_utils/container_image.py).

Valid and invalid names, tags and digests follow the cases of distribution/reference
``reference_test.go`` (TestReferenceParse) and the grammar of its ``regexp.go``.
"""
import pytest

from ansible_collections.kubegpu.nvidia.plugins.module_utils.container_image import image_reference
from ansible_collections.kubegpu.nvidia.plugins.module_utils.errors import InputError

DIGEST = "sha256:" + "f" * 64


@pytest.mark.parametrize("registry, repository, tag, digest, expected", [
    ("nvcr.io", "nvidia/k8s-device-plugin", "v0.20.0", "", "nvcr.io/nvidia/k8s-device-plugin:v0.20.0"),
    # pinned by digest only, and by tag and digest (reference_test.go "test:5000/repo@sha256:..." and
    # "test:5000/repo:tag@sha256:...")
    ("test:5000", "repo", "", DIGEST, "test:5000/repo@" + DIGEST),
    ("test:5000", "repo", "tag", DIGEST, "test:5000/repo:tag@" + DIGEST),
    ("nvcr.io", "nvidia/k8s-device-plugin", "v0.20.0", DIGEST, "nvcr.io/nvidia/k8s-device-plugin:v0.20.0@" + DIGEST),
    # registries: IPv4 with a port, punycode, a bracketed IPv6 address, localhost
    ("192.168.1.1:5000", "repo", "tag", "", "192.168.1.1:5000/repo:tag"),
    ("xn--7o8h.com", "myimage", "xn--7o8h.com", DIGEST, "xn--7o8h.com/myimage:xn--7o8h.com@" + DIGEST),
    ("[fe80::1]:5000", "repo", "tag", "", "[fe80::1]:5000/repo:tag"),
    ("localhost:5000", "mirror/nvidia/k8s-device-plugin", "v0.20.0", "",
     "localhost:5000/mirror/nvidia/k8s-device-plugin:v0.20.0"),
    # repository components with the separators the grammar allows ("test_com", "sub-dom1.foo.com/bar/baz/quux")
    ("", "test_com", "tag", "", "test_com:tag"),
    ("sub-dom1.foo.com", "bar/baz/quux", "some-long-tag", "", "sub-dom1.foo.com/bar/baz/quux:some-long-tag"),
    ("", "a__b/c---d/e.f", "t", "", "a__b/c---d/e.f:t"),
    # no registry: the repository may start with one
    ("", "localhost:5000/team/plugin", "v1", "", "localhost:5000/team/plugin:v1"),
    ("", "b.gcr.io/test.example.com/my-app", "test.example.com", "", "b.gcr.io/test.example.com/my-app:test.example.com"),
    # tags: uppercase is fine in a tag ("lowercase:Uppercase"), up to 128 characters
    ("", "lowercase", "Uppercase", "", "lowercase:Uppercase"),
    ("r.io", "x", "_" + "a" * 127, "", "r.io/x:_" + "a" * 127),
    # surrounding white space is dropped
    (" nvcr.io ", " nvidia/k8s-device-plugin ", " v0.20.0 ", "", "nvcr.io/nvidia/k8s-device-plugin:v0.20.0"),
])
def test_valid_references(registry, repository, tag, digest, expected):
    assert image_reference(registry, repository, tag, digest) == expected


@pytest.mark.parametrize("registry, repository, tag, digest, message", [
    ("https://nvcr.io", "nvidia/k8s-device-plugin", "v1", "",
     "img_registry 'https://nvcr.io' is a host with an optional port, without a scheme"),
    ("nvcr.io/", "nvidia/x", "v1", "", "img_registry 'nvcr.io/' is not a registry host[:port]"),
    ("-bad.io", "x", "v1", "", "img_registry '-bad.io' is not a registry host[:port]"),
    ("nvcr.io", "", "v1", "", "img_repository is empty"),
    # "Uppercase:tag", "test:5000/Uppercase/lowercase:tag": uppercase in the name
    ("test:5000", "Uppercase/lowercase", "tag", "",
     "img_repository 'Uppercase/lowercase' has the component 'Uppercase'"),
    # "aa/asdf$$^/aa"
    ("", "aa/asdf$$^/aa", "tag", "", "has the component 'asdf$$^'"),
    ("", "a//b", "tag", "", "has the component ''"),
    ("", "a-/b", "tag", "", "has the component 'a-'"),
    ("", "bad_host:99x/b", "tag", "", "starts with 'bad_host:99x', which is not a registry host[:port]"),
    # a tag or digest where the repository goes
    ("nvcr.io", "nvidia/k8s-device-plugin:v0.20.0", "", "", "carries a tag or digest: give the tag in img_tag"),
    ("nvcr.io", "nvidia/k8s-device-plugin@" + DIGEST, "", "", "carries a tag or digest"),
    # "domain/" + "a" * 256: too long
    ("domain", "a" * 256, "tag", "", "img_registry and img_repository together are 263 characters, more than 255"),
    # tags
    ("nvcr.io", "x", "v0.20.0@" + DIGEST, "", "img_tag 'v0.20.0@sha256:" + "f" * 64 + "' carries a digest: give it "
                                              "in img_digest"),
    ("nvcr.io", "x", ".hidden", "", "img_tag '.hidden' is not a tag"),
    ("nvcr.io", "x", "-x", "", "img_tag '-x' is not a tag"),
    ("nvcr.io", "x", "a" * 129, "", "is not a tag"),
    ("nvcr.io", "x", "v1 2", "", "is not a tag"),
    # digests: "repo@sha256:ffff...(34)" too short, "validname@invaliddigest:..." and sha512 unsupported
    ("nvcr.io", "repo", "", "sha256:" + "f" * 34, "img_digest 'sha256:" + "f" * 34 + "' is not a digest: sha256: "
                                                  "followed by 64 lowercase hex digits"),
    ("nvcr.io", "repo", "", "invaliddigest:" + "f" * 64, "is not a digest"),
    ("nvcr.io", "repo", "", "sha512:" + "f" * 128, "is not a digest"),
    ("nvcr.io", "repo", "", "sha256:" + "F" * 64, "is not a digest"),
    ("nvcr.io", "repo", "", "f" * 64, "is not a digest"),
    # ":justtag" / "@sha256:..." alone have no name; a name alone is not pinned
    ("nvcr.io", "repo", "", "", "img_tag and img_digest are both empty: pin the image by a tag, a digest or both"),
    ("nvcr.io", "repo", None, None, "are both empty"),
])
def test_invalid_references_name_the_variable(registry, repository, tag, digest, message):
    with pytest.raises(InputError) as err:
        image_reference(registry, repository, tag, digest, prefix="img")
    assert message in err.value.msg
    assert "\n" not in err.value.msg
    assert err.value.kind == "input"


@pytest.mark.parametrize("part", ["registry", "repository", "tag", "digest"])
def test_a_part_that_is_not_a_string_is_named(part):
    parts = {"registry": "nvcr.io", "repository": "nvidia/x", "tag": "v1", "digest": ""}
    parts[part] = 5
    with pytest.raises(InputError) as err:
        image_reference(prefix="img", **parts)
    assert err.value.msg == "img_%s must be a string, got int" % part
