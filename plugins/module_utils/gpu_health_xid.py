# -*- coding: utf-8 -*-
# Copyright (c) kubegpu.nvidia contributors
# GNU General Public License v3.0+ (see LICENSES/GPL-3.0-or-later.txt or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

"""The Xids of the kernel log, attributed to GPUs by PCI address.

The NVIDIA kernel module logs each Xid as ``NVRM: Xid (PCI:0000:3b:00): 79, pid=..., GPU has fallen off the bus.``
(domain:bus:device of the GPU, no function). Sources:

``journal``  ``journalctl -k`` (the kernel messages journald keeps; since boot, or ``--since`` a time);
``kmsg``     ``/dev/kmsg``, the kernel's ring buffer (what ``dmesg`` reads; since boot while the buffer holds them;
             readable by root or with CAP_SYSLOG, also in a container);
``file``     a file of kernel log lines (``dmesg`` or ``journalctl -o short-iso`` output);
``auto``     ``journal`` where journalctl is installed and answers, else ``kmsg``.

A log that cannot be read is not an error: ``read_kernel_log`` returns the reason, which the module turns into a
``degraded`` finding.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import calendar
import errno
import os
import re
import time

SOURCES = ("auto", "journal", "kmsg", "file", "none")

XID_LINE = re.compile(r"NVRM: Xid \((?:PCI:)?([0-9A-Fa-f]{4,8}):([0-9A-Fa-f]{2}):([0-9A-Fa-f]{2})(?:\.[0-7])?\): "
                      r"(\d+)\b,?\s*(.*)$")
_ISO = re.compile(r"^(\d{4})-(\d{2})-(\d{2})[T ](\d{2}):(\d{2})(?::(\d{2})(?:\.\d+)?)?\s*(Z|[+-]\d{2}:?\d{2})?")
_DMESG_TIME = re.compile(r"^\[\s*(\d+)\.(\d+)\]")


def parse_time(text):
    """Seconds since the epoch of an ISO 8601 time (``2026-11-27T01:00:00Z``; no zone: UTC), else None."""
    match = _ISO.match((text or "").strip())
    if not match or match.end() != len(text.strip()):
        return None
    return _iso_seconds(match)


def _iso_seconds(match):
    year, month, day, hour, minute = (int(match.group(i)) for i in range(1, 6))
    second = int(match.group(6) or 0)
    try:
        seconds = calendar.timegm((year, month, day, hour, minute, second, 0, 0, 0))
        time.gmtime(seconds)
    except (ValueError, OverflowError):
        return None
    if not (1 <= month <= 12 and 1 <= day <= 31 and hour < 24 and minute < 60 and second < 61):
        return None
    zone = match.group(7)
    if zone and zone != "Z":
        sign = -1 if zone[0] == "-" else 1
        digits = zone[1:].replace(":", "")
        seconds -= sign * (int(digits[:2]) * 3600 + int(digits[2:]) * 60)
    return seconds


def bus_key(bus_id):
    """(domain, bus, device) of a PCI address in NVML's (``00000000:3B:00.0``) or the Xid line's form."""
    match = re.match(r"^([0-9A-Fa-f]{1,8}):([0-9A-Fa-f]{1,2}):([0-9A-Fa-f]{1,2})", bus_id or "")
    if not match:
        return None
    return tuple(int(part, 16) for part in match.groups())


def parse_xids(lines):
    """The Xid events of kernel log lines: [{"xid", "pci", "message"}], in log order."""
    events = []
    for line in lines:
        match = XID_LINE.search(line)
        if not match:
            continue
        domain, bus, device, xid, rest = match.groups()
        events.append({
            "xid": int(xid),
            "pci": "%04x:%s:%s" % (int(domain, 16), bus.lower(), device.lower()),
            "message": rest.strip(),
        })
    return events


def _boot_time(uptime):
    return time.time() - uptime() if uptime else None


def read_uptime():
    """Seconds since boot (``/proc/uptime``), None when unreadable."""
    try:
        with open("/proc/uptime") as handle:
            return float(handle.read().split()[0])
    except (OSError, IOError, ValueError, IndexError):
        return None


def _first_line(data):
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else (data or "")
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[0] if lines else ""


def read_journal(run_command, which, since):
    """(lines, None) from ``journalctl -k``, or (None, reason)."""
    path = which("journalctl")
    if not path:
        return None, "journalctl is not installed (no systemd journal)"
    argv = [path, "-k", "-o", "short-iso", "--no-pager", "-q"]
    argv += ["--since", "@%d" % int(since)] if since is not None else ["-b"]
    try:
        rc, out, err = run_command(argv)
    except Exception as error:  # pylint: disable=broad-except  # a timeout of the bounded runner
        return None, "journalctl -k: %s" % error
    message = _first_line(err)
    if rc != 0:
        return None, "journalctl -k exited with %d: %s" % (rc, message or "no message")
    lowered = message.lower()
    if "insufficient permissions" in lowered or "no journal files were" in lowered or "not seeing messages" in lowered:
        return None, "journalctl -k: %s" % message
    text = out.decode("utf-8", "replace") if isinstance(out, bytes) else out
    return text.splitlines(), None


def read_kmsg(since, uptime, path="/dev/kmsg"):
    """(lines, None) from the kernel ring buffer, or (None, reason). Each record: ``pri,seq,usec,flags;text``."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as error:
        return None, "%s: %s" % (path, error.strerror or error)
    since_usec = None
    if since is not None:
        boot = _boot_time(uptime)
        since_usec = (since - boot) * 1e6 if boot is not None else None
    lines = []
    try:
        while True:
            try:
                record = os.read(fd, 8192)
            except OSError as error:
                if error.errno == errno.EPIPE:  # the record was overwritten while reading: go on with the next
                    continue
                if error.errno == errno.EAGAIN:
                    break
                return None, "%s: %s" % (path, error.strerror or error)
            if not record:
                break
            header, _sep, text = record.decode("utf-8", "replace").partition(";")
            fields = header.split(",")
            if since_usec is not None and len(fields) > 2 and fields[2].isdigit() and int(fields[2]) < since_usec:
                continue
            lines.append(text.splitlines()[0] if text else "")
    finally:
        os.close(fd)
    return lines, None


