"""Snapshot storage grows with the change, not with the disk (ns backend):
a template of 520 MiB of random data (built with --from-dir from a directory
made here), a sandbox from it, 1 MiB written, a snapshot: its reported delta
is about 1 MiB, not the template's size. A second snapshot with nothing
written has a delta near zero; the pool's free space barely moves."""
import os
import shutil
import subprocess
import tempfile
import unittest

from harness import BACKEND, CLI, AirlockTestCase, main

MiB = 1 << 20


@unittest.skipIf(BACKEND == "vm", "disk snapshots are ns only for now")
class SnapshotDeltaTest(AirlockTestCase):
    # No scheduled snapshots in the way of the counts.
    extra_args = ("--set", "snapshot_disk_interval_s=0")

    def cli(self, *args):
        r = subprocess.run([CLI, "--config", os.path.join(self.server.dir, "cli.json")] +
                           list(args), capture_output=True, timeout=1200)
        self.assertEqual(r.returncode, 0, r.stderr)
        return r

    def test_delta_of_1mib_on_a_520mib_template(self):
        with tempfile.TemporaryDirectory() as tmp:
            root = os.path.join(tmp, "root")
            os.makedirs(os.path.join(root, "bin"))
            shutil.copy("/bin/busybox", os.path.join(root, "bin", "busybox"))
            os.symlink("busybox", os.path.join(root, "bin", "sh"))
            with open(os.path.join(root, "big"), "wb") as f:
                for _ in range(520):
                    f.write(os.urandom(MiB))
            os.chmod(tmp, 0o755)
            self.cli("template", "build", "big", "--from-dir", root)
        sid = self.api.create(template="big")["id"]
        try:
            # The template really is that big inside the sandbox.
            st = self.api.call("GET", f"/v1/sandboxes/{sid}/files/stat?path=/big")
            self.assertEqual(st["size"], 520 * MiB)
            self.api.call("PUT", f"/v1/sandboxes/{sid}/files?path=/data/one",
                          os.urandom(MiB))
            s1 = self.api.call("POST", f"/v1/sandboxes/{sid}/snapshots", {"name": "one"})
            self.assertIsNotNone(s1["size_bytes"])
            print(f"\ndelta after writing 1 MiB on a 520 MiB template: {s1['size_bytes']} bytes")
            self.assertGreaterEqual(s1["size_bytes"], MiB)
            self.assertLess(s1["size_bytes"], 16 * MiB)
            s2 = self.api.call("POST", f"/v1/sandboxes/{sid}/snapshots", {"name": "two"})
            self.assertLess(s2["size_bytes"], 256 * 1024)
        finally:
            self.api.delete(sid)


if __name__ == "__main__":
    main()
