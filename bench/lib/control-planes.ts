import { spawn, type ChildProcess } from "node:child_process";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import type { BatcherOptions } from "../../src/broker/leases/batcher.js";
import { readOrCreateSecretsKeyFile } from "../../src/secrets/key-file.js";
import { startControlPlane, type ControlPlane } from "../../src/server/control-plane.js";
import { benchAdminId, type BenchPki } from "./pki.js";

const repoRoot = fileURLToPath(new URL("../..", import.meta.url));

/** Control planes under test, all on one database. */
export interface Planes {
  readonly urls: readonly string[];
  /** OS processes serving (this process for the in-process plane). */
  readonly pids: readonly number[];
  /** The in-process plane, when there is one. */
  readonly inProcess: ControlPlane | undefined;
  close(): Promise<void>;
}

/** How to start the planes. */
export interface PlanesOptions {
  readonly pki: BenchPki;
  readonly database: string;
  /** "in-process": startControlPlane here; "processes": `node bin/forelead.js serve` children. */
  readonly mode: "in-process" | "processes";
  /** How many; more than one needs a postgres:// database. */
  readonly count: number;
  /**
   * In-process only: the broker's batching instead of its default (to measure what batching buys).
   */
  readonly batching?: BatcherOptions;
  /** In-process only: lease duration instead of 30 s (a scenario that holds leases for minutes). */
  readonly leaseSeconds?: number;
  /** In-process only: false turns the direct handoff off (to measure what it buys). */
  readonly handoff?: boolean;
  /** Processes only: more flags of `forelead serve` (e.g. --webhook-allow-private). */
  readonly serveArgs?: readonly string[];
}

/**
 * Starts `count` control planes on loopback ports (one after the other, so migrations do not race).
 */
export async function startPlanes(options: PlanesOptions): Promise<Planes> {
  // One secrets key beside the PKI, shared by every plane on the database (required on
  // postgres://).
  const secretsKeyFile = join(dirname(options.pki.files.ca), "secrets.key");
  const { key } = await readOrCreateSecretsKeyFile(secretsKeyFile);
  if (options.mode === "in-process") {
    if (options.count !== 1) throw new Error("only one control plane runs in-process");
    const plane = await startControlPlane({
      host: "127.0.0.1",
      port: 0,
      tlsCertPem: options.pki.server.certPem,
      tlsKeyPem: options.pki.server.keyPem,
      clientCaPem: options.pki.ca.certPem,
      trustDomain: "forelead",
      database: options.database,
      admins: [benchAdminId],
      leaseSeconds: options.leaseSeconds ?? 30,
      maxCertLifetimeMs: 24 * 3600 * 1000,
      secretsKeys: { current: key },
      batching: options.batching,
      handoff: options.handoff,
    });
    return { urls: [plane.url], pids: [process.pid], inProcess: plane, close: () => plane.close() };
  }
  const children: Served[] = [];
  try {
    for (let i = 0; i < options.count; i++) children.push(await serve(options, secretsKeyFile));
  } catch (err) {
    await Promise.all(children.map((c) => stop(c.child)));
    throw err;
  }
  return {
    urls: children.map((c) => c.url),
    pids: children.map((c) => c.child.pid!),
    inProcess: undefined,
    close: async () => void (await Promise.all(children.map((c) => stop(c.child)))),
  };
}

interface Served {
  readonly child: ChildProcess;
  readonly url: string;
}

/**
 * Every benchmark client connects from 127.0.0.1: the per-address bound (256 by default, a guard
 * against one host holding the server's sockets) would refuse the connections scenario's
 * thousands of idle runners as it refused them from one real address.
 */
const loopbackClients = ["--max-connections-per-address", "1000000"];

async function serve(options: PlanesOptions, secretsKeyFile: string): Promise<Served> {
  const { files } = options.pki;
  const args = [
    "bin/forelead.js",
    "serve",
    "--listen",
    "127.0.0.1:0",
    "--metrics-listen",
    "127.0.0.1:0",
    "--tls-cert",
    files.cert,
    "--tls-key",
    files.key,
    "--client-ca",
    files.ca,
    "--database",
    options.database,
    "--secrets-key",
    secretsKeyFile,
    "--admin",
    benchAdminId,
    ...loopbackClients,
    ...(options.serveArgs ?? []),
  ];
  // BENCH_CPU_PROF_DIR=dir: each serve process writes a V8 CPU profile there when it exits
  // (docs/performance.md).
  const profile = process.env.BENCH_CPU_PROF_DIR
    ? ["--cpu-prof", `--cpu-prof-dir=${process.env.BENCH_CPU_PROF_DIR}`]
    : [];
  const child = spawn(process.execPath, [...profile, ...args], {
    cwd: repoRoot,
    stdio: ["ignore", "pipe", "pipe"],
  });
  let out = "";
  child.stdout!.setEncoding("utf8").on("data", (c: string) => (out += c));
  child
    .stderr!.setEncoding("utf8")
    .on("data", (c: string) => process.stderr.write(`[serve ${child.pid}] ${c}`));
  const url = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(
      () => reject(new Error(`forelead serve printed no "serving" line within 60 s: ${out}`)),
      60_000,
    );
    child.stdout!.on("data", () => {
      const m = /^forelead: serving (https:\/\/127\.0\.0\.1:\d+) /m.exec(out);
      if (m) {
        clearTimeout(timer);
        resolve(m[1]!);
      }
    });
    child.once("exit", (code) => {
      clearTimeout(timer);
      reject(new Error(`forelead serve exited with code ${code} before serving: ${out}`));
    });
  }).catch(async (err) => {
    await stop(child);
    throw err;
  });
  return { child, url };
}

/** SIGTERM (the CLI closes sessions and the database), SIGKILL after 10 s. */
async function stop(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
  child.kill("SIGTERM");
  const timer = setTimeout(() => child.kill("SIGKILL"), 10_000);
  await exited;
  clearTimeout(timer);
}