def read_file(path, since, uptime):
    """(lines, None) from a file of kernel log lines, or (None, reason); ``since`` applies to lines with a time."""
    try:
        with open(path, "rb") as handle:
            text = handle.read().decode("utf-8", "replace")
    except (OSError, IOError) as error:
        return None, "%s: %s" % (path, error.strerror or error)
    lines = text.splitlines()
    if since is None:
        return lines, None
    boot = None
    kept = []
    for line in lines:
        stamp = _ISO.match(line)
        if stamp:
            seconds = _iso_seconds(stamp)
        else:
            relative = _DMESG_TIME.match(line)
            if relative and boot is None:
                boot = _boot_time(uptime)
            seconds = boot + float("%s.%s" % relative.groups()) if relative and boot is not None else None
        if seconds is None or seconds >= since:
            kept.append(line)
    return kept, None


def read_kernel_log(source, path=None, since=None, run_command=None, which=None, uptime=read_uptime,
                    kmsg_path="/dev/kmsg"):
    """Return ``(lines, source used, problem)``; ``lines`` None and ``problem`` the reason when unreadable."""
    if source == "none":
        return [], "none", None
    if source == "file":
        lines, problem = read_file(path, since, uptime)
        return lines, "file", problem
    if source == "journal":
        lines, problem = read_journal(run_command, which, since)
        return lines, "journal", problem
    if source == "kmsg":
        lines, problem = read_kmsg(since, uptime, kmsg_path)
        return lines, "kmsg", problem
    lines, journal_problem = read_journal(run_command, which, since)
    if lines is not None:
        return lines, "journal", None
    lines, kmsg_problem = read_kmsg(since, uptime, kmsg_path)
    if lines is not None:
        return lines, "kmsg", None
    return None, "auto", "%s; %s" % (journal_problem, kmsg_problem)
