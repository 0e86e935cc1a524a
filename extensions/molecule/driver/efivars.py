"""Write a fake EFI variable directory (efivarfs layout) for the `driver` scenario's Secure Boot paths.

    python3 extensions/molecule/driver/efivars.py OUT_DIR --secure-boot on [--enrolled CERT ...] [--pending]

OUT_DIR gets SecureBoot-8be4df61-... and SetupMode-8be4df61-... (4 attribute bytes, then one byte),
and, with --enrolled, shim's MokListRT-605dab50-... holding each certificate (PEM or DER) as an
EFI_SIGNATURE_LIST of type X.509, as shim exposes the enrolled Machine Owner Keys; --pending adds
MokNew (an import waiting for MOK Manager). The MOK list's bytes come from the collection's own
reader (plugins/module_utils/driver_state.py), the same code the driver role reads them with.
"""
import argparse
import importlib.util
import os
import shutil
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))
_SPEC = importlib.util.spec_from_file_location(
    "driver_state", os.path.join(ROOT, "plugins", "module_utils", "driver_state.py"))
driver_state = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(driver_state)
# the EFI global variable GUID of SecureBoot and SetupMode (module_utils/secure_boot.py reads them)
EFI_GLOBAL_GUID = "8be4df61-93ca-11d2-aa0d-00e098032b8c"


def write(out, secure_boot, setup_mode, enrolled, pending):
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)

    def var(name, guid, data):
        with open(os.path.join(out, "%s-%s" % (name, guid)), "wb") as handle:
            handle.write(data)

    var("SecureBoot", EFI_GLOBAL_GUID, b"\x06\x00\x00\x00" + (b"\x01" if secure_boot else b"\x00"))
    var("SetupMode", EFI_GLOBAL_GUID, b"\x06\x00\x00\x00" + (b"\x01" if setup_mode else b"\x00"))
    certificates = []
    for path in enrolled:
        with open(path, "rb") as handle:
            der = driver_state.certificate_der(handle.read())
        if der is None:
            sys.exit("efivars.py: %s is not a certificate" % path)
        certificates.append(der)
    var("MokListRT", driver_state.SHIM_GUID, driver_state.mok_list_variable(certificates))
    if pending:
        var("MokNew", driver_state.SHIM_GUID, b"\x07\x00\x00\x00" + driver_state.mok_list_variable(certificates)[4:])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("out")
    parser.add_argument("--secure-boot", choices=["on", "off"], default="on")
    parser.add_argument("--setup-mode", action="store_true")
    parser.add_argument("--enrolled", action="append", default=[], help="a certificate shim has enrolled")
    parser.add_argument("--pending", action="store_true", help="an import waits for MOK Manager")
    args = parser.parse_args()
    write(args.out, args.secure_boot == "on", args.setup_mode, args.enrolled, args.pending)


if __name__ == "__main__":
    main()
