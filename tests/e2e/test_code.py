"""The code interpreter: the code-interpreter template (built once here by
`up --templates busybox,code-interpreter`), its service in the sandbox, the
native API (POST /v1/sandboxes/{id}/code, /code/contexts) through the real
daemons, and the unmodified @e2b/code-interpreter 2.8.0 SDK
(tests/e2b/code.mjs) against the E2B layer.

Set AIRLOCK_E2E_BACKEND=vm to run the same flow on vm sandboxes
(tests/e2e/test_code_vm.py does, with a short flow)."""
import base64
import json
import os
import re
import subprocess
import sys
import time

import harness
from harness import AirlockTestCase, ApiError, main

E2B_DIR = os.path.join(harness.SRC, "tests", "e2b")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


class CodeTest(AirlockTestCase):
    templates = "busybox,code-interpreter"

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.tenant, cls.client = cls.new_tenant(cls, "code")
        t0 = time.time()
        cls.sb = cls.client.create(template="code-interpreter", timeout_s=1800)
        cls.create_s = time.time() - t0

    def run_code(self, code, client=None, sid=None, **kw):
        """(lines, status): every NDJSON line of one cell, in order."""
        body = {"code": code}
        body.update(kw)
        lines = list((client or self.client).stream(
            "POST", f"/v1/sandboxes/{sid or self.sb['id']}/code", body))
        return lines

    def types(self, lines):
        return [l["type"] for l in lines]

    def text(self, lines, kind):
        return "".join(l["text"] for l in lines if l["type"] == kind)

    def results(self, lines):
        return [l for l in lines if l["type"] == "result"]

    def test_01_state_streams_and_order(self):
        a = self.run_code("x = 41\nprint('hi')")
        self.assertEqual(self.types(a), ["number_of_executions", "stdout", "end_of_execution"])
        b = self.run_code("import sys\nprint('out1')\nprint('err1', file=sys.stderr)\n"
                          "sys.stdout.flush(); sys.stderr.flush()\nprint('out2')\nx + 1")
        self.assertEqual(self.text(b, "stdout"), "out1\nout2\n")
        self.assertEqual(self.text(b, "stderr"), "err1\n")
        main_res = [r for r in self.results(b) if r["is_main_result"]]
        self.assertEqual([r["text"] for r in main_res], ["42"])
        # streaming order: out1 before err1 before out2 before the result
        order = [(l["type"], l.get("text")) for l in b
                 if l["type"] in ("stdout", "stderr", "result")]
        self.assertEqual(order[0], ("stdout", "out1\n"))
        self.assertEqual(order[1], ("stderr", "err1\n"))
        self.assertEqual(order[-1][0], "result")
        self.assertEqual(b[-1]["type"], "end_of_execution")
        self.assertGreater(b[0]["execution_count"], a[0]["execution_count"])

    def test_02_streams_as_it_runs(self):
        """A line arrives before the cell ends."""
        path = f"/v1/sandboxes/{self.sb['id']}/code"
        t0 = time.time()
        seen = None
        for l in self.client.stream("POST", path, {"code": "import time\nprint('early', flush=True)\ntime.sleep(2)\nprint('late')"}):
            if l["type"] == "stdout" and "early" in l["text"] and seen is None:
                seen = time.time() - t0
        total = time.time() - t0
        self.assertIsNotNone(seen)
        self.assertLess(seen, total - 1.0, f"early line after {seen:.2f}s of {total:.2f}s")

    def test_03_matplotlib_png_and_dataframe_html(self):
        lines = self.run_code("import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.show()")
        pngs = [r["png"] for r in self.results(lines) if "png" in r]
        self.assertEqual(len(pngs), 1, lines)
        raw = base64.b64decode(pngs[0])
        self.assertTrue(raw.startswith(PNG_MAGIC))
        self.assertGreater(len(raw), 1000)
        lines = self.run_code("import pandas as pd\npd.DataFrame({'name': ['a', 'b'], 'n': [1, 2]})")
        res = [r for r in self.results(lines) if r["is_main_result"]]
        self.assertEqual(len(res), 1, lines)
        self.assertIn("<table", res[0]["html"])
        self.assertIn("<td>a</td>", res[0]["html"])
        self.assertIn("name", res[0]["text"])

    def test_04_error(self):
        lines = self.run_code("def f():\n    return 1 / 0\nf()")
        errs = [l for l in lines if l["type"] == "error"]
        self.assertEqual(len(errs), 1)
        self.assertEqual(errs[0]["name"], "ZeroDivisionError")
        self.assertEqual(errs[0]["value"], "division by zero")
        tb = re.sub(r"\x1b\[[0-9;]*m", "", errs[0]["traceback"])
        self.assertIn("----> 3 f()", tb)
        self.assertIn("ZeroDivisionError: division by zero", tb)
        self.assertEqual(lines[-1]["type"], "end_of_execution")

    def test_05_contexts(self):
        base = f"/v1/sandboxes/{self.sb['id']}/code/contexts"
        self.client.exec(self.sb["id"], ["mkdir", "-p", "/tmp/ctx-a"])
        ctx = self.client.call("POST", base, {"cwd": "/tmp/ctx-a"})
        self.assertEqual(ctx["language"], "python")
        self.assertEqual(ctx["cwd"], "/tmp/ctx-a")
        ids = [c["id"] for c in self.client.call("GET", base)]
        self.assertIn(ctx["id"], ids)
        # its own state and cwd
        self.run_code("only_here = 7")
        lines = self.run_code("import os\n(os.getcwd(), 'only_here' in globals())",
                              context_id=ctx["id"])
        self.assertEqual(self.results(lines)[0]["text"], "('/tmp/ctx-a', False)")
        self.run_code("mine = 3", context_id=ctx["id"])
        self.assertEqual(self.results(self.run_code("mine", context_id=ctx["id"]))[0]["text"], "3")
        # restart: state gone, cwd kept
        self.client.call("POST", f"{base}/{ctx['id']}/restart")
        lines = self.run_code("import os\nos.getcwd()", context_id=ctx["id"])
        self.assertEqual(self.results(lines)[0]["text"], "'/tmp/ctx-a'")
        lines = self.run_code("mine", context_id=ctx["id"])
        self.assertEqual([l["name"] for l in lines if l["type"] == "error"], ["NameError"])
        # the default context was not touched
        self.assertEqual(self.results(self.run_code("only_here"))[0]["text"], "7")
        # remove
        self.client.call("DELETE", f"{base}/{ctx['id']}")
        self.assertNotIn(ctx["id"], [c["id"] for c in self.client.call("GET", base)])
        st, data, _ = self.client.raw("POST", f"/v1/sandboxes/{self.sb['id']}/code",
                                      {"code": "1", "context_id": ctx["id"]})
        self.assertEqual(st, 404, data)
        st, _, _ = self.client.raw("DELETE", f"{base}/{ctx['id']}")
        self.assertEqual(st, 404)

    def test_06_javascript_and_bash(self):
        self.run_code("let n = 20; console.log('from js')", language="javascript")
        lines = self.run_code("n + 1", language="javascript")
        self.assertEqual(self.results(lines)[0]["text"], "21")
        lines = self.run_code("undefinedThing.x", language="javascript")
        self.assertEqual([l["name"] for l in lines if l["type"] == "error"], ["ReferenceError"])
        base = f"/v1/sandboxes/{self.sb['id']}/code/contexts"
        js = self.client.call("POST", base, {"language": "javascript"})
        lines = self.run_code("typeof n", context_id=js["id"])
        self.assertEqual(self.results(lines)[0]["text"], "'undefined'")
        self.run_code("V=5; cd /tmp", language="bash")
        lines = self.run_code("echo $V $(pwd); whoami", language="bash")
        self.assertEqual(self.text(lines, "stdout"), "5 /tmp\nuser\n")
        lines = self.run_code("exit_code_test() { return 3; }; exit_code_test", language="bash")
        self.assertEqual([l["value"] for l in lines if l["type"] == "error"], ["3"])

    def test_07_env_vars(self):
        lines = self.run_code("import os\nos.environ.get('CELL_ONLY')", env_vars={"CELL_ONLY": "yes"})
        self.assertEqual(self.results(lines)[0]["text"], "'yes'")
        lines = self.run_code("import os\nos.environ.get('CELL_ONLY')")
        self.assertEqual(self.results(lines), [])   # None: no result
        lines = self.run_code("process.env.JS_ENV", language="javascript", env_vars={"JS_ENV": "j"})
        self.assertEqual(self.results(lines)[0]["text"], "'j'")
        lines = self.run_code("echo $SH_ENV", language="bash", env_vars={"SH_ENV": "s"})
        self.assertEqual(self.text(lines, "stdout"), "s\n")
        lines = self.run_code("echo \"[$SH_ENV]\"", language="bash")
        self.assertEqual(self.text(lines, "stdout"), "[]\n")

    def test_08_timeout_interrupts_and_state_survives(self):
        self.run_code("kept = 'still here'")
        t0 = time.time()
        lines = self.run_code("while True:\n    pass", timeout_ms=1500)
        took = time.time() - t0
        self.assertLess(took, 30)
        self.assertEqual([l["name"] for l in lines if l["type"] == "error"], ["KeyboardInterrupt"])
        self.assertEqual(self.results(self.run_code("kept"))[0]["text"], "'still here'")

    def test_09_one_gigabyte_print_is_capped(self):
        code = ("import sys\ns = 'x' * (1 << 20)\nfor i in range(1024):\n"
                "    sys.stdout.write(s)\n    sys.stdout.flush()")
        path = f"/v1/sandboxes/{self.sb['id']}/code"
        c = self.client._conn()
        c.request("POST", path, body=json.dumps({"code": code}).encode(),
                  headers={"Authorization": "Bearer " + self.client.key,
                           "Content-Type": "application/json"})
        r = c.getresponse()
        self.assertEqual(r.status, 200)
        total, lines = 0, []
        while True:
            line = r.readline()
            if not line:
                break
            total += len(line)
            lines.append(json.loads(line))
        c.close()
        self.assertLess(total, 20 << 20, "the stream is capped near 16 MiB")
        self.assertTrue(any("[airlock: this cell's output passed" in l.get("text", "")
                            for l in lines if l["type"] == "stderr"))
        self.assertEqual(lines[-1]["type"], "end_of_execution")
        self.assertEqual(self.results(self.run_code("1 + 1"))[0]["text"], "2")
        # the node is unharmed: it still answers for this sandbox
        self.assertEqual(self.client.exec(self.sb["id"], ["true"])[0], 0)

    def test_10_other_tenant_and_bad_input(self):
        _, other = self.new_tenant("code-other")
        sid = self.sb["id"]
        for method, path, body in (("POST", f"/v1/sandboxes/{sid}/code", {"code": "1"}),
                                   ("GET", f"/v1/sandboxes/{sid}/code/contexts", None),
                                   ("POST", f"/v1/sandboxes/{sid}/code/contexts", {})):
            st, data, _ = other.raw(method, path, body)
            self.assertEqual(st, 404, data)
        for body in ({}, {"code": 1}, {"code": "1", "language": "cobol"},
                     {"code": "1", "bogus": True}, {"code": "1", "timeout_ms": -1},
                     {"code": "1", "env_vars": {"1BAD": "x"}}, {"code": "1", "env_vars": {"A": 1}},
                     {"code": "1", "context_id": "../x"},
                     {"code": "1", "language": "python", "context_id": "abc"}):
            st, data, _ = self.client.raw("POST", f"/v1/sandboxes/{sid}/code", body)
            self.assertEqual(st, 400, (body, data))
            self.assertIn("code", json.loads(data)["error"])
        st, data, _ = self.client.raw("POST", f"/v1/sandboxes/{sid}/code", b"{not json")
        self.assertEqual(st, 400, data)
        st, _, _ = self.client.raw("POST", f"/v1/sandboxes/{sid}/code/contexts",
                                   {"language": "cobol"})
        self.assertEqual(st, 400)
        st, _, _ = self.client.raw("POST", f"/v1/sandboxes/{sid}/code/contexts",
                                   {"cwd": "relative"})
        self.assertEqual(st, 400)
        # a template without the service: 409 no_code_service
        bb = self.client.create(template="busybox")
        try:
            st, data, _ = self.client.raw("POST", f"/v1/sandboxes/{bb['id']}/code", {"code": "1"})
            self.assertEqual(st, 409, data)
            self.assertEqual(json.loads(data)["error"]["code"], "no_code_service")
        finally:
            self.client.delete(bb["id"])

    def test_11_paused_sandbox_resumes(self):
        sid = self.sb["id"]
        self.run_code("before_pause = 1")
        self.client.call("POST", f"/v1/sandboxes/{sid}/pause")
        lines = self.run_code("before_pause + 1")
        self.assertEqual(self.results(lines)[0]["text"], "2")
        self.assertEqual(self.client.call("GET", f"/v1/sandboxes/{sid}")["state"], "running")

    def test_12_first_cell_after_create_is_warm(self):
        """A new sandbox: its first cell answers without paying a kernel
        start (the warm jail, or the guest's start program, has it up)."""
        sb = self.client.create(template="code-interpreter")
        try:
            # its default Python context is listed once its kernel answered:
            # before any cell, it is there already (the warm jail started it
            # minutes ago, in setUpClass's refill)
            ctxs = self.client.call("GET", f"/v1/sandboxes/{sb['id']}/code/contexts")
            self.assertEqual([c["language"] for c in ctxs], ["python"])
            t0 = time.time()
            lines = self.run_code("1 + 1", sid=sb["id"])
            first = time.time() - t0
            self.assertEqual(self.results(lines)[0]["text"], "2")
            # the kernel runs as the sandbox's user, not root
            lines = self.run_code("import os\nos.getuid()", sid=sb["id"])
            self.assertEqual(self.results(lines)[0]["text"], "1000")
            print(f"first cell after create: {first * 1000:.0f} ms", file=sys.stderr)
        finally:
            self.client.delete(sb["id"])

    def test_20_e2b_code_interpreter_sdk(self):
        if not os.path.exists(os.path.join(E2B_DIR, "node_modules", "@e2b", "code-interpreter",
                                           "package.json")):
            subprocess.run(["sh", os.path.join(E2B_DIR, "setup.sh")], check=True)
        env = dict(os.environ)
        base = f"http://{self.server.addr}"
        env.update(E2B_API_URL=base + "/e2b", E2B_SANDBOX_URL=base + "/e2b/envd",
                   E2B_API_KEY=self.client.key, E2B_DOMAIN="sbx.e2b.test")
        r = subprocess.run(["node", os.path.join(E2B_DIR, "code.mjs")], env=env,
                           capture_output=True, text=True, timeout=600)
        sys.stdout.write(r.stdout)
        sys.stderr.write(r.stderr)
        self.assertEqual(r.returncode, 0, "tests/e2b/code.mjs failed (output above)")
        self.assertIn("code suite: all passed", r.stdout)


if __name__ == "__main__":
    main()
