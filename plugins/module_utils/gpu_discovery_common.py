# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""Pieces shared by the GPU discovery sources (NVML, nvidia-smi, PCI sysfs) and the Secure Boot probe.

- ``SourceUnavailable``: why a source cannot be used (and whether it ran out of time);
- ``TextDecoder``: bytes from a driver or a command as text, with a warning for bytes that are not UTF-8;
- ``run_bounded``: run a command with a time limit, killing its whole process group when it runs out;
- ``device_facts``: one entry of ``nvidia_gpu.devices``.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import signal
import subprocess

from ansible_collections.kubegpu.nvidia.plugins.module_utils.gfd_labels import (
    gpu_family,
    sanitise_label_value,
)


class SourceUnavailable(Exception):
    """A discovery source cannot be used here; the message names the cause.

    ``expected`` is True when the cause is simply that the software is not
    installed (no library, no command): nothing worth a warning on a machine
    without GPUs. ``timed_out`` is True when the source ran out of time.
    """

    def __init__(self, message, expected=False, timed_out=False):
        super(SourceUnavailable, self).__init__(message)
        self.expected = expected
        self.timed_out = timed_out


class CommandTimeout(Exception):
    """A command did not finish within its time limit (it was killed)."""

    def __init__(self, argv, timeout):
        super(CommandTimeout, self).__init__("%s did not finish within %s s" % (os.path.basename(argv[0]), timeout))
        self.argv = argv
        self.timeout = timeout


def run_bounded(argv, timeout, environ_update=None):
    """Run ``argv`` (no shell) and return ``(rc, stdout bytes, stderr bytes)``.

    The command runs in a session of its own; when it has not finished after ``timeout`` seconds its
    whole process group is killed (children that a wrapper script started included) and
    ``CommandTimeout`` is raised. A command that cannot be started gives rc 127 and the reason on stderr.
    """
    env = dict(os.environ)
    env.update(environ_update or {})
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                env=env, close_fds=True, start_new_session=True)
    except OSError as error:
        return 127, b"", ("cannot run %s: %s" % (argv[0], error.strerror or error)).encode("utf-8")
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        try:
            proc.communicate(timeout=2)
        except subprocess.TimeoutExpired:
            # something outside the group holds the pipes open: stop reading them
            for stream in (proc.stdout, proc.stderr):
                stream.close()
        raise CommandTimeout(argv, timeout)
    return proc.returncode, out, err


def _kill_group(proc):
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        try:
            proc.kill()
        except OSError:
            pass


def readable(value):
    """``value`` (bytes) as text with every byte that is not UTF-8 written as ``\\xHH``: for messages."""
    return value.decode("utf-8", "backslashreplace")


def _invalid_lines(value):
    """The lines of ``value`` (bytes) that are not UTF-8, readable and joined on one line."""
    lines = []
    for line in value.strip(b"\x00").splitlines():
        try:
            line.decode("utf-8")
        except UnicodeDecodeError:
            lines.append(readable(line).strip())
    return " | ".join(lines)


class TextDecoder:
    """Decode the strings of one discovery run; remember, as warnings, those that were not UTF-8.

    A string that is not valid UTF-8 is decoded with U+FFFD for each invalid byte, so that the facts stay
    text every consumer (and ansible-core's result encoding) accepts; the warning shows the raw bytes.
    """

    def __init__(self):
        self.warnings = []

    def decode(self, value, what):
        """``value`` (bytes, str or None) as stripped text; ``what`` names it in the warning ("NVML's name of GPU 0")."""
        if value is None:
            return None
        if isinstance(value, bytes):
            try:
                value = value.decode("utf-8")
            except UnicodeDecodeError:
                self.warnings.append("%s%s is not valid UTF-8 (%s); the facts show each invalid byte as U+FFFD"
                                     % (what[:1].upper(), what[1:], _invalid_lines(value)))
                value = value.decode("utf-8", "replace")
        return str(value).strip("\x00").strip()

    def call(self, what, function, *args):
        """Call a binding that returns a string, and decode it.

        nvidia-ml-py decodes the bytes it gets from the library itself and raises UnicodeDecodeError for
        bytes that are not UTF-8: the error carries the bytes, which are decoded here with replacement.
        """
        try:
            value = function(*args)
        except UnicodeDecodeError as error:
            value = error.object if isinstance(error.object, bytes) else bytes(error.object)
        return self.decode(value, what)


def text(value):
    """Return ``value`` as str (bytes decoded with replacement, no warning): older pynvml bindings return bytes."""
    return TextDecoder().decode(value, "a value")


def device_facts(index, name=None, uuid=None, memory_mib=None, pci_bus_id=None, pci_device_id=None,
                 compute_capability=None, mig_current=None, mig_pending=None, mig_devices=None, pci_class=None):
    """Return one entry of ``nvidia_gpu.devices``.

    ``mig_devices``: the MIG devices of a MIG-enabled GPU (``[]`` when MIG is disabled), None where
    the source cannot enumerate them (nvidia-smi, the PCI bus, bindings without the MIG calls).
    ``pci_class``: the PCI class as ``0x030200`` (None when unknown).
    """
    return {
        "index": index,
        "name": name or None,
        "product": sanitise_label_value(name) or None if name else None,
        "uuid": uuid or None,
        "memory_mib": memory_mib,
        "pci_bus_id": pci_bus_id or None,
        "pci_device_id": pci_device_id,
        "pci_class": pci_class,
        "compute_capability": compute_capability,
        "family": gpu_family(compute_capability),
        "mig": {"current": mig_current, "pending": mig_pending, "devices": mig_devices},
    }
