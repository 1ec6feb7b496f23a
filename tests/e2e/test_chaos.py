"""Chaos, short form (issue 20): kill -9 a daemon, or the sandbox's own guest
agent (ns) / QEMU (vm), at fault points inside create, snapshot, rollback,
fork, delete, suspend and restore (tests/e2e/chaos.py; the points are
src/lib/fault.h's, compiled into this non-Release build). After each fault:
every daemon is back, each sandbox the op touched settles in running,
suspended, failed (saying why, nothing of it running) or deleted; a running
one still has the file written before the op and answers exec; the op
tried again works; and once everything is deleted the leak audit
(tests/e2e/leaks.py: mounts, loop devices, subvolumes, cgroups, jail
processes, links, nftables rules, QEMUs, run files, the daemons' fds) finds
nothing new.

The ns matrix here: every point with its own daemon killed there, and one
point of each op with each other process killed (api, node or nodemgr,
gateway, agent). AIRLOCK_E2E_BACKEND=vm runs a small vm list instead. The
whole matrix, every backend, N rounds: bench/chaos."""
import os
import shutil
import unittest

import chaos
import harness
from harness import BACKEND, main

# One point per op where every other process is killed too: the sandbox
# (or the op's new one) has a jail there and the op is half done.
MID = {"create": "create.after_network", "snapshot": "snapshot.after_backend",
       "rollback": "rollback.after_backend", "fork": "fork.after_child_jail",
       "delete": "delete.after_intent", "suspend": "suspend_before_commit",
       "restore": "restore.after_jail"}

VM_CASES = [("create", "create.after_jail", "qemu"),
            ("create", "nm.vm.after_qemu", "nodemgr"),
            ("snapshot", "nm.snapshot.after_hold", "node"),
            ("snapshot", "snapshot.after_row", "qemu"),
            ("rollback", "rollback.after_transition", "node"),
            ("fork", "fork.after_child_jail", "node"),
            ("delete", "delete.after_intent", "node"),
            ("suspend", "suspend_before_commit", "node")]


def short_matrix():
    if BACKEND == "vm":
        return VM_CASES
    cases = []
    for op, points in chaos.POINTS.items():
        cases += [(op, p, chaos.owner(p)) for p in points]
        cases += [(op, MID[op], t) for t in chaos.targets("ns") if t != chaos.owner(MID[op])]
    return cases


class ChaosTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server, cls.fault_dir = chaos.start_server(BACKEND)
        cls.chaos = chaos.Chaos(cls.server, cls.fault_dir, BACKEND, log=print)

    @classmethod
    def tearDownClass(cls):
        try:
            chaos.sync_pool(cls.server)
            harness.stop_and_check(cls.server)
        finally:
            shutil.rmtree(cls.fault_dir, ignore_errors=True)

    def test_kill_at_every_phase_converges(self):
        cases = short_matrix()
        self.chaos.baseline()
        results = [self.chaos.run_case(*c) for c in cases]
        ok = chaos.summary(results)
        self.assertTrue(all(r.fired for r in results),
                        [r.line() for r in results if not r.fired])
        self.assertTrue(ok, "\n" + "\n".join(r.line() for r in results if not r.ok))

    def test_fault_point_fires_only_when_armed(self):
        # Unarmed, a create passes every point; armed with "kill", the node
        # dies there exactly once (the file is gone) and the next create runs.
        c = self.chaos
        c.wait_daemons()
        sid = c.create()
        node = c.pid("node")
        c.arm("create.after_record", "kill")
        status, err = c.do_op("create", None)
        self.assertIsNone(status, err)
        c.wait_daemons()
        self.assertNotEqual(c.pid("node"), node)
        self.assertFalse(os.path.exists(os.path.join(self.fault_dir, "create.after_record")))
        self.assertEqual(c.state(sid)["state"], "running")
        c.create()
        c.delete_all()


if __name__ == "__main__":
    main()
