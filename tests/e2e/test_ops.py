"""Operations: `version`, the CLI's exit codes and per-verb --help,
GET /v1/ready, `airlock doctor` and GET /metrics."""
import json
import os
import re
import subprocess

from harness import AIRLOCKD, CLI, AirlockTestCase, main
import unittest

SRC = os.environ.get("AIRLOCK_SRC", os.path.join(os.path.dirname(__file__), "../.."))


def project_version():
    with open(os.path.join(SRC, "CMakeLists.txt")) as f:
        return re.search(r"project\(airlock VERSION ([0-9.]+)", f.read()).group(1)


class VersionTest(unittest.TestCase):
    """No server needed."""

    def test_version(self):
        want = project_version()
        for binary, name in ((CLI, "airlock"), (AIRLOCKD, "airlockd")):
            r = subprocess.run([binary, "version"], capture_output=True, text=True, timeout=10)
            self.assertEqual(r.returncode, 0, r.stderr)
            line = r.stdout.strip()
            # the project version, then what `git describe` said at build time
            self.assertRegex(line, rf"^{name} {re.escape(want)}( \(git [0-9a-zA-Z._-]+\))?$")
            self.assertNotIn("/", line)   # no build path
        r = subprocess.run([CLI, "--json", "version"], capture_output=True, text=True, timeout=10)
        self.assertEqual(r.returncode, 0)
        self.assertTrue(json.loads(r.stdout)["version"].startswith(want))


if __name__ == "__main__":
    main()
