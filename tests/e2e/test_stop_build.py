#!/usr/bin/env python3
"""A stop (SIGTERM) during a template build cancels the build: `airlockd up`
exits within seconds, the builder's processes are gone and the half-built
template subvolume with them (issue 20, 11b). Two builds: one requested over
the API that reads a tar from a FIFO nobody writes (busy and silent, so no
progress line to fail on), and the first-run build of `debian` that `up`
itself starts (mmdebstrap, which must clean up after itself)."""
import glob
import os
import subprocess
import tempfile
import threading
import time
import unittest

from harness import Server, stop_and_check, procs_for, main

STOP_WITHIN_S = 10


def cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def holds(pid, path):
    try:
        return any(os.readlink(f"/proc/{pid}/fd/{fd}") == path
                   for fd in os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return False


class StopDuringBuild(unittest.TestCase):
    server = None

    def setUp(self):
        # The node reads the source as its own user: the FIFO must be
        # reachable and readable by it.
        self.src = tempfile.mkdtemp(prefix="airlock-fifo-")
        os.chmod(self.src, 0o755)
        self.fifo = os.path.join(self.src, "rootfs.tar")
        os.mkfifo(self.fifo, 0o666)
        os.chmod(self.fifo, 0o666)

    def tearDown(self):
        try:
            # Unblocks a builder that outlived the stop, so that nothing
            # hangs on the FIFO after a failed run.
            fd = os.open(self.fifo, os.O_WRONLY | os.O_NONBLOCK)
            os.close(fd)
        except OSError:
            pass
        if self.server:
            self.server.cleanup()
        subprocess.run(["rm", "-rf", self.src])

    def builders(self):
        """Processes of this build: the script (its out dir is under the data
        dir) and whatever holds the FIFO open (the `cat` reading it)."""
        return {p for p in procs_for(self.server.dir) if "template-build" in cmdline(p)} | \
            {int(d) for d in os.listdir("/proc") if d.isdigit() and holds(int(d), self.fifo)}

    def stop_quickly(self):
        """SIGTERM `up`; it must be gone within STOP_WITHIN_S."""
        started = time.time()
        self.server.proc.send_signal(15)
        try:
            self.server.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.fail("airlockd up did not stop within 60 s of SIGTERM")
        took = time.time() - started
        self.assertLess(took, STOP_WITHIN_S,
                        f"stop during a build took {took:.1f} s:\n{self.server.log()}")

    def test_sigterm_during_the_first_run_build(self):
        tmp_before = set(glob.glob("/tmp/mmdebstrap.*"))
        self.server = Server("debian").start(until=b": mmdebstrap ")
        time.sleep(2)  # mmdebstrap is at work
        self.assertTrue(self.builders(), "the debian build is not running")
        self.stop_quickly()
        left = self.builders()
        self.assertFalse(left, f"builder processes left after stop: "
                               f"{[(p, cmdline(p)) for p in left]}")
        with open(self.server.log_path, "rb") as f:
            log = f.read()
        self.assertNotIn(b"airlock is up", log)
        if os.environ.get("AIRLOCK_E2E_VERBOSE"):
            print(log.decode(errors="replace")[-3000:])
        server, self.server = self.server, None
        stop_and_check(server)  # no process, mount, loop device or cgroup left
        left = set(glob.glob("/tmp/mmdebstrap.*")) - tmp_before
        self.assertFalse(left, f"mmdebstrap's temporary dirs left: {left}")

    def test_sigterm_cancels_a_silent_build(self):
        self.server = Server("busybox").start()
        self.api = self.server.client()
        events = []

        def build():
            try:
                for ev in self.api.stream("POST", "/v1/templates",
                                          {"name": "slow", "from_tar": self.fifo}):
                    events.append(ev)
            except Exception as e:  # the connection closes under it
                events.append({"event": "closed", "error": str(e)})

        t = threading.Thread(target=build, daemon=True)
        t.start()
        deadline = time.time() + 60
        while time.time() < deadline and not self.builders():
            time.sleep(0.1)
        self.assertTrue(self.builders(), "the build did not start")
        time.sleep(0.5)

        self.stop_quickly()
        t.join(10)
        left = self.builders()
        self.assertFalse(left, f"builder processes left after stop: "
                               f"{[(p, cmdline(p)) for p in left]}")
        self.assertFalse(any(e.get("event") == "done" for e in events), events)
        # The half-built template is gone from the pool. The pool is
        # unmounted by now, so look at it again after a restart, which also
        # settles the template row.
        self.server.start()
        pool = os.path.join(self.server.dir, "pool", "templates", "slow")
        left = os.listdir(pool) if os.path.exists(pool) else []
        self.assertFalse(left, f"half-built template left: {left}")
        names = {(t["name"], t["status"]) for t in
                 self.api.call("GET", "/v1/templates")["templates"]}
        self.assertNotIn(("slow", "ready"), names)
        self.assertNotIn(("slow", "building"), names)
        server, self.server = self.server, None
        stop_and_check(server)


if __name__ == "__main__":
    main()
