"""The default debian template: built once by mmdebstrap (concurrent requests
share the build), and python3 works inside."""
from concurrent.futures import ThreadPoolExecutor

import os
import subprocess

from harness import CLI, AirlockTestCase, main


class DebianTest(AirlockTestCase):
    templates = "busybox"  # debian is built on demand below

    def test_debian_on_demand_shared_build(self):
        with ThreadPoolExecutor(max_workers=3) as ex:
            sbxs = list(ex.map(lambda _: self.api.create(template="debian"), range(3)))
        versions = [t for t in self.api.call("GET", "/v1/templates")["templates"]
                    if t["name"] == "debian"]
        self.assertEqual(len(versions), 1, versions)  # one build for three requests
        for s in sbxs:
            self.assertEqual(s["template"], "debian")
        sid = sbxs[0]["id"]
        code, out, _, _ = self.api.exec(sid, ["python3", "-c", "print(2+2)"])
        self.assertEqual((code, out), (0, b"4\n"))
        code, out, _, _ = self.api.exec(sid, ["sh", "-c", "git --version && curl --version | head -1 && ps -p 1 -o comm="])
        self.assertEqual(code, 0, out)
        self.assertIn(b"git version", out)
        # default template is debian
        d = self.api.call("POST", "/v1/sandboxes", {})
        self.assertEqual(d["template"], "debian")
        for s in sbxs + [d]:
            self.api.delete(s["id"])

    def test_build_with_packages_via_cli(self):
        cfg = os.path.join(self.server.dir, "cli.json")
        r = subprocess.run([CLI, "--config", cfg, "template", "build", "deb-jq",
                            "--from", "debian:bookworm", "--packages", "jq"],
                           capture_output=True, timeout=900)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(r.stdout.strip(), "the build shows its progress")
        s = self.api.create(template="deb-jq")
        try:
            code, out, _, _ = self.api.exec(s["id"], ["sh", "-c", "echo '{\"a\":41}' | jq '.a+1'"])
            self.assertEqual((code, out), (0, b"42\n"))
        finally:
            self.api.delete(s["id"])
        r = subprocess.run([CLI, "--config", cfg, "template", "build", "deb-bad",
                            "--from", "debian:bookworm", "--packages", "no such package"],
                           capture_output=True, timeout=120)
        self.assertNotEqual(r.returncode, 0)


if __name__ == "__main__":
    main()
