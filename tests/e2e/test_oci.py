"""Templates from images: `POST /v1/templates {"from_oci": PATH}` with a
two-layer image built here by hand (tests/e2e/ociimage.py), as a `docker
save` archive, an OCI layout directory and an OCI layout tar; a sandbox from
it sees the layers applied (a whiteout, an opaque directory, a hardlink, a
long name) and gets the image's Env, WorkingDir, User and Entrypoint+Cmd as
defaults, with the request's own winning. Then the refusals: each a failed
build whose message names the layer and the entry, with nothing left in the
pool and nothing written outside it."""
import gzip
import json
import os
import shutil
import stat
import subprocess
import tarfile
import tempfile

from harness import AirlockTestCase, CLI, main
import ociimage as oi

LONG = "deep/" + "d" * 60 + "/" + "f" * 80 + ".txt"   # over ustar's 100 bytes


def base_layer():
    with open("/bin/busybox", "rb") as f:
        bb = f.read()
    entries = [oi.d("bin"), oi.entry("bin/busybox", bb, mode=0o755)]
    for tool in ("sh", "cat", "ls", "id", "pwd", "echo", "env", "test", "stat"):
        entries.append(oi.sym("bin/" + tool, "busybox"))
    entries += [
        oi.d("etc"),
        oi.entry("etc/passwd", "root:x:0:0:root:/root:/bin/sh\n"
                 "app:x:1000:1000:app:/home/app:/bin/sh\n"),
        oi.entry("etc/group", "root:x:0:\napp:x:1000:\n"),
        oi.d("home"), oi.d("home/app", mode=0o750, uid=1000, gid=1000),
        oi.d("old"), oi.entry("old/keep.txt", "keep\n"), oi.entry("old/gone.txt", "gone\n"),
        oi.entry("old/keep-link", type=tarfile.LNKTYPE, linkname="old/keep.txt"),
        oi.d("opq"), oi.entry("opq/a.txt", "a\n"), oi.d("opq/sub"),
        oi.entry("opq/sub/b.txt", "b\n"),
        oi.entry(LONG, "long\n"),
        oi.entry("bin/setuid-marker", "x", mode=0o4755),
    ]
    return entries


def top_layer():
    return [
        oi.entry("old/.wh.gone.txt", ""),
        oi.d("opq"), oi.entry("opq/.wh..wh..opq", ""), oi.entry("opq/new.txt", "new\n"),
        oi.d("app", uid=1000, gid=1000), oi.entry("app/hello.txt", "hello from the image\n",
                                                  uid=1000, gid=1000),
    ]


CONFIG = oi.config_blob(env=["PATH=/bin", "GREETING=hi there", "ONLY_IMAGE=1"],
                        workdir="/app", user="app", entrypoint=["/bin/cat"], cmd=["hello.txt"])


