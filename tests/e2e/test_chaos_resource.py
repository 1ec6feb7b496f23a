"""Chaos, resource faults, short form (tests/e2e/chaos_resource.py): the
object store (the S3 test server behind a fault-injecting proxy) answering
500/503, slow, resetting mid-part, mid-manifest or mid-download, or down;
the btrfs pool full (a real ENOSPC: the pool filled from the host while
the op holds at a fault point); PostgreSQL cut off or restarted; each at a
phase of pause, snapshot, suspend (upload, verify, manifest, commit),
restore, delete and create. Each case converges: the op answers or fails
with a JSON error, the sandbox settles with the file written before it
(no loss), a failed suspend leaves nothing restorable, the op works again
once the fault is gone, and nothing leaks (host audit, rows, objects in
the bucket that no row names). One 30 s PostgreSQL outage (a create) is
here; the minute-long store outages and the other 30 s PostgreSQL outages
run only in the long form: bench/chaos --resource."""
import os
import shutil
import unittest

import chaos_resource as cr
import harness
from harness import BACKEND, main


class ResourceChaosTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if BACKEND == "vm":
            raise unittest.SkipTest("the resource matrix runs on ns (bench/chaos --resource)")
        if not shutil.which("node") or not os.path.isdir(
                os.path.join(harness.SRC, "tests", "s3", "node_modules", "s3rver")):
            raise unittest.SkipTest("no S3 test server (make npm-deps)")
        cls.world, cls.server, cls.fault_dir = cr.start()
        cls.chaos = cr.ResourceChaos(cls.world, cls.server, cls.fault_dir, log=print)

    @classmethod
    def tearDownClass(cls):
        cr.stop(cls.world, cls.server, cls.fault_dir)

    def test_resource_faults_converge(self):
        self.chaos.baseline()
        results = [self.chaos.run_case(*c) for c in cr.SHORT]
        ok = cr.summary(results)
        self.assertTrue(all(r.fired for r in results),
                        [r.line() for r in results if not r.fired])
        self.assertTrue(ok, "\n" + "\n".join(r.line() for r in results if not r.ok))


if __name__ == "__main__":
    main()
