// src/generated/api.ts is what `npm run generate` makes of
// openapi/openapi.yaml: edit the spec, then run it.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..", "..");

/** The arguments of package.json's generate script after the command name. */
async function generateArgs(): Promise<string[]> {
  const pkg = JSON.parse(await readFile(path.join(root, "package.json"), "utf8")) as { scripts: Record<string, string> };
  const words = pkg.scripts.generate!.split(/\s+/);
  assert.equal(words[0], "openapi-typescript", "the generate script runs openapi-typescript");
  return words.slice(1);
}

test("src/generated/api.ts is generated from openapi/openapi.yaml", async () => {
  const args = await generateArgs();
  const out = args.indexOf("--output");
  assert.ok(out > 0 && out + 1 < args.length, "the generate script names its --output");
  const committed = args[out + 1]!;
  const dir = await mkdtemp(path.join(tmpdir(), "idemgate-sdk-"));
  try {
    const fresh = path.join(dir, "api.ts");
    args[out + 1] = fresh;
    const cli = path.join(root, "node_modules", "openapi-typescript", "bin", "cli.js");
    await promisify(execFile)(process.execPath, [cli, ...args], { cwd: root });
    const want = await readFile(fresh, "utf8");
    const got = await readFile(path.join(root, committed), "utf8");
    assert.ok(got === want, `${committed} is stale: run npm run generate`);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});
