"""Xids of the kernel log (plugins/module_utils/gpu_health_xid.py).

Xid lines as the NVIDIA kernel module logs them (NVIDIA's Xid catalog, docs.nvidia.com/deploy/xid-errors;
shared/REFERENCE.md 8.2): ``NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python3, GPU has fallen off the bus.``
(domain:bus:device of the GPU), behind a ``dmesg`` time or a journal prefix.
"""
import errno
import os
import time

import pytest

from ansible_collections.kubegpu.nvidia.plugins.module_utils import gpu_health_xid as gx


@pytest.mark.parametrize("line, expected", [
    ("[ 1234.567890] NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python3, GPU has fallen off the bus.",
     {"xid": 79, "pci": "0000:3b:00", "message": "pid=1234, name=python3, GPU has fallen off the bus."}),
    ("2026-11-27T00:10:00+0000 node1 kernel: NVRM: Xid (PCI:0000:B3:00): 48, pid=1, DBE (0x1) (0x0).",
     {"xid": 48, "pci": "0000:b3:00", "message": "pid=1, DBE (0x1) (0x0)."}),
    ("NVRM: Xid (0000:18:00): 63, Row Remapper: New row marked for remapping, reset gpu to activate.",
     {"xid": 63, "pci": "0000:18:00", "message": "Row Remapper: New row marked for remapping, reset gpu to activate."}),
    ("NVRM: Xid (PCI:0001:01:00.0): 94", {"xid": 94, "pci": "0001:01:00", "message": ""}),
])
def test_parse_xid_lines(line, expected):
    assert gx.parse_xids([line]) == [expected]


@pytest.mark.parametrize("line", [
    "NVRM: loading NVIDIA UNIX x86_64 Kernel Module  570.86.15",
    "NVRM: GPU at PCI:0000:3b:00: GPU-1234 has fallen off the bus.",
    "NVRM: Xid (PCI:zzzz:3b:00): 79, nope",
])
def test_other_lines_are_no_xid(line):
    assert gx.parse_xids([line]) == []


@pytest.mark.parametrize("nvml, xid_line, same", [
    ("00000000:3B:00.0", "0000:3b:00", True),
    ("00000001:3B:00.0", "0000:3b:00", False),
    ("00000000:3B:01.0", "0000:3b:00", False),
])
def test_bus_key_matches_nvml_and_xid_forms(nvml, xid_line, same):
    assert (gx.bus_key(nvml) == gx.bus_key(xid_line)) is same


@pytest.mark.parametrize("text, expected", [
    ("2026-11-27T01:00:00Z", 1795741200),
    ("2026-11-27 01:00", 1795741200),
    ("2026-11-27T02:00:00+01:00", 1795741200),
    ("2026-11-27T00:00:00-0100", 1795741200),
    ("2026-13-27T01:00:00Z", None),
    ("yesterday", None),
    ("2026-11-27T01:00:00Z trailing", None),
])
def test_parse_time(text, expected):
    assert gx.parse_time(text) == expected


def runner(rc, out, err, calls):
    def run(argv):
        calls.append(argv)
        return rc, out, err
    return run


def test_journal_since_boot_and_since_a_time():
    calls = []
    lines, problem = gx.read_journal(runner(0, b"a\nb\n", b"", calls), lambda name: "/bin/" + name, None)
    assert (lines, problem) == (["a", "b"], None)
    assert calls[0] == ["/bin/journalctl", "-k", "-o", "short-iso", "--no-pager", "-q", "-b"]
    gx.read_journal(runner(0, b"", b"", calls), lambda name: "/bin/" + name, 1795741200)
    assert calls[1][-2:] == ["--since", "@1795741200"]


@pytest.mark.parametrize("which, rc, err, problem", [
    (None, 0, b"", "journalctl is not installed (no systemd journal)"),
    ("/bin/journalctl", 1, b"Failed to get boot ID\n", "journalctl -k exited with 1: Failed to get boot ID"),
    ("/bin/journalctl", 0, b"No journal files were found.\n", "journalctl -k: No journal files were found."),
    ("/bin/journalctl", 0, b"Hint: You are currently not seeing messages from other users and the system.\n",
     "journalctl -k: Hint: You are currently not seeing messages from other users and the system."),
])
def test_journal_that_cannot_be_read(which, rc, err, problem):
    lines, got = gx.read_journal(runner(rc, b"", err, []), lambda name: which, None)
    assert (lines, got) == (None, problem)


def test_file_since_keeps_lines_without_a_time(tmp_path):
    path = tmp_path / "kern.log"
    path.write_text("2026-11-27T00:59:00+0000 n kernel: NVRM: Xid (PCI:0000:18:00): 48, old\n"
                    "2026-11-27T01:01:00+0000 n kernel: NVRM: Xid (PCI:0000:18:00): 79, new\n"
                    "NVRM: Xid (PCI:0000:18:00): 63, undated\n"
                    "[  100.000000] NVRM: Xid (PCI:0000:18:00): 94, at 100 s after boot\n")
    # booted at 1795741200 - 1000 s: the dmesg line at 100 s is before the time asked for
    lines, problem = gx.read_file(str(path), gx.parse_time("2026-11-27T01:00:00Z"), lambda: 1000.0 + _elapsed())
    assert problem is None
    assert [event["xid"] for event in gx.parse_xids(lines)] == [79, 63]


def _elapsed():
    return time.time() - 1795741200


def test_unreadable_file(tmp_path):
    lines, _source, problem = gx.read_kernel_log("file", path=str(tmp_path / "absent.log"))
    assert lines is None
    assert problem == "%s: No such file or directory" % (tmp_path / "absent.log")


def test_kmsg_records(tmp_path):
    """/dev/kmsg hands one record per read ("pri,seq,usec,flags;text"); a FIFO gives the same shape."""
    path = tmp_path / "kmsg"
    os.mkfifo(str(path))
    writer = os.open(str(path), os.O_RDWR | os.O_NONBLOCK)
    os.write(writer, b"6,1,5000000,-;NVRM: Xid (PCI:0000:18:00): 48, early\n")
    lines, problem = gx.read_kmsg(None, None, str(path))
    os.close(writer)
    assert problem is None
    assert gx.parse_xids(lines)[0]["xid"] == 48


def test_kmsg_permission_denied(tmp_path, monkeypatch):
    def denied(path, flags):
        raise OSError(errno.EPERM, "Operation not permitted")
    monkeypatch.setattr(gx.os, "open", denied)
    assert gx.read_kmsg(None, None) == (None, "/dev/kmsg: Operation not permitted")


def test_auto_falls_back_to_kmsg_and_names_both_causes(tmp_path):
    lines, source, problem = gx.read_kernel_log("auto", run_command=runner(0, b"", b"", []), which=lambda name: None,
                                                kmsg_path=str(tmp_path / "no-kmsg"))
    assert (lines, source) == (None, "auto")
    assert problem == "journalctl is not installed (no systemd journal); %s: No such file or directory" % (
        tmp_path / "no-kmsg")


def test_none_reads_nothing():
    assert gx.read_kernel_log("none") == ([], "none", None)
