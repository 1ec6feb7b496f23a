"""The code interpreter on a vm sandbox (label vm): the code-interpreter
template booted under QEMU (TCG on hosts without a usable KVM), its service
started by the guest before it said READY, so the template's memory snapshot
holds it and a clone's first cell finds the kernel running. One short flow:
state across cells, a PNG figure, an error, a context, javascript; the
create and first-cell times are printed (not asserted: TCG)."""
import base64
import sys
import time

from harness import AirlockTestCase, main


class CodeVmTest(AirlockTestCase):
    templates = "busybox,code-interpreter"

    def run_code(self, sid, code, **kw):
        body = {"code": code}
        body.update(kw)
        return list(self.api.stream("POST", f"/v1/sandboxes/{sid}/code", body))

    def result(self, lines):
        return [l["text"] for l in lines if l["type"] == "result" and l["is_main_result"]]

    def test_code_flow_on_vm(self):
        spec = dict(template="code-interpreter", backend="vm", memory_mb=1024)
        t0 = time.time()
        first = self.api.create(**spec)        # boots the template, saves its snapshot
        t_first_create = time.time() - t0
        try:
            t0 = time.time()
            self.assertEqual(self.result(self.run_code(first["id"], "1 + 1")), ["2"])
            t_first_cell = time.time() - t0
        finally:
            self.api.delete(first["id"])
        # a clone of the template's memory snapshot
        t0 = time.time()
        sb = self.api.create(**spec)
        t_create = time.time() - t0
        try:
            t0 = time.time()
            self.assertEqual(self.result(self.run_code(sb["id"], "y = 20\ny + 1")), ["21"])
            t_cell = time.time() - t0
            self.assertEqual(self.result(self.run_code(sb["id"], "y * 2")), ["40"])
            lines = self.run_code(sb["id"], "import matplotlib.pyplot as plt\n"
                                  "plt.plot([1, 2])\nplt.show()")
            png = [l["png"] for l in lines if l["type"] == "result" and "png" in l]
            self.assertEqual(len(png), 1)
            self.assertTrue(base64.b64decode(png[0]).startswith(b"\x89PNG\r\n\x1a\n"))
            errs = [l for l in self.run_code(sb["id"], "[][1]") if l["type"] == "error"]
            self.assertEqual([e["name"] for e in errs], ["IndexError"])
            ctx = self.api.call("POST", f"/v1/sandboxes/{sb['id']}/code/contexts",
                                {"cwd": "/tmp"})
            lines = self.run_code(sb["id"], "import os\nos.getcwd()", context_id=ctx["id"])
            self.assertEqual(self.result(lines), ["'/tmp'"])
            lines = self.run_code(sb["id"], "[1, 2].length", language="javascript")
            self.assertEqual(self.result(lines), ["2"])
        finally:
            self.api.delete(sb["id"])
        print(f"vm (TCG here): first create {t_first_create:.1f} s, its first cell "
              f"{t_first_cell * 1000:.0f} ms; clone create {t_create * 1000:.0f} ms, "
              f"its first cell {t_cell * 1000:.0f} ms", file=sys.stderr)


if __name__ == "__main__":
    main()
