#!/usr/bin/env python3
"""The short form of bench/load (issue 20, "Load"): creates at concurrency 8,
execs, and a soak of random operations (exec, file write and read back,
snapshot, rollback, pause/resume, delete and re-create) through a real
server, then a leak audit. Fails on any error but the rate limit's 429s, on
any leak, or when the server's shutdown leaves anything behind."""
import os
import subprocess
import sys
import unittest

from harness import BIN, SRC, main


class LoadShortTest(unittest.TestCase):
    def test_short_load_has_no_error_and_no_leak(self):
        r = subprocess.run([sys.executable, os.path.join(SRC, "bench", "load"), "--short",
                            "--airlockd", os.path.join(BIN, "airlockd")],
                           capture_output=True, text=True, timeout=900)
        print(r.stdout[-4000:], r.stderr[-2000:], sep="\n")
        self.assertEqual(r.returncode, 0, "bench/load --short failed (output above)")
        self.assertIn("result: 0 error(s), 0 leak(s)", r.stdout)


if __name__ == "__main__":
    main()
