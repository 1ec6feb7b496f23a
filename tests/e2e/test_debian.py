"""The default debian template: built once by mmdebstrap (concurrent requests
share the build), and python3 works inside."""
from concurrent.futures import ThreadPoolExecutor

from harness import AirlockTestCase, main


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


if __name__ == "__main__":
    main()
