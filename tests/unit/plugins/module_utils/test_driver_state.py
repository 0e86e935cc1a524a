"""Reading a node's driver state from fake trees: kernels, built modules, the loaded module, EFI variables."""
import os
import struct
import subprocess

import pytest

from ansible_collections.kubegpu.nvidia.plugins.module_utils import driver_state as ds


def touch(path, data=b""):
    os.makedirs(os.path.dirname(str(path)), exist_ok=True)
    with open(str(path), "wb") as handle:
        handle.write(data)


# ------------------------------------------------------------------ kernels
def test_next_kernel_follows_debians_symlink(tmp_path):
    boot = tmp_path / "boot"
    for kernel in ("6.1.0-28-amd64", "6.1.0-31-amd64", "6.1.0-101-amd64"):
        touch(boot / ("vmlinuz-" + kernel))
    touch(boot / "vmlinuz-6.1.0-9-amd64.old")
    assert ds.installed_kernels(str(boot)) == ["6.1.0-28-amd64", "6.1.0-31-amd64", "6.1.0-101-amd64"]
    # no symlink: the newest (natural order: 101 > 31)
    assert ds.next_kernel("6.1.0-28-amd64", str(boot), str(tmp_path)) == (
        "6.1.0-101-amd64", "the newest kernel in %s" % boot)
    # Debian keeps /vmlinuz, Ubuntu /boot/vmlinuz on the kernel that boots by default
    os.symlink("boot/vmlinuz-6.1.0-31-amd64", str(tmp_path / "vmlinuz"))
    assert ds.next_kernel("6.1.0-28-amd64", str(boot), str(tmp_path))[0] == "6.1.0-31-amd64"
    os.symlink("vmlinuz-6.1.0-28-amd64", str(boot / "vmlinuz"))
    assert ds.next_kernel("6.1.0-28-amd64", str(boot), str(tmp_path)) == (
        "6.1.0-28-amd64", "the %s symlink" % (boot / "vmlinuz"))


def test_next_kernel_from_grubby_and_without_any(tmp_path):
    assert ds.next_kernel("5.14.0-503.el9.x86_64", str(tmp_path), str(tmp_path),
                          grubby_default="/boot/vmlinuz-5.14.0-570.el9.x86_64\n") == (
        "5.14.0-570.el9.x86_64", "grubby --default-kernel")
    assert ds.next_kernel("6.18.4", str(tmp_path / "none"), str(tmp_path)) == (
        "6.18.4", "the running kernel (no other kernel installed)")


# ------------------------------------------------------------------ modules
DKMS3 = ("nvidia-current/535.183.01, 6.1.0-28-amd64, x86_64: installed\n"
         "nvidia-current/535.183.01, 6.1.0-31-amd64, x86_64: built\n"
         "virtualbox/7.0.10, 6.1.0-28-amd64, x86_64: installed\n"
         "nvidia-current/535.216.01: added\n")
DKMS2 = "nvidia, 470.223.02, 5.4.0-150-generic, x86_64: installed (WARNING! Diff between built and installed module!)\n"


def test_dkms_status_both_formats():
    assert ds.parse_dkms_status(DKMS3) == {
        "6.1.0-28-amd64": [{"name": "nvidia-current", "version": "535.183.01", "state": "installed"}],
        "6.1.0-31-amd64": [{"name": "nvidia-current", "version": "535.183.01", "state": "built"}]}
    assert ds.parse_dkms_status(DKMS2)["5.4.0-150-generic"][0]["version"] == "470.223.02"


def test_kernel_module_from_dkms_and_from_files(tmp_path):
    modules = tmp_path / "modules"
    touch(modules / "6.1.0-31-amd64" / "kernel" / "drivers" / "net" / "e1000.ko")
    dkms = ds.parse_dkms_status(DKMS3)
    assert ds.kernel_module("6.1.0-28-amd64", dkms, str(modules))["built"] is True
    assert ds.kernel_module("6.1.0-28-amd64", dkms, str(modules))["version"] == "535.183.01"
    # only built, not installed: no module for that kernel
    assert ds.kernel_module("6.1.0-31-amd64", dkms, str(modules))["built"] is False
    # Ubuntu's precompiled modules: files, no DKMS
    touch(modules / "6.8.0-49-generic" / "kernel" / "nvidia-570srv" / "nvidia.ko.zst")
    touch(modules / "6.8.0-49-generic" / "kernel" / "nvidia-570srv" / "nvidia-uvm.ko.zst")
    found = ds.kernel_module("6.8.0-49-generic", None, str(modules))
    assert found["built"] is True and found["version"] is None
    assert [os.path.basename(path) for path in found["files"]] == ["nvidia.ko.zst"]
    # the build/ symlink to the headers is not followed
    os.symlink(str(modules / "6.8.0-49-generic"), str(modules / "6.1.0-31-amd64" / "build"))
    assert ds.kernel_module("6.1.0-31-amd64", None, str(modules))["built"] is False


