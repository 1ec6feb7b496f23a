"""A QEMU cannot write a RAM file it maps private (vm backend). A clone maps
the template's RAM file (pool/templates/<name>/<ver>.vm/m*/mem), shared by
every clone of that template, and so does a fork child on a fork standby (the
parent's pages written into its RAM); a rollback to a full snapshot maps a
snapshot's .mem. For every QEMU of the instance (the clones, the
parked warm ones, a fork child, a restored one) that maps such a file at
/mem: every descriptor it holds on it is O_RDONLY (/proc/<pid>/fdinfo), and
from its uid and groups opening /mem for writing fails, through the jail's
mount (EROFS or EACCES) and through the template file's host path (EACCES).
The sandboxes still run, and a fork and a rollback still work. Skips (77)
without QEMU or the guest kernel."""
import errno
import glob
import os
import sys
import time

from harness import AIRLOCKD, AirlockTestCase, ApiError, cgroup_dirs, main

VM_DIR = os.path.normpath(os.path.join(os.path.dirname(AIRLOCKD), "..", "vm"))
QEMU = "/usr/bin/qemu-system-x86_64"


def qemu_pids(data_dir):
    """The QEMU processes in the instance's cgroups."""
    pids = set()
    for parent in cgroup_dirs(data_dir):
        for procs in glob.glob(os.path.join(parent, "*", "cgroup.procs")):
            try:
                with open(procs) as f:
                    for line in f:
                        pid = int(line)
                        if os.readlink(f"/proc/{pid}/exe").startswith(QEMU):
                            pids.add(pid)
            except OSError:
                pass
    return sorted(pids)


def ids_of(pid):
    """QEMU's uid, gid and supplementary groups (/proc/<pid>/status)."""
    uid = gid = None
    groups = []
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k == "Uid":
                uid = int(v.split()[0])
            elif k == "Gid":
                gid = int(v.split()[0])
            elif k == "Groups":
                groups = [int(g) for g in v.split()]
    return uid, gid, groups


def mem_fds(pid):
    """QEMU's descriptors on its RAM file (/mem in its jail): (fd, flags)."""
    got = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
            if target.split(" (deleted)")[0] != "/mem":
                continue
            with open(f"/proc/{pid}/fdinfo/{fd}") as f:
                flags = [l for l in f if l.startswith("flags:")][0]
            got.append((int(fd), int(flags.split()[1], 8)))
        except OSError:
            pass
    return got


def maps_mem(pid):
    with open(f"/proc/{pid}/maps") as f:
        return any(l.split()[-1] == "/mem" for l in f if len(l.split()) >= 6)


def open_for_write_as(pid, path):
    """errno of open(path, O_WRONLY) by a child with QEMU pid's uid, gid and
    groups (0 if it opened). path is opened O_PATH first, as root, so a path
    under /proc/<pid>/root (QEMU's own mounts) is reached; the child reopens
    it through /proc/self/fd with QEMU's credentials."""
    uid, gid, groups = ids_of(pid)
    pfd = os.open(path, os.O_PATH)
    try:
        child = os.fork()
        if child == 0:
            code = 0
            try:
                os.setgroups(groups)
                os.setgid(gid)
                os.setuid(uid)
                os.close(os.open(f"/proc/self/fd/{pfd}", os.O_WRONLY))
            except OSError as e:
                code = e.errno
            except BaseException:
                code = 255
            os._exit(code)
        _, status = os.waitpid(child, 0)
        return os.waitstatus_to_exitcode(status)
    finally:
        os.close(pfd)


class VmMemReadOnlyTest(AirlockTestCase):
    def sh(self, sid, script):
        code, out, err, _ = self.api.exec(sid, ["sh", "-c", script])
        self.assertEqual(code, 0, err)
        return out.decode()

    def tearDown(self):
        for sb in self.api.call("GET", "/v1/sandboxes")["sandboxes"]:
            try:
                self.api.delete(sb["id"])
            except ApiError:
                pass

    def template_mems(self):
        return glob.glob(os.path.join(self.server.dir, "pool", "templates", "*", "*.vm",
                                      "m*", "mem"))

    def check_qemus(self, want):
        """Every QEMU mapping a RAM file at /mem: only read-only fds on it,
        and no write open from its credentials. At least want of them."""
        checked = 0
        for pid in qemu_pids(self.server.dir):
            try:
                if not maps_mem(pid):
                    continue
                fds = mem_fds(pid)
                self.assertTrue(fds, f"qemu {pid} maps /mem but holds no fd on it")
                for fd, flags in fds:
                    self.assertEqual(flags & os.O_ACCMODE, os.O_RDONLY,
                                     f"qemu {pid} fd {fd} on /mem has flags {flags:o}")
                e = open_for_write_as(pid, f"/proc/{pid}/root/mem")
                self.assertIn(e, (errno.EROFS, errno.EACCES),
                              f"qemu {pid}'s uid opened /mem for writing (errno {e})")
                for m in self.template_mems():
                    self.assertEqual(open_for_write_as(pid, m), errno.EACCES,
                                     f"qemu {pid}'s uid opened {m} for writing")
                checked += 1
            except FileNotFoundError:
                continue  # a QEMU that went away meanwhile
        print(f"\n  {checked} QEMUs map a RAM file at /mem: read-only", file=sys.stderr)
        self.assertGreaterEqual(checked, want)

    def test_shared_ram_files_are_read_only_for_qemu(self):
        sid = self.api.create(template="busybox", backend="vm")["id"]
        self.assertEqual(self.sh(sid, "echo hi"), "hi\n")
        # The warm pool refills in the background: a second create takes a
        # parked, warmed QEMU once there is one.
        deadline = time.time() + 120
        while len(qemu_pids(self.server.dir)) < 2 and time.time() < deadline:
            time.sleep(0.5)
        sid2 = self.api.create(template="busybox", backend="vm")["id"]
        self.assertEqual(self.sh(sid2, "echo warm"), "warm\n")
        self.check_qemus(2)
        mems = self.template_mems()
        self.assertEqual(len(mems), 1, mems)
        st = os.stat(mems[0])
        self.assertEqual((st.st_uid, st.st_mode & 0o7777), (0, 0o640), oct(st.st_mode))
        # A fork child maps the template's RAM file (a fork standby), or a
        # snapshot's.
        self.sh(sid, "echo parent > /f")
        kids = self.api.call("POST", f"/v1/sandboxes/{sid}/fork", {"count": 1},
                             expect=(201,))["sandboxes"]
        self.assertEqual(self.sh(kids[0]["id"], "cat /f"), "parent\n")
        # A rollback to a full snapshot maps the snapshot's .mem.
        self.api.call("POST", f"/v1/sandboxes/{sid2}/snapshots",
                      {"kind": "full", "name": "m1"}, expect=(201,))
        self.sh(sid2, "echo after > /g")
        got = self.api.call("POST", f"/v1/sandboxes/{sid2}/rollback", {"snapshot": "m1"})
        self.assertEqual(got["state"], "running")
        self.assertEqual(self.sh(sid2, "cat /g 2>/dev/null; echo back"), "back\n")
        self.check_qemus(4)


if __name__ == "__main__":
    if not os.access(QEMU, os.X_OK) or not os.path.exists(os.path.join(VM_DIR, "vmlinuz")):
        print(f"skip: needs {QEMU} and {VM_DIR}/vmlinuz")
        sys.exit(77)
    main()
