# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.nvidia maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""openpgp: fingerprints of key files and the issuers of signatures, checked against what gpg reports.

Fixtures (fixtures/openpgp/), all public data:
- nvidia-container-toolkit.asc: NVIDIA's repository signing key as https://nvidia.github.io/libnvidia-container/gpgkey
  serves it (SHA-256 c880576d...59c9, 3195 bytes); gpg shows it as C95B 321B 61E8 8C18 09C4 F759 DDCA E044 F796 ECB0
  with the signing subkey 2041 629B F535 2FAC 178A 9B1F 6ED9 1CA3 AC11 60CD.
- subkey-signer.asc/.gpg: a throwaway RSA key that certifies only, with an ed25519 signing subkey; InRelease is a
  clearsigned file and repomd.xml.asc a detached signature made with that subkey.
- rotated.asc: another throwaway ed25519 key; InRelease.rotated is signed with it.
"""

from __future__ import absolute_import, division, print_function

import hashlib
import os

import pytest

from ansible_collections.kubegpu.nvidia.plugins.module_utils import openpgp

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures", "openpgp")
NVIDIA = "C95B321B61E88C1809C4F759DDCAE044F796ECB0"
NVIDIA_SUBKEY = "2041629BF5352FAC178A9B1F6ED91CA3AC1160CD"
SIGNER = "52915121E3C55E91DD48E385F726852B1D7BD31E"
SIGNER_SUBKEY = "188DDF962709C1BC7B3F1E6A1070774A2DB00431"
ROTATED = "3C495121AD7F138EC332D53B99DCE03292D11331"


def fixture(name):
    with open(os.path.join(FIXTURES, name), "rb") as handle:
        return handle.read()


def test_nvidias_key_has_the_fingerprint_nvidia_publishes():
    data = fixture("nvidia-container-toolkit.asc")
    assert hashlib.sha256(data).hexdigest() == "c880576d6cf75a48e5027a871bac70fd0421ab07d2b55f30877b21f1c87959c9"
    [key] = openpgp.keys(data)
    assert key["fingerprint"] == NVIDIA
    assert key["key_id"] == "DDCAE044F796ECB0"  # apt: NO_PUBKEY DDCAE044F796ECB0
    assert key["user_ids"] == ["NVIDIA CORPORATION (Open Source Projects) <cudatools@nvidia.com>"]
    assert key["subkeys"] == [{"fingerprint": NVIDIA_SUBKEY, "key_id": "6ED91CA3AC1160CD"}]


def test_armored_and_binary_key_files_give_the_same_keys():
    armored = openpgp.keys(fixture("subkey-signer.asc"))
    assert armored == openpgp.keys(fixture("subkey-signer.gpg"))
    assert [k["fingerprint"] for k in armored] == [SIGNER]
    assert [s["fingerprint"] for s in armored[0]["subkeys"]] == [SIGNER_SUBKEY]
    # v4 ed25519 keys hash the same way
    assert [k["fingerprint"] for k in openpgp.keys(fixture("rotated.asc"))] == [ROTATED]


def test_a_file_with_two_keys_lists_both():
    both = fixture("nvidia-container-toolkit.asc") + b"\n" + fixture("rotated.asc")
    assert [k["fingerprint"] for k in openpgp.keys(both)] == [NVIDIA, ROTATED]


def test_the_issuer_of_a_clearsigned_and_a_detached_signature_is_the_signing_subkey():
    for name in ("InRelease", "repomd.xml.asc"):
        issuers = openpgp.signature_issuers(fixture(name))
        assert SIGNER_SUBKEY in issuers and SIGNER_SUBKEY[-16:] in issuers
        assert openpgp.holds_issuer(openpgp.keys(fixture("subkey-signer.asc")), issuers)
        assert not openpgp.holds_issuer(openpgp.keys(fixture("rotated.asc")), issuers)


def test_a_repository_signed_with_a_rotated_key_is_not_verified_by_the_old_key():
    issuers = openpgp.signature_issuers(fixture("InRelease.rotated").decode())
    assert ROTATED in issuers
    assert not openpgp.holds_issuer(openpgp.keys(fixture("subkey-signer.asc")), issuers)
    assert openpgp.holds_issuer(openpgp.keys(fixture("rotated.asc")), issuers)


@pytest.mark.parametrize("value", ["C95B 321B 61E8 8C18 09C4  F759 DDCA E044 F796 ECB0",
                                   "c95b321b61e88c1809c4f759ddcae044f796ecb0"])
def test_fingerprints_are_compared_without_spaces_or_case(value):
    assert openpgp.normalize_fingerprint(value) == NVIDIA


@pytest.mark.parametrize("data, message", [
    (b"", "no PGP public key block found"),
    (b"<html>404 Not Found</html>", "no PGP public key block found"),
    (b"-----BEGIN PGP PUBLIC KEY BLOCK-----\n\n!!!notbase64\n-----END PGP PUBLIC KEY BLOCK-----\n", "not valid base64"),
    (b"-----BEGIN PGP PUBLIC KEY BLOCK-----\n\nAAAA\n-----END PGP PUBLIC KEY BLOCK-----\n", "not the start of an OpenPGP packet"),
    (b"\xcd\x01a", "no public key in the key file"),
    (b"\x99\x00", "cut short"),
])
def test_data_that_is_not_a_key_fails_with_one_line(data, message):
    with pytest.raises(openpgp.OpenPGPError) as caught:
        openpgp.keys(data)
    assert message in str(caught.value) and "\n" not in str(caught.value)
    assert caught.value.kind == "input"


def test_a_text_without_a_signature_fails_clearly():
    with pytest.raises(openpgp.OpenPGPError, match="no PGP signature found"):
        openpgp.signature_issuers("Origin: x\n")
