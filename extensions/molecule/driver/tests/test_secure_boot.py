"""Secure Boot on the Blackwell node, from a fake EFI variable directory (efivars.py): DKMS signs the module
with the MOK key given through variables; while the firmware has not enrolled its certificate, the role
does not reboot and says what to do."""
import base64
import hashlib
import os
import subprocess
import tempfile

import testinfra.utils.ansible_runner

testinfra_hosts = testinfra.utils.ansible_runner.AnsibleRunner(
    os.environ["MOLECULE_INVENTORY_FILE"]).get_hosts("driver-blackwell")

HERE = os.path.dirname(os.path.abspath(__file__))
MOK = os.path.join(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"], "mok")
EFIVARS = "/srv/kubegpu-efivars"
PENDING = "REBOOT PENDING on driver-blackwell"


def put_efivars(host, *args):
    """Write a fake EFI variable directory with efivars.py and put it on the node in place of the current one."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "efivars")
        subprocess.run(["python3", os.path.join(HERE, "..", "efivars.py"), out] + list(args), check=True)
        host.run_test("rm -rf %s && mkdir -p %s" % (EFIVARS, EFIVARS))
        for name in os.listdir(out):
            with open(os.path.join(out, name), "rb") as handle:
                data = base64.b64encode(handle.read()).decode()
            host.run_test("echo %s | base64 -d > %s/%s" % (data, EFIVARS, name))


def test_dkms_signs_the_module_with_the_mok_key(host):
    kernel = host.check_output("uname -r")
    module = host.file("/lib/modules/%s/updates/dkms/nvidia-current-open.ko" % kernel).content_string
    with open(os.path.join(MOK, "mok.pem"), "rb") as handle:
        assert "signed-by-certificate-sha256: %s" % hashlib.sha256(handle.read()).hexdigest() in module
    key = host.file("/var/lib/dkms/mok.key")
    assert key.mode == 0o600 and key.user == "root"
    assert "PRIVATE KEY" in host.check_output("cat /var/lib/dkms/mok.key")
    conf = host.file("/etc/dkms/framework.conf.d/kubegpu-mok.conf").content_string.splitlines()
    assert "mok_signing_key=/var/lib/dkms/mok.key" in conf and "mok_certificate=/var/lib/dkms/mok.pub" in conf


def test_enrolled_key_is_not_blocking(host, run_role):
    run = run_role("driver-blackwell")
    assert run.rc == 0, run.failures("driver-blackwell")
    summary = run.facts("driver-blackwell")["nvidia_driver_summary"]
    assert summary["secure_boot_blocking"] is False
    assert summary["text"] == "570.195.03, held, open, reboot pending"
    # only the container keeps the role from rebooting
    assert run.result("driver-blackwell", "Report the pending reboot")["msg"].endswith(
        "the role does not reboot because the node is a container (docker). Reboot the node to load it.")
    # the key never shows in the output
    assert "PRIVATE KEY" not in run.stdout


def test_a_key_not_enrolled_blocks_the_reboot(host, run_role):
    put_efivars(host, "--secure-boot", "on")      # shim's list without our certificate
    try:
        run = run_role("driver-blackwell")
        assert run.rc == 0, run.failures("driver-blackwell")
        summary = run.facts("driver-blackwell")["nvidia_driver_summary"]
        assert summary["secure_boot_blocking"] is True
        assert summary["text"] == "570.195.03, held, open, reboot pending, Secure Boot blocking"
        message = run.result("driver-blackwell", "Report the pending reboot")["msg"]
        assert message.startswith(PENDING)
        assert ("Secure Boot is on and the MOK certificate /var/lib/dkms/mok.pub that signs the module is not "
                "enrolled: run 'openssl x509 -in /var/lib/dkms/mok.pub -outform DER -out /var/lib/dkms/mok.der && "
                "mokutil --import /var/lib/dkms/mok.der' on the node, reboot it at its console and enroll the key in "
                "MOK Manager, then run the role again") in message
        assert "rebooting now would leave the node without a working driver" in message

        put_efivars(host, "--secure-boot", "on", "--pending")
        run = run_role("driver-blackwell")
        assert "waits for enrollment: confirm it in MOK Manager at the node's console during the next boot" in \
            run.result("driver-blackwell", "Report the pending reboot")["msg"]
    finally:
        put_efivars(host, "--secure-boot", "on", "--enrolled", os.path.join(MOK, "mok.pem"))


def test_secure_boot_off_needs_no_enrollment(host, run_role):
    put_efivars(host, "--secure-boot", "off")
    try:
        run = run_role("driver-blackwell")
        summary = run.facts("driver-blackwell")["nvidia_driver_summary"]
        assert summary["secure_boot_blocking"] is False
        assert "Secure Boot is off" in run.result(
            "driver-blackwell", "Check the GPUs and the options, and report what the role does")["msg"]
    finally:
        put_efivars(host, "--secure-boot", "on", "--enrolled", os.path.join(MOK, "mok.pem"))