# ------------------------------------------------------------------ loaded module
@pytest.mark.parametrize("line,version,flavour", [
    ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  570.86.15  Release Build  (dvs-builder@U16)",
     "570.86.15", "open"),
    ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.183.01  Sun May 12 19:39:15 UTC 2024", "535.183.01",
     "proprietary"),
])
def test_loaded_module(tmp_path, line, version, flavour):
    touch(tmp_path / "version", (line + "\nGCC version:  gcc version 12.2.0\n").encode())
    touch(tmp_path / "modules", b"nvidia_uvm 1519616 0 - Live 0x0\nnvidia 60936192 1 nvidia_uvm, Live 0x0\n"
                                b"nvidiafb 1 0 - Live 0x0\next4 1 1 - Live 0x0\n")
    assert ds.loaded_module(str(tmp_path / "version"), str(tmp_path / "modules")) == {
        "version": version, "flavour": flavour, "modules": ["nvidia_uvm", "nvidia"]}


def test_no_loaded_module(tmp_path):
    assert ds.loaded_module(str(tmp_path / "none"), str(tmp_path / "none")) == {
        "version": None, "flavour": None, "modules": []}


# ------------------------------------------------------------------ Secure Boot and MOK
def efivar(directory, name, guid, value):
    touch(directory / ("%s-%s" % (name, guid)), value)


@pytest.fixture(scope="module")
def certificates(tmp_path_factory):
    """Two self-signed certificates (PEM and DER) made with openssl."""
    directory = tmp_path_factory.mktemp("mok")
    made = []
    for name in ("ours", "other"):
        subprocess.run(["openssl", "req", "-new", "-x509", "-nodes", "-days", "1", "-subj", "/CN=%s" % name,
                        "-newkey", "rsa:2048", "-keyout", str(directory / (name + ".key")),
                        "-out", str(directory / (name + ".pem"))], check=True, capture_output=True)
        subprocess.run(["openssl", "x509", "-in", str(directory / (name + ".pem")), "-outform", "DER",
                        "-out", str(directory / (name + ".der"))], check=True, capture_output=True)
        made.append(directory / name)
    return made


def test_certificate_der_from_pem_and_der(certificates):
    ours = certificates[0]
    der = (ours.parent / "ours.der").read_bytes()
    assert ds.certificate_der((ours.parent / "ours.pem").read_bytes()) == der
    assert ds.certificate_der(der) == der
    assert ds.certificate_der(b"not a certificate") is None


def test_mok_enrolled_not_enrolled_pending_and_no_shim(tmp_path, certificates):
    ours, other = certificates
    cert_pem = str(ours.parent / "ours.pem")
    efivars = tmp_path / "efivars"
    other_der = (other.parent / "other.der").read_bytes()
    our_der = (ours.parent / "ours.der").read_bytes()
    # no shim variables: cannot tell
    os.makedirs(str(efivars))
    assert ds.mok_state(cert_pem, str(efivars)) == {
        "certificate": cert_pem, "readable": True, "format": "pem", "enrolled": None, "pending": False}
    # another certificate enrolled
    efivar(efivars, "MokListRT", ds.SHIM_GUID, ds.mok_list_variable([other_der]))
    assert ds.mok_state(cert_pem, str(efivars))["enrolled"] is False
    # ours enrolled, in a second list part (shim splits a long list into MokListRT1, ...)
    efivar(efivars, "MokListRT1", ds.SHIM_GUID, ds.mok_list_variable([our_der]))
    assert ds.enrolled_certificates(str(efivars)) == [other_der, our_der]
    assert ds.mok_state(str(ours.parent / "ours.der"), str(efivars))["enrolled"] is True
    # an import waiting for MOK Manager
    efivar(efivars, "MokNew", ds.SHIM_GUID, b"\x07\x00\x00\x00" + ds.mok_list_variable([our_der])[4:])
    assert ds.mok_state(cert_pem, str(efivars))["pending"] is True
    # no certificate on the node
    assert ds.mok_state(str(tmp_path / "missing.pub"), str(efivars))["readable"] is False


def test_signature_lists_skip_other_types_and_stop_at_garbage():
    sha256_type = b"\x26\x16\xc4\xc1\x4c\x50\x92\x40\xac\xa9\x41\xf9\x36\x93\x43\x28"  # EFI_CERT_SHA256_GUID
    hash_list = sha256_type + struct.pack("<III", 28 + 48, 0, 48) + b"\x00" * 16 + b"\x11" * 32
    x509 = ds.mok_list_variable([b"\x30\x03\x02\x01\x01"])[4:]
    assert ds.signature_list_certificates(hash_list + x509) == [b"\x30\x03\x02\x01\x01"]
    assert ds.signature_list_certificates(x509 + b"\xff" * 10) == [b"\x30\x03\x02\x01\x01"]
    assert ds.signature_list_certificates(b"\x00" * 16 + struct.pack("<III", 5000, 0, 100)) == []
