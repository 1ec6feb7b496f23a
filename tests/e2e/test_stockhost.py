#!/usr/bin/env python3
"""The package on a stock host: a Debian 12 VM booting systemd with the
unified cgroup v2 hierarchy (tests/e2e/stockhost.py), as users' hosts do,
where every other test runs on this hybrid-cgroup, no-systemd machine.

In the VM (no network device; driven over a 9p share): `dpkg -i` of the
package (`make deb`) with a drop-in for a small pool and only busybox; its
postinst starts airlockd.service. Then through the installed CLI on ns:
health; a create taken from the warm pool (the node's hit counter and
nodemgr's log for it); exec; files; a memory hog OOM-killed (memory.events
of the sandbox's cgroup); a fork bomb held at pids.max; cpu.max at
--cpus 0.5 and a rough measured share; pause/resume (cgroup.freeze);
snapshot, rollback, fork; suspend/restore (file store); rm;
`systemctl stop` leaving nothing and the cgroup2 mount options as before
the first start; `systemctl start`; `systemctl kill -s KILL` and back.

The short form of bench/stockhost. Exits 77 only when qemu-system-x86_64 or
mmdebstrap (or cpack) is missing.
"""
import json
import os
import shutil
import sys
import tempfile
import time
import unittest

from debpkg import deb_depends, make_deb
from harness import main
from stockhost import CREATE, Bed, StockVM, image


class StockHost(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="airlock-stockhost-t-")
        self.vm = None

    def tearDown(self):
        if self.vm:
            self.vm.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def test_package_on_a_stock_host(self):
        t_all = time.time()
        deb = make_deb(os.path.join(self.tmp, "deb"))
        t0 = time.time()
        img = image(deb_depends(deb))
        print(f"image: {time.time() - t0:.1f} s ({img})")
        self.vm = StockVM(img)
        print(f"boot ({self.vm.accel}): {self.vm.start():.1f} s to the command runner")
        bed = Bed(self.vm, self)
        opts = bed.booted_stock()
        print(f"cgroup2 before airlockd: {opts}")
        bed.install(deb)

        sid = bed.warm_create(memory=64)
        bed.exec_and_files(sid)
        bed.memory_limit(sid)
        bed.lifecycle(sid)
        small = bed.cli(f"{CREATE} --pids 32 --cpus 0.5")
        bed.cpu_limit(small)    # before the bomb, which fills the sandbox
        bed.pids_limit(small)
        bed.cli(f"rm {sid} {small}")
        self.assertEqual(json.loads(bed.cli("--json ls"))["sandboxes"], [])
        bed.stop_start_kill(opts)
        print(f"stock-host test: {time.time() - t_all:.0f} s")


if __name__ == "__main__":
    missing = [t for t in ("qemu-system-x86_64", "mmdebstrap", "cpack") if not shutil.which(t)]
    if missing:
        print(f"skip: needs {', '.join(missing)} (scripts/setup-deps.sh)")
        sys.exit(77)
    main()
