// Runs the idemgate binary for the tests against a real gateway.
import { type ChildProcess, execFile, spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..", "..");

/** IDEMGATE_BIN, or bin/idemgate at the repository root. */
export const idemgateBin = path.resolve(root, process.env.IDEMGATE_BIN ?? "../../bin/idemgate");

/** A reason to skip, or false when the binary is there. */
export const skipWithoutBinary: string | false = existsSync(idemgateBin)
  ? false
  : `${idemgateBin} not found: build it with \`go build -o bin/idemgate ./cmd/idemgate\` at the repository root, or set IDEMGATE_BIN`;

const running = new Set<ChildProcess>();
process.on("exit", () => {
  for (const child of running) child.kill("SIGKILL");
});

/** The environment for a child: ours, less the URLs idemgate reads in place of its config's. */
export function childEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  const env = { ...process.env };
  delete env.DATABASE_URL;
  delete env.REDIS_URL;
  return { ...env, ...extra };
}

export interface Running {
  /** The address of the listener the ready line named, as http://host:port. */
  url: string;
  output: () => string;
  stop: () => Promise<void>;
}

/**
 * Starts `idemgate ARGS` and resolves once a stdout line matches ready
 * (its first group is the address).
 */
export async function start(args: string[], ready: RegExp, env: NodeJS.ProcessEnv = childEnv()): Promise<Running> {
  const child = spawn(idemgateBin, args, { env, stdio: ["ignore", "pipe", "pipe"] });
  running.add(child);
  let output = "";
  const keep = (b: Buffer): void => {
    output = (output + b.toString()).slice(-20_000);
  };
  child.stderr!.on("data", keep);
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  const stop = async (): Promise<void> => {
    if (child.exitCode === null && child.signalCode === null) {
      child.kill("SIGTERM");
      const timer = setTimeout(() => child.kill("SIGKILL"), 20_000);
      await exited;
      clearTimeout(timer);
    }
    running.delete(child);
  };
  try {
    const url = await new Promise<string>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`idemgate ${args.join(" ")}: not ready after 60 s`)), 60_000);
      createInterface({ input: child.stdout! }).on("line", (line) => {
        keep(Buffer.from(line + "\n"));
        const m = ready.exec(line);
        if (m) {
          clearTimeout(timer);
          resolve(m[1]!);
        }
      });
      child.once("exit", (code, signal) => {
        clearTimeout(timer);
        reject(new Error(`idemgate ${args.join(" ")} exited (${code ?? signal}) before it was ready:\n${output}`));
      });
    });
    return { url, output: () => output, stop };
  } catch (err) {
    await stop();
    throw err;
  }
}

/** Runs `idemgate ARGS` to its end; rejects unless it exits 0. */
export function run(args: string[], env: NodeJS.ProcessEnv = childEnv()): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile(idemgateBin, args, { env, timeout: 120_000 }, (err, stdout, stderr) => {
      if (err) reject(new Error(`idemgate ${args.join(" ")}: ${err.message}\n${stdout}${stderr}`));
      else resolve(stdout + stderr);
    });
  });
}

/** A temporary directory holding file name with text; remove() deletes it. */
export async function tempFile(name: string, text: string): Promise<{ file: string; remove: () => Promise<void> }> {
  const dir = await mkdtemp(path.join(tmpdir(), "idemgate-sdk-"));
  const file = path.join(dir, name);
  await writeFile(file, text, { mode: 0o600 });
  return { file, remove: () => rm(dir, { recursive: true, force: true }) };
}

// A listener's ready line: "idemgate: NAME listening on URL" (log.format text) or
// {…,"msg":"listening","listener":NAME,"url":URL} (json, the default).
export const publicReady = /^(?:idemgate: public listening on |\{.*"msg":"listening","listener":"public","url":")(https?:\/\/[^\s"]+)/;
export const workerReady = /^(?:idemgate: worker-admin listening on |\{.*"msg":"listening","listener":"worker-admin","url":")(https?:\/\/[^\s"]+)/;
