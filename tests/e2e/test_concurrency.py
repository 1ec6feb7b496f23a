"""50 sandboxes created concurrently all work, and all clean up."""
from concurrent.futures import ThreadPoolExecutor

from harness import AirlockTestCase, main


class ConcurrencyTest(AirlockTestCase):
    def test_fifty_concurrent(self):
        before = len(self.subvolumes())

        def one(i):
            s = self.api.create(template="busybox")
            code, out, _, _ = self.api.exec(s["id"], ["sh", "-c", f"echo {i} > /work/n; cat /work/n"])
            return s["id"], code, out

        with ThreadPoolExecutor(max_workers=16) as ex:
            results = list(ex.map(one, range(50)))
        ids = [r[0] for r in results]
        self.assertEqual(len(set(ids)), 50)
        for i, (_, code, out) in enumerate(results):
            self.assertEqual(code, 0)
            self.assertEqual(out, f"{i}\n".encode())
        listed = {s["id"] for s in self.api.call("GET", "/v1/sandboxes")["sandboxes"]}
        self.assertTrue(set(ids) <= listed)
        with ThreadPoolExecutor(max_workers=16) as ex:
            list(ex.map(self.api.delete, ids))
        self.assertEqual(len(self.subvolumes()), before)
        cg = self.cgroups()
        for sid in ids:
            self.assertFalse(any(sid in c for c in cg), sid)


if __name__ == "__main__":
    main()
