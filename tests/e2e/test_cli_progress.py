#!/usr/bin/env python3
"""The CLI's progress bars (issue 19, item 7), driven under a real
pseudo-terminal.

- `airlock suspend` / `airlock restore` of an ns sandbox (file object store)
  holding 64 MiB: the bar's percentage rises (the node counts the bytes the
  store reads or writes; the CLI polls the sandbox's `progress`) and ends at
  100%; meanwhile GET shows `progress` {op, phase, unit, done, total}.
- `airlock fork SBX --count N`: children done of N, from 0% to 100%.
- `airlock template build --from-dir`: the build script's numbered steps;
  `--from-oci` of a three-layer image: the layers applied within its import
  step (the stream's `layer`/`layers`).
- The same commands without a terminal print no control characters.
"""
import json
import os
import pty
import re
import select
import subprocess
import tempfile
import threading
import time

import ociimage as oi
from harness import BACKEND, CLI, AirlockTestCase, ApiError, main

PCT = re.compile(rb"\] +(\d+)% ")
BIG_MIB = 64


class CliProgress(AirlockTestCase):
    extra_args = ("--set", "suspend_after_idle=0")

    def setUp(self):
        if BACKEND == "vm":
            self.skipTest("the pty test runs on ns (the bar's code is the backend's same)")
        self.sids = []

    def tearDown(self):
        for sid in self.sids:
            try:
                self.api.delete(sid)
            except ApiError:
                pass

    def env(self):
        env = dict(os.environ, TERM="xterm")
        for k in ("AIRLOCK_URL", "AIRLOCK_API_KEY", "AIRLOCK_NO_PROGRESS"):
            env.pop(k, None)
        return env

    def argv(self, *args):
        return [CLI, "--config", os.path.join(self.server.dir, "cli.json")] + list(args)

    def on_pty(self, *args, timeout=300):
        """Run the CLI with stdin, stdout and stderr on a pty; (rc, bytes)."""
        master, slave = pty.openpty()
        try:
            p = subprocess.Popen(self.argv(*args), stdin=slave, stdout=slave, stderr=slave,
                                 env=self.env(), close_fds=True)
        finally:
            os.close(slave)
        out = b""
        deadline = time.time() + timeout
        try:
            while time.time() < deadline:
                r, _, _ = select.select([master], [], [], 0.5)
                if r:
                    try:
                        chunk = os.read(master, 65536)
                    except OSError:  # EIO: every slave end is closed
                        break
                    if not chunk:
                        break
                    out += chunk
                elif p.poll() is not None:
                    break
            rc = p.wait(timeout=max(1, deadline - time.time()))
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
            os.close(master)
        return rc, out

    def no_tty(self, *args):
        r = subprocess.run(self.argv(*args), capture_output=True, env=self.env(), timeout=300,
                           stdin=subprocess.DEVNULL)
        return r.returncode, r.stdout, r.stderr

    def assert_bar(self, out, what, at_least=2):
        pcts = [int(m) for m in PCT.findall(out)]
        self.assertGreaterEqual(len(pcts), at_least, f"{what}: too few bars in {out[-2000:]!r}")
        self.assertEqual(pcts, sorted(pcts), f"{what}: the percentage went back: {pcts}")
        self.assertEqual(pcts[-1], 100, f"{what}: does not end at 100%: {pcts}")
        self.assertIn(b"\r\x1b[K", out, f"{what}: no redrawn line")
        return pcts

    def assert_plain(self, *streams):
        for s in streams:
            bad = [c for c in s if c < 0x20 and c not in (0x0a, 0x09)] + \
                  [c for c in s if c == 0x7f]
            self.assertEqual(bad, [], f"control characters without a terminal: {s[-500:]!r}")

    def make(self):
        sid = self.api.create(template="busybox")["id"]
        self.sids.append(sid)
        return sid

    def watch_progress(self, sid, seen, stop):
        while not stop.is_set():
            try:
                sb = self.api.call("GET", f"/v1/sandboxes/{sid}")
                if sb.get("progress"):
                    seen.append(dict(sb["progress"], at=time.time()))
            except ApiError:
                pass
            time.sleep(0.05)

    def test_suspend_and_restore_show_bytes(self):
        sid = self.make()
        code, _, err, _ = self.api.exec(
            sid, ["sh", "-c", f"head -c {BIG_MIB << 20} /dev/urandom > /work/big && sync"])
        self.assertEqual(code, 0, err)

        seen, stop = [], threading.Event()
        t = threading.Thread(target=self.watch_progress, args=(sid, seen, stop))
        t.start()
        try:
            t0 = time.time()
            rc, out = self.on_pty("suspend", sid)
            took = time.time() - t0
        finally:
            stop.set()
            t.join()
        self.assertEqual(rc, 0, out)
        # (a suspend quicker than the CLI's first poll draws 100% only)
        pcts = self.assert_bar(out, "suspend", 1)
        print(f"suspend of {BIG_MIB} MiB: {took:.1f} s, bars at {pcts}")
        self.assertRegex(out, rb"100% \d+\.\d/\d+\.\d MiB")
        self.assertEqual(self.api.call("GET", f"/v1/sandboxes/{sid}")["state"], "suspended")
        self.assertNotIn("progress", self.api.call("GET", f"/v1/sandboxes/{sid}"))
        # what GET showed meanwhile: the upload's bytes, rising to a total
        ups = [p for p in seen if p["phase"] == "upload"]
        self.assertTrue(ups, f"GET never showed the upload: {seen[:5]}")
        for p in seen:
            self.assertEqual((p["op"], p["unit"]), ("suspend", "bytes"))
        total = ups[0]["total"]
        self.assertGreater(total, BIG_MIB << 20)
        self.assertEqual([p["done"] for p in ups], sorted(p["done"] for p in ups))
        self.assertTrue(all(p["total"] == total and p["done"] <= total for p in ups))
        # an upload that lasted three of the CLI's polls (200 ms) was drawn part way
        span = ups[-1]["at"] - ups[0]["at"]
        print(f"upload seen by GET for {span:.2f} s")
        if span >= 0.6:
            self.assertTrue(any(0 < p < 100 for p in pcts), f"no partial fraction: {pcts}")

        rc, out = self.on_pty("restore", sid)
        self.assertEqual(rc, 0, out)
        pcts = self.assert_bar(out, "restore")
        print(f"restore: bars at {pcts}")
        # its total from the start: the suspended bytes, read before the call
        self.assertEqual(pcts[0], 0, pcts)
        self.assertEqual(self.api.call("GET", f"/v1/sandboxes/{sid}")["state"], "running")

        # no terminal: plain lines only; then `resume` of a suspended
        # sandbox restores it, with the same bar
        rc, o, e = self.no_tty("suspend", sid)
        self.assertEqual(rc, 0, e)
        self.assert_plain(o, e)
        self.assertNotIn(b"%", e)
        rc, out = self.on_pty("resume", sid)
        self.assertEqual(rc, 0, out)
        pcts = self.assert_bar(out, "resume")
        print(f"resume of a suspended sandbox: bars at {pcts}")
        self.assertEqual(pcts[0], 0, pcts)
        code, out, _, _ = self.api.exec(sid, ["sh", "-c", "wc -c < /work/big"])
        self.assertEqual(int(out), BIG_MIB << 20)
        # its pool space goes now: less for btrfs to clean up at shutdown
        self.api.delete(sid)
        self.sids.remove(sid)

        # `restore` without a terminal (a small sandbox)
        sid = self.make()
        rc, o, e = self.no_tty("suspend", sid)
        self.assertEqual(rc, 0, e)
        rc, o, e = self.no_tty("restore", sid)
        self.assertEqual(rc, 0, e)
        self.assert_plain(o, e)
        self.assertNotIn(b"%", e)

    def test_fork_count_shows_children(self):
        sid = self.make()
        rc, out = self.on_pty("fork", sid, "--count", "6")
        self.assertEqual(rc, 0, out)
        kids = re.findall(rb"\b(sb-[0-9a-z-]+)\b", out.split(b"100%")[-1])
        self.sids += [k.decode() for k in kids]
        pcts = self.assert_bar(out, "fork")
        print(f"fork --count 6: bars at {pcts}")
        self.assertEqual(pcts[0], 0)
        self.assertIn(b"6/6 sandboxes", out)
        self.assertEqual(len(set(kids)), 6, out)

        rc, o, e = self.no_tty("fork", sid, "--count", "2")
        self.assertEqual(rc, 0, e)
        self.sids += o.decode().split()
        self.assertEqual(len(o.decode().split()), 2, o)
        self.assert_plain(o, e)

    def test_template_build_shows_steps(self):
        src = tempfile.mkdtemp(prefix="airlock-progress-tree-")
        try:
            os.chmod(src, 0o755)
            os.makedirs(os.path.join(src, "etc"))
            with open(os.path.join(src, "etc", "hello"), "w") as f:
                f.write("hi\n")
            rc, out = self.on_pty("template", "build", "progress-t", "--from-dir", src)
            self.assertEqual(rc, 0, out)
            pcts = self.assert_bar(out, "build")
            print(f"template build --from-dir: bars at {pcts}")
            self.assertIn(b"steps", out)
            self.assertGreaterEqual(len(set(pcts)), 3, pcts)   # 0, a step between, 100

            rc, o, e = self.no_tty("template", "build", "progress-u", "--from-dir", src)
            self.assertEqual(rc, 0, e)
            self.assert_plain(o, e)
            self.assertIn(b"template-build: step 1/", o)
        finally:
            subprocess.run(["rm", "-rf", src])
            for name in ("progress-t", "progress-u"):
                try:
                    self.api.call("DELETE", f"/v1/templates/{name}", expect=(200, 204, 404))
                except ApiError:
                    pass

    def test_oci_build_shows_layers(self):
        tmp = tempfile.mkdtemp(prefix="airlock-progress-oci-")
        try:
            os.chmod(tmp, 0o755)
            src = os.path.join(tmp, "image.tar")
            layers = [oi.layer_tar([oi.d("etc"), oi.entry(f"etc/l{i}", os.urandom(1 << 20))])
                      for i in range(3)]
            oi.docker_save(src, layers, oi.config_blob(cmd=["/bin/sh"]))
            events = list(self.api.stream("POST", "/v1/templates",
                                          {"name": "progress-o", "from_oci": src}))
            self.assertEqual(events[-1]["event"], "done", events[-5:])
            got = [(e["layer"], e["layers"]) for e in events if "layer" in e]
            self.assertEqual(got, [(1, 3), (2, 3), (3, 3)], events)
            steps = [(e["step"], e["steps"]) for e in events if "step" in e]
            self.assertEqual([s for s, _ in steps], list(range(1, len(steps) + 1)), steps)

            rc, out = self.on_pty("template", "build", "progress-p", "--from-oci", src)
            self.assertEqual(rc, 0, out)
            pcts = self.assert_bar(out, "oci build")
            print(f"template build --from-oci (3 layers): bars at {pcts}")
            self.assertIn(b"layer 3/3", out)
        finally:
            subprocess.run(["rm", "-rf", tmp])
            for name in ("progress-o", "progress-p"):
                try:
                    self.api.call("DELETE", f"/v1/templates/{name}", expect=(200, 204, 404))
                except ApiError:
                    pass


if __name__ == "__main__":
    main()
