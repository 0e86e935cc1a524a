# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.nvidia maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""nvidia_container_toolkit_repo end to end on temp files, the repository and its key served as file:// URLs.

Only the package manager's index refresh (apt-get update) is replaced, and recorded; the key and the
repository's signed InRelease are read as the module reads them over HTTP. The lab test
tests/functional/test_toolkit_repo_rotation.py does the same against a real apt on a node.
"""

from __future__ import absolute_import, division, print_function

import grp
import json
import os
import pwd
import shutil

import pytest
from ansible.module_utils.testing import patch_module_args

from ansible_collections.kubegpu.nvidia.plugins.modules import nvidia_container_toolkit_repo as mod

FIXTURES = os.path.join(os.path.dirname(__file__), "..", "module_utils", "fixtures", "openpgp")
SIGNER = "52915121E3C55E91DD48E385F726852B1D7BD31E"
ROTATED = "3C495121AD7F138EC332D53B99DCE03292D11331"
NVIDIA = "C95B321B61E88C1809C4F759DDCAE044F796ECB0"


@pytest.fixture(name="site")
def fixture_site(tmp_path, monkeypatch):
    """A mirror (file://) signed with the subkey signer's key, and where the node's files go."""
    mirror = tmp_path / "mirror"
    (mirror / "deb" / "amd64").mkdir(parents=True)
    shutil.copy(os.path.join(FIXTURES, "InRelease"), str(mirror / "deb" / "amd64" / "InRelease"))
    shutil.copy(os.path.join(FIXTURES, "subkey-signer.asc"), str(mirror / "gpgkey"))
    calls = []

    def run_command(self, argv, **kwargs):
        calls.append(list(argv))
        return 0, "Get:1 InRelease\nReading package lists...\n", ""

    monkeypatch.setattr(mod.AnsibleModule, "run_command", run_command)
    monkeypatch.setattr(mod.platform, "machine", lambda: "x86_64")

    class Site:
        pass
    site = Site()
    site.mirror, site.calls, site.tmp = mirror, calls, tmp_path
    site.args = dict(
        family="Debian", url="file://%s/deb/$(ARCH)" % mirror, key_url="file://%s/gpgkey" % mirror,
        key_fingerprints=[SIGNER], key_path=str(tmp_path / "keyrings" / "toolkit.asc"),
        source_path=str(tmp_path / "sources" / "toolkit.list"),
        owner=pwd.getpwuid(os.getuid()).pw_name, group=grp.getgrgid(os.getgid()).gr_name)
    return site


def run(capsys, args, check=False, diff=False):
    args = dict(args, _ansible_check_mode=check, _ansible_diff=diff)
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            mod.main()
    return json.loads(capsys.readouterr().out)


def read(path):
    with open(path, "rb") as handle:
        return handle.read()


def test_check_mode_then_write_then_nothing_to_do(capsys, site):
    checked = run(capsys, site.args, check=True, diff=True)
    assert checked["changed"] is True and checked["key_changed"] and checked["source_changed"]
    assert checked["key_fingerprints"] == [SIGNER]
    assert not os.path.exists(site.args["key_path"]) and not os.path.exists(site.args["source_path"])
    assert site.calls == []  # check mode refreshes nothing
    assert "signed-by=%s" % site.args["key_path"] in checked["diff"][1]["after"]

    done = run(capsys, site.args)
    assert done["changed"] is True and done["refreshed"] is True and done["rotated"] is False
    assert read(site.args["key_path"]) == read(str(site.mirror / "gpgkey"))
    assert oct(os.stat(site.args["key_path"]).st_mode & 0o777) == "0o644"
    assert read(site.args["source_path"]).decode().endswith("deb [signed-by=%s] %s /\n" % (
        site.args["key_path"], site.args["url"]))
    # the installed key holds the key that signs the repository's InRelease
    assert done["signed_by"] and SIGNER[-16:] not in done["signed_by"]
    # the index of this one source is refreshed
    assert site.calls == [["apt-get", "update", "-o", "Dir::Etc::sourcelist=%s" % site.args["source_path"],
                           "-o", "Dir::Etc::sourceparts=-", "-o", "APT::Get::List-Cleanup=0"]]

    again = run(capsys, site.args)
    assert again["changed"] is False and again["refreshed"] is False and len(site.calls) == 1


def test_refresh_asked_for_runs_apt_even_when_nothing_changed(capsys, site):
    run(capsys, site.args)
    again = run(capsys, dict(site.args, refresh=True))
    assert again["changed"] is False and again["refreshed"] is True and len(site.calls) == 2


def test_a_downloaded_key_with_an_unknown_fingerprint_is_never_written(capsys, site):
    failed = run(capsys, dict(site.args, key_fingerprints=[NVIDIA]))
    assert failed["failed"] is True and failed["error_kind"] == "runtime"
    assert failed["msg"] == (
        "The NVIDIA Container Toolkit repository key cannot be trusted: the key at %s holds the key %s, which is not one "
        "of the trusted fingerprints %s (installed key: %s does not exist)"
        % (site.args["key_url"], SIGNER, NVIDIA, site.args["key_path"]))
    assert not os.path.exists(site.args["key_path"]) and not os.path.exists(site.args["source_path"])


def test_an_installed_key_that_is_no_longer_trusted_is_downloaded_again(capsys, site):
    os.makedirs(os.path.dirname(site.args["key_path"]))
    shutil.copy(os.path.join(FIXTURES, "rotated.asc"), site.args["key_path"])
    done = run(capsys, site.args, diff=True)
    assert done["key_changed"] is True and done["key_fingerprints"] == [SIGNER]
    assert done["diff"][0]["before"] == ROTATED + "\n" and done["diff"][0]["after"] == SIGNER + "\n"


def rotate(site):
    """The mirror re-signed with the rotated key, and serving that key."""
    shutil.copy(os.path.join(FIXTURES, "InRelease.rotated"), str(site.mirror / "deb" / "amd64" / "InRelease"))
    shutil.copy(os.path.join(FIXTURES, "rotated.asc"), str(site.mirror / "gpgkey"))


def test_a_rotated_key_that_passes_the_fingerprint_check_replaces_the_installed_one(capsys, site):
    run(capsys, site.args)
    rotate(site)
    trusted = dict(site.args, key_fingerprints=[SIGNER, ROTATED], refresh=True)
    checked = run(capsys, trusted, check=True)
    assert checked["rotated"] is True and checked["key_changed"] is True and checked["key_fingerprints"] == [ROTATED]
    assert read(site.args["key_path"]) == read(os.path.join(FIXTURES, "subkey-signer.asc"))  # check mode wrote nothing

    done = run(capsys, trusted)
    assert done["rotated"] is True and done["changed"] is True and done["refreshed"] is True
    assert read(site.args["key_path"]) == read(os.path.join(FIXTURES, "rotated.asc"))
    assert run(capsys, trusted)["rotated"] is False


def test_a_rotated_key_that_fails_the_fingerprint_check_stops_with_one_line(capsys, site):
    run(capsys, site.args)
    rotate(site)
    failed = run(capsys, dict(site.args, refresh=True))
    assert failed["failed"] is True
    assert failed["msg"].startswith("The repository %s is signed with key " % site.args["url"])
    assert ("which the installed key (%s) does not hold, and the new key cannot be trusted: the key at %s holds the key %s, "
            "which is not one of the trusted fingerprints %s" % (SIGNER, site.args["key_url"], ROTATED, SIGNER)) in failed["msg"]
    assert "\n" not in failed["msg"]
    assert read(site.args["key_path"]) == read(os.path.join(FIXTURES, "subkey-signer.asc"))
    assert len(site.calls) == 1  # apt-get update never ran against the re-signed repository


def test_a_key_url_that_still_serves_the_old_key_is_reported(capsys, site):
    run(capsys, site.args)
    shutil.copy(os.path.join(FIXTURES, "InRelease.rotated"), str(site.mirror / "deb" / "amd64" / "InRelease"))
    failed = run(capsys, dict(site.args, refresh=True))
    assert failed["msg"] == ("The repository %s is signed with key %s, which neither the installed key (%s) nor the key at "
                             "%s (%s) holds" % (site.args["url"], "/".join(sorted([ROTATED, ROTATED[-16:]])), SIGNER,
                                                site.args["key_url"], SIGNER))


def test_apt_failures_are_one_line(capsys, site, monkeypatch):
    def failing(self, argv, **kwargs):
        return 100, "Err:1 x InRelease\n", "E: The repository 'x' is not signed.\nN: Updating from such a repository ...\n"
    monkeypatch.setattr(mod.AnsibleModule, "run_command", failing)
    failed = run(capsys, site.args)
    assert failed["msg"] == ("refreshing the package index of %s failed (apt-get, rc 100): E: The repository 'x' is not "
                             "signed." % site.args["source_path"])


def test_a_key_url_that_cannot_be_read_is_named(capsys, site):
    failed = run(capsys, dict(site.args, key_url="file:///nonexistent/gpgkey"))
    assert failed["msg"] == "cannot read file:///nonexistent/gpgkey: no such file on the node"


def test_an_unsupported_family_and_a_bad_fingerprint_fail_before_anything_is_read(capsys, site):
    assert run(capsys, dict(site.args, family="Suse"))["msg"] == (
        "The NVIDIA Container Toolkit role supports the Debian and RedHat families, not Suse.")
    failed = run(capsys, dict(site.args, key_fingerprints=["F796ECB0"]))
    assert failed["error_kind"] == "input" and "'F796ECB0' is not a key fingerprint" in failed["msg"]
