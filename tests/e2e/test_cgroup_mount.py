"""The host's cgroup2 mount options are left as found (cgroup_favordynmods).

nodemgr remounts the host's cgroup2 hierarchy with favordynmods while it
runs (task moves into a new cgroup cost an RCU grace period without it) and
must put the options back at a clean stop, also after a crash of nodemgr in
between: the options as found are recorded in its run dir before the
remount, and a restarted nodemgr keeps that record, not what it sees then.

The host's mount is read before the server starts. When it already has
favordynmods (the host's choice, or a run of another build), the test takes
it off for its run, so that putting back is observable, and restores the
options as it found them at the end whatever happens."""
import ctypes
import os
import sys
import unittest

from harness import AirlockTestCase, main

MS_REMOUNT = 32


def cgroup2():
    """(mount point, superblock options without rw/ro) of the first cgroup2
    mount; its own flags (nosuid, nodev, ...) are FLAGS' business."""
    mp, opts, _ = cgroup2_full()
    return mp, opts


def cgroup2_full():
    with open("/proc/self/mountinfo") as f:
        for line in f:
            pre, _, post = line.partition(" - ")
            fs = post.split()
            if len(fs) >= 3 and fs[0] == "cgroup2":
                opts = [o for o in fs[2].split(",") if o not in ("rw", "ro")]
                return pre.split()[4], ",".join(opts), pre.split()[5]
    return None, None, None


MS_FLAGS = {"ro": 1, "nosuid": 2, "nodev": 4, "noexec": 8, "noatime": 1024,
            "nodiratime": 2048, "relatime": 1 << 21, "strictatime": 1 << 24}


def remount(mp, opts):
    """A remount passes the mount's own flags again, or it clears them."""
    flags = sum(MS_FLAGS.get(o, 0) for o in cgroup2_full()[2].split(","))
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.mount(None, mp.encode(), None, MS_REMOUNT | flags, opts.encode()) != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"remount {mp} with `{opts}`: {os.strerror(e)}")


def without_favor(opts):
    return ",".join(o for o in opts.split(",") if o and o != "favordynmods")


MP, FOUND = cgroup2()
FLAGS = cgroup2_full()[2]   # the mount's own flags, which no remount may lose


@unittest.skipIf(os.geteuid() != 0 or MP is None, "needs root and a cgroup2 mount")
class CgroupMountTest(AirlockTestCase):
    @classmethod
    def setUpClass(cls):
        cls.before = without_favor(FOUND)
        if cls.before != FOUND:
            print(f"note: {MP} had favordynmods before the test; off for its run",
                  file=sys.stderr)
            remount(MP, cls.before)
        try:
            super().setUpClass()
        except Exception:
            remount(MP, FOUND)
            raise

    @classmethod
    def tearDownClass(cls):
        try:
            super().tearDownClass()
        finally:
            remount(MP, FOUND)

    def record(self):
        return os.path.join(self.server.dir, "run", "nodemgr", "cgroup2-options")

    def test_options_put_back_after_stop_and_crash(self):
        # running: favordynmods on
        self.assertEqual(cgroup2()[0], MP)
        self.assertIn("favordynmods", cgroup2()[1].split(","), self.server.log())

        # a clean stop: as found
        self.server.stop()
        self.assertEqual(cgroup2_full(), (MP, self.before, FLAGS), self.server.log())
        self.assertFalse(os.path.exists(self.record()))
        self.assertIn("options put back as found", self.server.log())

        # again, and what was found is recorded in the run dir
        self.server.start()
        self.assertIn("favordynmods", cgroup2()[1].split(","))
        with open(self.record()) as f:
            self.assertEqual(f.read(), f"{MP}\n{self.before}\n")

        # a crash of nodemgr: the restarted one keeps the record of the
        # host's options, not the favordynmods it finds on
        self.kill_and_wait_restarted("nodemgr")
        self.assertIn("favordynmods", cgroup2()[1].split(","))
        with open(self.record()) as f:
            self.assertEqual(f.read(), f"{MP}\n{self.before}\n")
        s = self.api.create(template="busybox")
        self.api.delete(s["id"])
        self.server.stop()
        self.assertEqual(cgroup2_full(), (MP, self.before, FLAGS), self.server.log())
        self.assertFalse(os.path.exists(self.record()))

        # with cgroup_favordynmods off, a start changes nothing
        self.server.extra_args += ["--set", "cgroup_favordynmods=false"]
        self.server.start()
        self.assertEqual(cgroup2_full(), (MP, self.before, FLAGS))
        self.assertFalse(os.path.exists(self.record()))

if __name__ == "__main__":
    main()
