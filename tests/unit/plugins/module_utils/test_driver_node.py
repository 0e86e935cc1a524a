"""driver_node: the options of the driver read (nvidia_driver_info's, nvidia_gpu_facts' driver_options) and when a
state read by the facts answers the read a role would make (state_for)."""
import pytest

from ansible_collections.kubegpu.nvidia.plugins.module_utils import driver_node
from ansible_collections.kubegpu.nvidia.plugins.module_utils.errors import InputError

READ_FILES = ["/etc/modprobe.d/kubegpu-nvidia.conf", "/etc/apt/apt.conf.d/51kubegpu-nvidia-driver"]
FACTS_OPTIONS = driver_node.check_params({"read_files": READ_FILES})
STATE = {"installed": {"nvidia-driver": "570.172.08-1"}, "loaded": None, "options": FACTS_OPTIONS}


def test_check_params_fills_the_defaults_of_nvidia_driver_info():
    assert driver_node.check_params({}) == {"packages": [], "available": [], "read_files": [],
                                            "mok_certificate": "/var/lib/dkms/mok.pub",
                                            "efivars_dir": "/sys/firmware/efi/efivars"}


@pytest.mark.parametrize("options, fragment", [
    ({"colour": "red"}, "colour"),
    ({"read_files": {"a": 1}}, "read_files"),
])
def test_check_params_refuses_bad_options_in_one_line(options, fragment):
    with pytest.raises(InputError) as caught:
        driver_node.check_params(options)
    message = str(caught.value)
    assert message.startswith("driver_options: ") and fragment in message and "\n" not in message


@pytest.mark.parametrize("state, options, answers", [
    # the driver role's read on Debian 12 (names of the driver stack, which every read reports)
    (STATE, {"packages": ["nvidia-driver", "nvidia-kernel-dkms", "firmware-nvidia-gsp"], "read_files": READ_FILES,
             "efivars_dir": "/sys/firmware/efi/efivars"}, True),
    # fewer files than the facts read
    (STATE, {"read_files": READ_FILES[:1]}, True),
    # a package that is not one of the stack's names and that the facts' read did not name
    (STATE, {"packages": ["linux-modules-nvidia-570-server-generic"], "read_files": READ_FILES}, False),
    (dict(STATE, options=dict(FACTS_OPTIONS, packages=["linux-modules-nvidia-570-server-generic"])),
     {"packages": ["linux-modules-nvidia-570-server-generic"]}, True),
    # a file the facts did not read, other EFI variables, another certificate, versions on offer
    (STATE, {"read_files": READ_FILES + ["/etc/other.conf"]}, False),
    (STATE, {"read_files": READ_FILES, "efivars_dir": "/tmp/efivars"}, False),
    (STATE, {"mok_certificate": "/root/mok.der"}, False),
    (STATE, {"available": ["nvidia-driver"]}, False),
    # no state, a state without its options (an older collection's), bad options
    (None, {}, False),
    ({"installed": {}}, {}, False),
    (STATE, {"colour": "red"}, False),
])
def test_state_for(state, options, answers):
    found = driver_node.state_for(state, options)
    if answers:
        assert found == dict((key, value) for key, value in state.items() if key != "options")
    else:
        assert found is None
