// The declarations in dist/ type-check a consumer's code (test/consumer):
// overloads (run's background handle, read's bytes), iterators, errors.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { fileURLToPath } from "node:url";
import path from "node:path";

const here = path.dirname(fileURLToPath(import.meta.url));
const tsc = path.join(here, "..", "node_modules", "typescript", "bin", "tsc");

test("a consumer's TypeScript compiles against dist/*.d.ts", () => {
  assert.ok(existsSync(tsc), "typescript is installed (setup.sh)");
  const r = spawnSync(process.execPath, [tsc, "-p", path.join(here, "consumer", "tsconfig.json")], { encoding: "utf8" });
  assert.equal(r.status, 0, r.stdout + r.stderr);
});
