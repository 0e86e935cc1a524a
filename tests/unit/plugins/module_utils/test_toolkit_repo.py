# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.nvidia maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""toolkit_repo: the repository definitions the role writes, and when a key file is trusted."""

from __future__ import absolute_import, division, print_function

import configparser
import hashlib
import os

import pytest

from ansible_collections.kubegpu.nvidia.plugins.module_utils import toolkit_repo as repo
from ansible_collections.kubegpu.nvidia.plugins.module_utils.errors import InputError

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures", "openpgp")
NVIDIA = "C95B321B61E88C1809C4F759DDCAE044F796ECB0"


def fixture(name):
    with open(os.path.join(FIXTURES, name), "rb") as handle:
        return handle.read()


def test_the_rhel_repository_checks_package_and_metadata_signatures_with_the_key_file():
    text = repo.source_text("RedHat", "https://nvidia.github.io/libnvidia-container/stable/rpm/$basearch",
                            "/etc/pki/rpm-gpg/nvidia-container-toolkit.asc")
    parser = configparser.ConfigParser(interpolation=None)
    parser.read_string(text)
    section = dict(parser["nvidia-container-toolkit"])
    assert section == {
        "name": "NVIDIA Container Toolkit",
        "baseurl": "https://nvidia.github.io/libnvidia-container/stable/rpm/$basearch",
        "enabled": "1",
        # every package's signature (gpgcheck) and the repository metadata's (repo_gpgcheck) are checked ...
        "gpgcheck": "1",
        "repo_gpgcheck": "1",
        # ... with the key the role checked by fingerprint, never one dnf downloads itself
        "gpgkey": "file:///etc/pki/rpm-gpg/nvidia-container-toolkit.asc",
        "sslverify": "1",
    }
    assert text.startswith(repo.MARKER + "\n")
    no_tls = repo.source_text("RedHat", "http://mirror/rpm/$basearch", "/k.asc", validate_certs=False)
    assert "sslverify=0\n" in no_tls and "gpgcheck=1\n" in no_tls


def test_the_debian_source_is_signed_by_the_key_file_only():
    assert repo.source_text("Debian", "https://nvidia.github.io/libnvidia-container/stable/deb/$(ARCH)",
                            "/etc/apt/keyrings/nvidia-container-toolkit.asc") == (
        repo.MARKER + "\ndeb [signed-by=/etc/apt/keyrings/nvidia-container-toolkit.asc] "
        "https://nvidia.github.io/libnvidia-container/stable/deb/$(ARCH) /\n")


def test_only_the_debian_and_redhat_families_are_served():
    assert repo.family_defaults("Debian")["manager"] == "apt"
    assert repo.family_defaults("RedHat")["key_path"] == "/etc/pki/rpm-gpg/nvidia-container-toolkit.asc"
    with pytest.raises(InputError, match=r"supports the Debian and RedHat families, not Archlinux\.$"):
        repo.family_defaults("Archlinux")


def test_nvidias_published_key_passes_the_default_check():
    assert repo.NVIDIA_FINGERPRINTS == (NVIDIA,)
    assert repo.key_problem(fixture("nvidia-container-toolkit.asc"), list(repo.NVIDIA_FINGERPRINTS), "", "key") is None


def test_a_key_with_another_fingerprint_is_named_in_one_line():
    problem = repo.key_problem(fixture("rotated.asc"), [NVIDIA], "", "the key at https://mirror/gpgkey")
    assert problem == ("the key at https://mirror/gpgkey holds the key 3C495121AD7F138EC332D53B99DCE03292D11331, which is "
                       "not one of the trusted fingerprints %s" % NVIDIA)
    # one unknown key among known ones is refused as well
    both = fixture("nvidia-container-toolkit.asc") + fixture("rotated.asc")
    assert "3C495121AD7F138EC332D53B99DCE03292D11331" in repo.key_problem(both, [NVIDIA], "", "k")
    # no fingerprints: any key will do
    assert repo.key_problem(fixture("rotated.asc"), [], "", "k") is None


def test_the_checksum_is_checked_as_well_as_the_fingerprint():
    data = fixture("nvidia-container-toolkit.asc")
    good = "sha256:" + hashlib.sha256(data).hexdigest()
    assert repo.key_problem(data, [NVIDIA], good, "k") is None
    assert "has SHA-256 c880576d" in repo.key_problem(data, [NVIDIA], "sha256:" + "0" * 64, "k")
    with pytest.raises(InputError, match="must be sha256:<hex>"):
        repo.key_problem(data, [NVIDIA], "md5:abc", "k")


def test_a_file_that_is_not_a_key_is_not_trusted():
    assert "is not an OpenPGP public key" in repo.key_problem(b"<html>Not Found</html>", [NVIDIA], "", "k")


@pytest.mark.parametrize("value", ["C95B 321B 61E8 8C18 09C4  F759 DDCA E044 F796 ECB0", NVIDIA.lower()])
def test_fingerprints_may_be_written_as_gpg_prints_them(value):
    assert repo.allowed_fingerprints([value]) == [NVIDIA]


def test_a_short_key_id_is_not_a_fingerprint():
    with pytest.raises(InputError, match="'F796ECB0' is not a key fingerprint"):
        repo.allowed_fingerprints(["F796ECB0"])


def test_where_the_signed_metadata_and_apts_lists_are():
    url = "http://172.17.0.1:37949/stable/deb/$(ARCH)"
    assert repo.signature_url("Debian", url, "amd64") == "http://172.17.0.1:37949/stable/deb/amd64/InRelease"
    assert repo.signature_url("RedHat", "https://m/rpm/$basearch/", "x86_64") == "https://m/rpm/x86_64/repodata/repomd.xml.asc"
    # as apt names them on a lab node: 172.17.0.1:37949_stable_deb_amd64_Packages
    assert repo.apt_lists_prefix(url, "amd64") == "172.17.0.1:37949_stable_deb_amd64_"
    assert repo.apt_lists_prefix("https://user:pw@mirror.example/x/", "amd64") == "mirror.example_x_"


def test_the_cached_index_tells_which_versions_apt_can_install(tmp_path):
    (tmp_path / "172.17.0.1:80_deb_amd64_Packages").write_text(
        "Package: nvidia-container-toolkit\nVersion: 1.17.8-1\n\nPackage: nvidia-container-toolkit\nVersion: 1.20.0-1\n\n"
        "Package: libnvidia-container1\nVersion: 1.20.0-1\n")
    versions = repo.cached_versions("http://172.17.0.1:80/deb/$(ARCH)", "amd64", str(tmp_path))
    assert versions == {"nvidia-container-toolkit": {"1.17.8-1", "1.20.0-1"}, "libnvidia-container1": {"1.20.0-1"}}
    packages = ["nvidia-container-toolkit", "libnvidia-container1"]
    assert repo.available(versions, packages, "1.20.0-1")
    assert not repo.available(versions, packages, "1.17.8-1")
    assert repo.available(versions, packages, "")
    assert repo.cached_versions("http://other/deb/$(ARCH)", "amd64", str(tmp_path)) == {}
