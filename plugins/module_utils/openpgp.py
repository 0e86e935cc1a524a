# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.nvidia maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Just enough OpenPGP (RFC 4880, RFC 9580) to check a repository signing key without gpg.

``keys(data)`` lists the public keys in an armored or binary key file with their fingerprints and
the key IDs of their subkeys; ``signature_issuers(text)`` lists the key IDs and fingerprints that
signed a clearsigned file (apt's ``InRelease``) or a detached signature (``repomd.xml.asc``). No
signature is verified here: apt and dnf do that. What this answers is whether a key file holds the
key a repository is signed with (apt fails with ``NO_PUBKEY`` when it does not) and whether a
downloaded key is one of the keys a user trusts (its fingerprint).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import base64
import binascii
import hashlib
import re
import struct

from ansible_collections.kubegpu.nvidia.plugins.module_utils.errors import InputError

TAG_SIGNATURE = 2
TAG_PUBLIC_KEY = 6
TAG_USER_ID = 13
TAG_PUBLIC_SUBKEY = 14

SUBPACKET_ISSUER = 16
SUBPACKET_ISSUER_FINGERPRINT = 33

_ARMOR = re.compile(r"-----BEGIN PGP ([A-Z ,0-9/]+)-----\r?\n(.*?)-----END PGP \1-----", re.S)


class OpenPGPError(InputError):
    """Data that is not the OpenPGP it should be (a key file, a signature)."""


def normalize_fingerprint(value):
    """Upper-case hex without spaces (``C95B 321B ...`` and ``c95b321b...`` are the same fingerprint)."""
    return re.sub(r"\s+", "", str(value)).upper()


def dearmor(data, kind="PUBLIC KEY BLOCK"):
    """The binary packets of every ``-----BEGIN PGP <kind>-----`` block of ``data`` (bytes or text).

    Binary input (its first byte has the packet-tag bit 0x80 set) is returned as it is.
    """
    if isinstance(data, bytes):
        if data[:1] and ord(data[:1]) & 0x80:
            return data
        data = data.decode("utf-8", "replace")
    out = b""
    found = False
    for match in _ARMOR.finditer(data):
        if match.group(1).strip() != kind:
            continue
        found = True
        # armor headers ("Version: ...", "Comment: ...") end at the first empty line
        lines = [line.strip() for line in match.group(2).splitlines()]
        if "" in lines and all(":" in line for line in lines[:lines.index("")]):
            lines = lines[lines.index("") + 1:]
        payload = "".join(line for line in lines if line and not line.startswith("="))
        try:
            out += base64.b64decode(payload.encode("ascii"), validate=True)
        except (binascii.Error, ValueError):
            raise OpenPGPError("the PGP %s is not valid base64" % kind.lower())
    if not found:
        raise OpenPGPError("no PGP %s found" % kind.lower())
    return out


def packets(data):
    """Yield (tag, body) of each packet of binary OpenPGP ``data`` (old and new packet formats)."""
    pos = 0
    size = len(data)
    while pos < size:
        first = ord(data[pos:pos + 1])
        pos += 1
        if not first & 0x80:
            raise OpenPGPError("byte %d is not the start of an OpenPGP packet" % (pos - 1))
        if first & 0x40:  # new format
            tag = first & 0x3F
            body = b""
            while True:
                length, pos, partial = _new_length(data, pos)
                body += data[pos:pos + length]
                pos += length
                if not partial:
                    break
        else:  # old format
            tag = (first >> 2) & 0x0F
            length_type = first & 0x03
            if length_type == 3:  # indeterminate: to the end
                length = size - pos
            else:
                width = (1, 2, 4)[length_type]
                if pos + width > size:
                    raise OpenPGPError("an OpenPGP packet header is cut short")
                length = int(binascii.hexlify(data[pos:pos + width]), 16)
                pos += width
            body = data[pos:pos + length]
            pos += length
        if pos > size:
            raise OpenPGPError("an OpenPGP packet is cut short")
        yield tag, body


def _new_length(data, pos):
    if pos >= len(data):
        raise OpenPGPError("an OpenPGP packet header is cut short")
    first = ord(data[pos:pos + 1])
    if first < 192:
        return first, pos + 1, False
    if first < 224:
        second = ord(data[pos + 1:pos + 2])
        return ((first - 192) << 8) + second + 192, pos + 2, False
    if first == 255:
        return struct.unpack(">I", data[pos + 1:pos + 5])[0], pos + 5, False
    return 1 << (first & 0x1F), pos + 1, True


def fingerprint(body):
    """Fingerprint (upper-case hex) of a public key or subkey packet body: v4 SHA-1, v5 and v6 SHA-256."""
    version = ord(body[:1]) if body else 0
    if version == 4:
        return hashlib.sha1(b"\x99" + struct.pack(">H", len(body)) + body).hexdigest().upper()
    if version == 5:
        return hashlib.sha256(b"\x9a" + struct.pack(">I", len(body)) + body).hexdigest().upper()
    if version == 6:
        return hashlib.sha256(b"\x9b" + struct.pack(">I", len(body)) + body).hexdigest().upper()
    raise OpenPGPError("OpenPGP key version %d is not supported (4, 5 and 6 are)" % version)


def key_id(fpr):
    """The 64-bit key ID (16 hex digits) of a fingerprint: its last 8 bytes for v4 (40 digits), else its first."""
    return fpr[-16:] if len(fpr) == 40 else fpr[:16]


def keys(data):
    """The public keys of a key file (armored or binary), each a dict:

    ``fingerprint``, ``key_id``, ``user_ids`` (list), ``subkeys`` (list of ``fingerprint``/``key_id`` dicts).
    """
    binary = dearmor(data)
    found = []
    for tag, body in packets(binary):
        if tag == TAG_PUBLIC_KEY:
            fpr = fingerprint(body)
            found.append({"fingerprint": fpr, "key_id": key_id(fpr), "user_ids": [], "subkeys": []})
        elif tag == TAG_PUBLIC_SUBKEY and found:
            fpr = fingerprint(body)
            found[-1]["subkeys"].append({"fingerprint": fpr, "key_id": key_id(fpr)})
        elif tag == TAG_USER_ID and found:
            found[-1]["user_ids"].append(body.decode("utf-8", "replace"))
    if not found:
        raise OpenPGPError("no public key in the key file")
    return found


def key_ids(found):
    """Every key ID and fingerprint (primary keys and subkeys) of ``keys()``'s result, as a set."""
    out = set()
    for key in found:
        for item in [key] + key["subkeys"]:
            out.add(item["key_id"])
            out.add(item["fingerprint"])
    return out


def _subpackets(data):
    pos = 0
    while pos < len(data):
        length, pos, _partial = _new_length(data, pos)
        if length == 0 or pos + length > len(data):
            raise OpenPGPError("a signature subpacket is cut short")
        kind = ord(data[pos:pos + 1]) & 0x7F
        yield kind, data[pos + 1:pos + length]
        pos += length


def _issuers(body):
    """Key IDs and fingerprints named as the issuer of one signature packet body."""
    version = ord(body[:1]) if body else 0
    out = set()
    if version == 3:
        out.add(binascii.hexlify(body[7:15]).decode("ascii").upper())
        return out
    if version not in (4, 5, 6):
        raise OpenPGPError("OpenPGP signature version %d is not supported" % version)
    count_width = 4 if version == 6 else 2
    pos = 4
    for _area in ("hashed", "unhashed"):
        length = int(binascii.hexlify(body[pos:pos + count_width]), 16)
        pos += count_width
        for kind, value in _subpackets(body[pos:pos + length]):
            if kind == SUBPACKET_ISSUER:
                out.add(binascii.hexlify(value).decode("ascii").upper())
            elif kind == SUBPACKET_ISSUER_FINGERPRINT and len(value) > 1:
                fpr = binascii.hexlify(value[1:]).decode("ascii").upper()
                out.add(fpr)
                out.add(key_id(fpr))
        pos += length
    return out


def signature_issuers(data):
    """Key IDs (and fingerprints where the signature names them) that made the signatures in ``data``.

    ``data``: a clearsigned text (apt's ``InRelease``), an armored detached signature (``Release.gpg``,
    ``repomd.xml.asc``) or binary signature packets.
    """
    binary = dearmor(data, "SIGNATURE")
    out = set()
    for tag, body in packets(binary):
        if tag == TAG_SIGNATURE:
            out |= _issuers(body)
    if not out:
        raise OpenPGPError("no signature found")
    return out


def holds_issuer(found, issuers):
    """Whether the keys ``found`` (``keys()``'s result) hold a key that made one of the signatures."""
    return bool(key_ids(found) & set(issuers))