class OciTest(AirlockTestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.tmp = tempfile.mkdtemp(prefix="airlock-oci-")
        os.chmod(cls.tmp, 0o755)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)
        super().tearDownClass()

    def path(self, name):
        return os.path.join(self.tmp, name)

    def build(self, name, source):
        """The build's events; the last is done or error."""
        return list(self.api.stream("POST", "/v1/templates", {"name": name, "from_oci": source}))

    def assert_built(self, name, source):
        events = self.build(name, source)
        self.assertEqual(events[-1]["event"], "done", events[-5:])
        self.assertTrue(any("applying layer 2" in e.get("line", "") for e in events), events)
        return events

    def assert_refused(self, name, source, *needles):
        events = self.build(name, source)
        last = events[-1]
        self.assertEqual(last["event"], "error", events[-5:])
        for n in needles:
            self.assertIn(n, last["error"]["message"])
        # nothing left in the pool, and no ready version
        self.assertFalse(os.path.exists(os.path.join(self.server.dir, "pool", "templates", name)))
        rows = [t for t in self.api.call("GET", "/v1/templates")["templates"]
                if t["name"] == name]
        self.assertTrue(rows and all(t["status"] == "failed" for t in rows), rows)
        return last["error"]["message"]

    def check_layers(self, sid):
        def run(cmd, **kw):
            code, out, err, _ = self.api.exec(sid, cmd, **kw)
            self.assertEqual(code, 0, (cmd, err))
            return out.decode()
        self.assertEqual(run(["cat", "/app/hello.txt"]), "hello from the image\n")
        self.assertEqual(run(["cat", "/old/keep.txt"]), "keep\n")
        # the whiteout removed the lower layer's file
        self.assertEqual(run(["sh", "-c", "test -e /old/gone.txt; echo $?"]), "1\n")
        # the opaque directory holds only the upper layer's entries
        self.assertEqual(run(["ls", "-A", "/opq"]).split(), ["new.txt"])
        # a hardlink is one inode with its target; a pax/GNU long name
        self.assertEqual(run(["stat", "-c", "%h", "/old/keep-link"]), "2\n")
        self.assertEqual(run(["cat", "/" + LONG]), "long\n")
        # owners and modes as the image says
        self.assertEqual(run(["stat", "-c", "%u:%g %a", "/app/hello.txt"]), "1000:1000 644\n")
        self.assertEqual(run(["stat", "-c", "%a", "/bin/setuid-marker"]), "4755\n")

    def test_docker_save(self):
        src = self.path("docker.tar")
        oi.docker_save(src, [oi.layer_tar(base_layer()), oi.layer_tar(top_layer())], CONFIG)
        events = self.assert_built("img-docker", src)
        want = {"env": {"PATH": "/bin", "GREETING": "hi there", "ONLY_IMAGE": "1"},
                "workdir": "/app", "user": "app", "entrypoint": ["/bin/cat"], "cmd": ["hello.txt"]}
        self.assertEqual(events[-1]["template"]["image"], want)
        listed = [t for t in self.api.call("GET", "/v1/templates")["templates"]
                  if t["name"] == "img-docker"]
        self.assertEqual(listed[0]["image"], want)
        self.assertNotIn("image", [t for t in self.api.call("GET", "/v1/templates")["templates"]
                                   if t["name"] == "busybox"][0])
        s = self.api.create(template="img-docker", env={"GREETING": "from the request"})
        try:
            self.check_layers(s["id"])
            # the image's defaults: Env (the request's wins), WorkingDir, User
            code, out, _, _ = self.api.exec(
                s["id"], ["sh", "-c", 'echo "$GREETING|$ONLY_IMAGE|$(pwd)|$(id -u)"'])
            self.assertEqual(out, b"from the request|1|/app|1000\n")
            # the exec's own cwd, user and env win
            code, out, _, _ = self.api.exec(
                s["id"], ["sh", "-c", 'echo "$GREETING|$(pwd)|$(id -u)"'], cwd="/", user="root",
                env={"GREETING": "from exec"})
            self.assertEqual(out, b"from exec|/|0\n")
            code, out, _, _ = self.api.exec(s["id"], ["id", "-u"], uid=4242)
            self.assertEqual(out, b"4242\n")
            # no cmd: Entrypoint + Cmd, in WorkingDir, as User
            code, out, _, _ = self.api.exec(s["id"], None)
            self.assertEqual((code, out), (0, b"hello from the image\n"))
            # and the CLI: `airlock exec SBX` with no command
            r = subprocess.run([CLI, "--config", os.path.join(self.server.dir, "cli.json"),
                                "exec", s["id"]], capture_output=True, timeout=120)
            self.assertEqual((r.returncode, r.stdout), (0, b"hello from the image\n"), r.stderr)
            # a fork keeps them
            kids = self.api.call("POST", f"/v1/sandboxes/{s['id']}/fork", {})["sandboxes"]
            try:
                code, out, _, _ = self.api.exec(kids[0]["id"], None)
                self.assertEqual(out, b"hello from the image\n")
            finally:
                for k in kids:
                    self.api.delete(k["id"])
        finally:
            self.api.delete(s["id"])
        # a template without an image has no default command
        s = self.api.create(template="busybox")
        try:
            status, body, _ = self.api.raw("POST", f"/v1/sandboxes/{s['id']}/exec", {})
            self.assertEqual(status, 400, body)
        finally:
            self.api.delete(s["id"])

    def test_defaults_survive_a_node_restart(self):
        # kept in the sandbox's row (spec "image"), not only in memory
        src = self.path("restart.tar")
        oi.docker_save(src, [oi.layer_tar(base_layer()), oi.layer_tar(top_layer())], CONFIG)
        self.assert_built("img-restart", src)
        s = self.api.create(template="img-restart")
        try:
            self.kill_and_wait_restarted("node")
            code, out, _, _ = self.api.exec(s["id"], None)
            self.assertEqual((code, out), (0, b"hello from the image\n"))
            code, out, _, _ = self.api.exec(s["id"], ["sh", "-c", 'echo "$GREETING|$(pwd)"'])
            self.assertEqual(out, b"hi there|/app\n")
        finally:
            self.api.delete(s["id"])

    def test_docker_save_linked_layer(self):
        # older docker links a layer it already wrote: X/layer.tar -> ../Y/layer.tar
        empty = oi.layer_tar([])
        layers = [oi.layer_tar(base_layer()), empty, oi.layer_tar(top_layer()), empty]
        first_empty = f"{__import__('hashlib').sha256(empty).hexdigest()[:12]}1/layer.tar"
        oi.docker_save(self.path("linked.tar"), layers, CONFIG,
                       links={3: "../" + first_empty})
        self.assert_built("img-linked", self.path("linked.tar"))
        s = self.api.create(template="img-linked")
        try:
            self.check_layers(s["id"])
        finally:
            self.api.delete(s["id"])
        # a link member that leaves the archive names nothing
        oi.docker_save(self.path("linked-out.tar"), layers, CONFIG,
                       links={3: "../../../etc/passwd"})
        self.assert_refused("bad-linked", self.path("linked-out.tar"), "layer 4",
                            "not in the archive")

    def test_oci_layout_dir_and_tar(self):
        # numeric User "uid:gid", and a Cmd without an Entrypoint
        config = oi.config_blob(env=["PATH=/bin"], workdir="/opq", user="1234:5678",
                                cmd=["cat", "new.txt"])
        files = oi.oci_layout([oi.layer_tar(base_layer(), fmt=tarfile.GNU_FORMAT),
                               oi.layer_tar(top_layer(), fmt=tarfile.GNU_FORMAT)], config)
        layout = self.path("layout")
        oi.write_layout_dir(layout, files)
        oi.write_layout_tar(self.path("layout.tar"), files)
        for name, src in (("img-ocidir", layout), ("img-ocitar", self.path("layout.tar"))):
            self.assert_built(name, src)
            s = self.api.create(template=name)
            try:
                self.check_layers(s["id"])
                code, out, _, _ = self.api.exec(s["id"], None)
                self.assertEqual((code, out), (0, b"new\n"))
                code, out, _, _ = self.api.exec(s["id"], ["sh", "-c", "id -u; id -g; pwd"])
                self.assertEqual(out, b"1234\n5678\n/opq\n")
            finally:
                self.api.delete(s["id"])

    def test_refusals(self):
        outside = tempfile.mkdtemp(prefix="airlock-oci-outside-")
        try:
            cases = [
                ("bad-traversal", [[oi.entry("../../etc/x", "x")]],
                 ["layer 1", "../../etc/x", "leaves the root"]),
                ("bad-abslink", [[oi.d("a"), oi.sym("a/evil", outside)],
                                 [oi.entry("a/evil/planted", "x")]],
                 ["layer 2", "a/evil/planted", "goes through a symlink"]),
                ("bad-samelayer", [[oi.sym("evil", outside), oi.entry("evil/planted", "x")]],
                 ["layer 1", "evil/planted", "symlink"]),
                ("bad-hardlink", [[oi.entry("h", type=tarfile.LNKTYPE,
                                            linkname="../../../etc/passwd")]],
                 ["layer 1", "`h`", "outside the tree"]),
                ("bad-device", [[oi.entry("null", type=tarfile.CHRTYPE, devmajor=1, devminor=3)]],
                 ["layer 1", "`null`", "device node"]),
            ]
            for name, layers, needles in cases:
                with self.subTest(name):
                    src = self.path(name + ".tar")
                    oi.docker_save(src, [oi.layer_tar(l) for l in layers], oi.config_blob())
                    self.assert_refused(name, src, *needles)
            self.assertEqual(os.listdir(outside), [])
        finally:
            shutil.rmtree(outside)
        self.assertFalse(os.path.exists("/etc/x"))
        # a layer cut short, and an archive cut short
        layer = oi.layer_tar([oi.entry("big", "x" * 5000)])
        oi.docker_save(self.path("trunc.tar"), [layer[:3000]], oi.config_blob())
        self.assert_refused("bad-truncated", self.path("trunc.tar"), "layer 1", "truncated tar")
        oi.docker_save(self.path("outer.tar"), [oi.layer_tar([oi.entry("a", "a" * 3000)])],
                       oi.config_blob(), truncate_outer=4000)
        self.assert_refused("bad-outer", self.path("outer.tar"), "truncated")
        # a manifest naming a layer the archive does not have
        oi.docker_save(self.path("missing.tar"), [oi.layer_tar([oi.entry("a", "a")])],
                       oi.config_blob(), extra_layer_names=["nope/layer.tar"])
        self.assert_refused("bad-missing", self.path("missing.tar"), "layer 2",
                            "nope/layer.tar", "not in the archive")
        # a layout blob whose content is not what its digest says
        files = oi.oci_layout([oi.layer_tar([oi.entry("a", "a")]), oi.layer_tar([oi.entry("b", "b")])],
                              oi.config_blob())
        layer2 = json.loads(files[next(k for k, v in files.items()
                                        if b'"layers": [' in v)])["layers"][1]["digest"]
        name = "blobs/sha256/" + layer2.split(":")[1]
        files[name] = gzip.compress(oi.layer_tar([oi.entry("b", "tampered")]), mtime=0)
        oi.write_layout_tar(self.path("tampered.tar"), files)
        self.assert_refused("bad-digest", self.path("tampered.tar"), "layer 2", "not the sha256")
        # not an image at all
        with open(self.path("plain.tar"), "wb") as f:
            f.write(oi.layer_tar([oi.entry("hello", "x")]))
        os.chmod(self.path("plain.tar"), 0o644)
        self.assert_refused("bad-plain", self.path("plain.tar"), "manifest.json", "index.json")

    def test_finishing_touches_stay_inside(self):
        # Every rootfs gets /tmp 1777, /etc/hostname and the mount points;
        # with a tree whose /tmp and /etc/hostname are links out of it, they
        # must not land on the host (this used to be shell on "$OUT/tmp").
        outside = tempfile.mkdtemp(prefix="airlock-oci-outside-")
        try:
            os.chmod(outside, 0o700)
            layer = [oi.sym("tmp", outside), oi.d("etc"),
                     oi.sym("etc/hostname", os.path.join(outside, "planted")),
                     oi.sym("proc", outside)]
            tar = self.path("finish-rootfs.tar")
            with open(tar, "wb") as f:
                f.write(oi.layer_tar(layer))
            os.chmod(tar, 0o644)
            events = list(self.api.stream("POST", "/v1/templates",
                                          {"name": "finish-tar", "from_tar": tar}))
            self.assertEqual(events[-1]["event"], "done", events[-3:])
            oi.docker_save(self.path("finish.tar"), [oi.layer_tar(layer)], oi.config_blob())
            self.assert_built_one("finish-oci", self.path("finish.tar"))
            self.assertEqual(os.stat(outside).st_mode & 0o7777, 0o700)
            self.assertEqual(os.listdir(outside), [])
            for name in ("finish-tar", "finish-oci"):
                root = os.path.join(self.server.dir, "pool", "templates", name, "1", "rootfs")
                st = os.lstat(os.path.join(root, "tmp"))
                self.assertTrue(stat.S_ISDIR(st.st_mode) and st.st_mode & 0o7777 == 0o1777)
                self.assertTrue(stat.S_ISDIR(os.lstat(os.path.join(root, "proc")).st_mode))
                # the image's own (dangling) hostname link stays as it was
                self.assertTrue(os.path.islink(os.path.join(root, "etc", "hostname")))
        finally:
            shutil.rmtree(outside)

    def assert_built_one(self, name, source):
        events = self.build(name, source)
        self.assertEqual(events[-1]["event"], "done", events[-5:])

    def test_source_read_as_requester(self):
        # root's 0600 file: the node's user cannot read it, so neither can the build
        src = self.path("secret.tar")
        oi.docker_save(src, [oi.layer_tar(top_layer())], CONFIG)
        os.chmod(src, 0o600)
        self.assert_refused("bad-unreadable", src, "cannot read")

    def test_from_image_without_skopeo(self):
        # --from-image copies with skopeo first; without it the CLI says so
        # (no registry is reachable here, so only the absent case is tested)
        env = dict(os.environ, PATH="/nonexistent")
        r = subprocess.run([CLI, "--config", os.path.join(self.server.dir, "cli.json"),
                            "template", "build", "img-pulled", "--from-image",
                            "docker://debian:bookworm-slim"],
                           capture_output=True, timeout=60, env=env)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn(b"needs skopeo", r.stderr)
        names = [t["name"] for t in self.api.call("GET", "/v1/templates")["templates"]]
        self.assertNotIn("img-pulled", names)

    def test_from_image_with_skopeo(self):
        # A stand-in skopeo (no registry here) that "copies" a prepared OCI
        # archive: the CLI's part of --from-image is the same with the real
        # one (copy into a fresh dir, build from it, remove it).
        files = oi.oci_layout([oi.layer_tar(base_layer()), oi.layer_tar(top_layer())], CONFIG)
        oi.write_layout_tar(self.path("pulled.tar"), files)
        bindir = self.path("fakebin")
        os.makedirs(bindir, exist_ok=True)
        calls = self.path("skopeo-calls")
        with open(os.path.join(bindir, "skopeo"), "w") as f:
            f.write("#!/bin/sh\n"
                    f"echo \"$@\" >> {calls}\n"
                    f'[ "$1 $2 $3" = "copy --quiet docker://example.org/app:1" ] || exit 1\n'
                    f'cp {self.path("pulled.tar")} "${{4#oci-archive:}}"\n')
        os.chmod(os.path.join(bindir, "skopeo"), 0o755)
        tmpdir = tempfile.mkdtemp(prefix="airlock-oci-tmp-")
        os.chmod(tmpdir, 0o755)   # as /tmp is: the node reads the copy with its own uid
        try:
            env = dict(os.environ, PATH=bindir + ":" + os.environ["PATH"], TMPDIR=tmpdir)
            r = subprocess.run([CLI, "--config", os.path.join(self.server.dir, "cli.json"),
                                "template", "build", "img-pulled2", "--from-image",
                                "example.org/app:1"], capture_output=True, timeout=300, env=env)
            self.assertEqual(r.returncode, 0, r.stderr)
            with open(calls) as f:
                self.assertIn("docker://example.org/app:1 oci-archive:" + tmpdir, f.read())
            self.assertEqual(os.listdir(tmpdir), [])   # the copy is removed after the build
        finally:
            shutil.rmtree(tmpdir)
        s = self.api.create(template="img-pulled2")
        try:
            code, out, _, _ = self.api.exec(s["id"], None)
            self.assertEqual(out, b"hello from the image\n")
        finally:
            self.api.delete(s["id"])

    def test_bad_requests(self):
        for body in ({"name": "x", "from_oci": "relative/path"},
                     {"name": "x", "from_oci": 3},
                     {"name": "x", "from_oci": "/a", "from_tar": "/b"}):
            status, data, _ = self.api.raw("POST", "/v1/templates", body)
            self.assertEqual(status, 400, (body, data))


if __name__ == "__main__":
    main()
