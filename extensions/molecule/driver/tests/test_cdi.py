"""Once a new driver is loaded, the role generates the CDI specifications that exist again (nvidia-ctk cdi
generate), so that containers get the new driver's files; a specification that does not exist is not made.

A container never loads the module, so the role's task file (tasks/cdi.yml) runs by itself here (cdi.yml),
with a stand-in nvidia-ctk that writes the driver version installed on the node.
"""
import os

import testinfra.utils.ansible_runner

testinfra_hosts = testinfra.utils.ansible_runner.AnsibleRunner(
    os.environ["MOLECULE_INVENTORY_FILE"]).get_hosts("driver-pascal")

NVIDIA_CTK = r"""#!/bin/sh
# stand-in for nvidia-ctk cdi generate --output=FILE
for arg in "$@"; do
    case "$arg" in --output=*) out=${arg#--output=} ;; esac
done
echo "cdiVersion: 0.5.0 # driver $(dpkg-query -W -f='${Version}' nvidia-driver)" > "$out"
"""


def test_existing_cdi_specifications_are_generated_again(host, run_role):
    host.run_test("cat > /usr/bin/nvidia-ctk <<'EOF'\n%sEOF\nchmod 755 /usr/bin/nvidia-ctk" % NVIDIA_CTK)
    host.run_test("mkdir -p /etc/cdi && echo 'cdiVersion: 0.5.0 # driver 525.147.05' > /etc/cdi/nvidia.yaml")
    try:
        run = run_role("driver-pascal", playbook="cdi.yml")
        assert run.rc == 0, run.failures("driver-pascal")
        generated = run.result("driver-pascal", "Generate the CDI specifications for the new driver")
        assert generated["changed"] is True
        assert [item["item"]["item"] for item in generated["results"]] == ["/etc/cdi/nvidia.yaml"]
        assert host.file("/etc/cdi/nvidia.yaml").content_string == "cdiVersion: 0.5.0 # driver 535.183.01-1~standin1\n"
        assert not host.file("/var/run/cdi/nvidia.yaml").exists
    finally:
        host.run_test("rm -f /usr/bin/nvidia-ctk /etc/cdi/nvidia.yaml")
