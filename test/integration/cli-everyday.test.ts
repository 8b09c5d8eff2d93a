// The everyday commands of issue 18 as a person runs them: `bin/forelead.js`
// spawned against a real control plane (certificate files, or a config file
// and FORELEAD_* variables instead of flags), the --json output parsed, the
// effect checked through the routes, a runner agent or another command.
import { execFile, spawn, type ChildProcess } from "node:child_process";
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { adminActor, eventually, registeredRunner, runnerActor } from "../support/actors.js";
import { startTestControlPlane, type TestControlPlane } from "../support/control-plane.js";
import { createTestDatabase, databaseKind } from "../support/database.js";
import { useControlPlane } from "../support/fixture.js";
import type { TestPki } from "../support/pki.js";
import { startTestRunner } from "../support/runner-agent.js";

const run = promisify(execFile);
const forelead = join(process.cwd(), "bin/forelead.js");
/** Each test spawns the command several times, and a start takes seconds on a busy machine. */
const slow = 300_000;

const cp = useControlPlane();
let dir: string;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "forelead-cli-ev-"));
});
afterAll(async () => {
  if (dir) await rm(dir, { recursive: true, force: true });
});

/**
 * The environment of a spawned command: no FORELEAD_* of the caller's, and a home without a config
 * file.
 */
function cleanEnv(extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  // No FORELEAD_* setting of the caller's reaches the command.
  const env = Object.fromEntries(
    Object.entries(process.env).filter(([k]) => !k.startsWith("FORELEAD_")),
  );
  return { ...env, HOME: dir, XDG_CONFIG_HOME: join(dir, "xdg"), ...extra };
}

/** Writes the CA and the test-admin certificate of `pki` under `into`; returns their paths. */
async function certFiles(
  pki: TestPki,
  into = dir,
): Promise<{ ca: string; cert: string; key: string }> {
  const admin = await pki.service("test-admin");
  const files = {
    ca: join(into, "ca.pem"),
    cert: join(into, "admin.pem"),
    key: join(into, "admin-key.pem"),
  };
  await writeFile(files.ca, pki.ca.certPem);
  await writeFile(files.cert, admin.certPem);
  await writeFile(files.key, admin.keyPem, { mode: 0o600 });
  return files;
}

async function certFlags(pki: TestPki, url: string): Promise<string[]> {
  const f = await certFiles(pki);
  return ["--server", url, "--ca", f.ca, "--cert", f.cert, "--key", f.key];
}

interface Ran {
  code: number;
  stdout: string;
  stderr: string;
}

/**
 * Runs `forelead ...args` (no connection flags added) to completion; never throws, so refusals and
 * exit codes can be asserted.
 */
async function bare(
  args: string[],
  options: { cwd?: string; env?: Record<string, string> } = {},
): Promise<Ran> {
  try {
    const { stdout, stderr } = await run(process.execPath, [forelead, ...args], {
      cwd: options.cwd ?? dir,
      env: cleanEnv(options.env),
      timeout: 60_000,
    });
    return { code: 0, stdout, stderr };
  } catch (err) {
    const e = err as { code?: number; stdout?: string; stderr?: string };
    return {
      code: typeof e.code === "number" ? e.code : -1,
      stdout: e.stdout ?? "",
      stderr: e.stderr ?? "",
    };
  }
}

/** Runs `forelead ...args` with the test admin's certificate flags for the file's control plane. */
async function forel(...args: string[]): Promise<Ran> {
  const flags = await certFlags(cp.pki, cp.url);
  const dash = args.indexOf("--");
  return bare(
    dash < 0 ? [...args, ...flags] : [...args.slice(0, dash), ...flags, ...args.slice(dash)],
  );
}

/** Runs `forelead ...args --json`, expects exit 0 and returns its lines parsed. */
async function json<T = Record<string, unknown>>(...args: string[]): Promise<T[]> {
  const dash = args.indexOf("--");
  const out = await forel(
    ...(dash < 0 ? [...args, "--json"] : [...args.slice(0, dash), "--json", ...args.slice(dash)]),
  );
  expect(out.code, out.stderr).toBe(0);
  return out.stdout
    .split("\n")
    .filter(Boolean)
    .map((l) => JSON.parse(l) as T);
}

interface JobJson {
  id: string;
  state: string;
  workspaceId: string;
  labels?: string[];
  priority?: number;
  maxAttempts?: number;
  exitCode?: number;
  idempotencyKey?: string;
  cancelRequested?: boolean;
  secretNames?: string[];
  secretFileNames?: string[];
  spec?: { image?: string; argv?: string[]; env?: Record<string, string>; timeoutSeconds?: number };
}

async function stop(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise((resolve) => child.once("exit", resolve));
  child.kill("SIGTERM");
  await exited;
}

describe(`forelead everyday commands (${databaseKind})`, { timeout: slow }, () => {
  it(
    "jobs enqueue takes the job's fields, argv after --, env and secrets " +
      "from files (never printed); get, list, cancel read and settle it",
    async () => {
      await writeFile(
        join(dir, "secrets.env"),
        "# deploy credentials\nAPI_TOKEN=s3cret-token-value\n\nOTHER=x=y\n",
      );
      await writeFile(join(dir, "kubeconfig"), "kube-secret-content\n");
      const args = [
        "jobs",
        "enqueue",
        "--workspace",
        "ev-w1",
        "--label",
        "linux",
        "--label",
        "gpu",
        "--image",
        "app:1",
        "--env",
        "MODE=ci",
        "--secrets-file",
        join(dir, "secrets.env"),
      ];
      args.push(
        "--secret-file",
        `kubeconfig=${join(dir, "kubeconfig")}`,
        "--timeout",
        "10m",
        "--priority",
        "7",
        "--max-attempts",
        "2",
        "--idempotency-key",
        "ev-key-1",
      );
      const argv = ["--", "make", "test", "--verbose"];
      const enqueued = await forel(...args, "--json", ...argv);
      expect(enqueued.code, enqueued.stderr).toBe(0);
      expect(enqueued.stdout + enqueued.stderr).not.toMatch(
        /s3cret-token-value|kube-secret-content/,
      );
      const [reply] = enqueued.stdout
        .split("\n")
        .filter(Boolean)
        .map((l) => JSON.parse(l) as { job: JobJson });
      const job = reply!.job;
      expect(job).toMatchObject({
        state: "queued",
        workspaceId: "ev-w1",
        labels: ["gpu", "linux"],
        priority: 7,
        maxAttempts: 2,
        idempotencyKey: "ev-key-1",
        secretNames: ["API_TOKEN", "OTHER"],
        secretFileNames: ["kubeconfig"],
        spec: {
          image: "app:1",
          argv: ["make", "test", "--verbose"],
          env: { MODE: "ci" },
          timeoutSeconds: 600,
        },
      });
      // The same idempotency key returns the same job; text output names it.
      const again = await forel(...args, ...argv);
      expect(again.code, again.stderr).toBe(0);
      expect(again.stdout).toMatch(new RegExp(`^job ${job.id} queued in workspace ev-w1`));

      const [got] = await json<{ job: JobJson }>("jobs", "get", job.id);
      expect(got!.job).toMatchObject({
        id: job.id,
        state: "queued",
        secretNames: ["API_TOKEN", "OTHER"],
      });
      const text = await forel("jobs", "get", job.id);
      expect(text.stdout).toMatch(new RegExp(`^job: +${job.id}$`, "m"));
      expect(text.stdout).toMatch(/^argv: +\["make","test","--verbose"\]$/m);
      expect(text.stdout).toMatch(/^secrets: +API_TOKEN, OTHER, file kubeconfig$/m);
      expect(text.stdout).not.toMatch(/s3cret|kube-secret/);

      const [cancelled] = await json<{ job: JobJson }>("jobs", "cancel", job.id);
      expect(cancelled!.job).toMatchObject({ id: job.id, state: "cancelled" });
      expect((await forel("jobs", "cancel", job.id)).stdout).toBe(`job ${job.id} cancelled\n`);
      const [listed] = await json<{ jobs: JobJson[] }>("jobs", "list", "--workspace", "ev-w1");
      expect(listed!.jobs.map((j) => [j.id, j.state])).toEqual([[job.id, "cancelled"]]);

      const bad = await forel(
        "jobs",
        "enqueue",
        "--workspace",
        "ev-w1",
        "--env",
        "=nokey",
        "--",
        "true",
      );
      expect(bad.code).toBe(1);
      expect(bad.stderr).toMatch(/--env takes KEY=VALUE/);
      await writeFile(
        join(dir, "bad.env"),
        "GOOD=1\nthis line has the secret hunter2 but no equals\n",
      );
      const badSecrets = await forel(
        "jobs",
        "enqueue",
        "--workspace",
        "ev-w1",
        "--secrets-file",
        join(dir, "bad.env"),
        "--",
        "true",
      );
      expect(badSecrets.code).toBe(1);
      expect(badSecrets.stderr).toMatch(/--secrets-file .*bad\.env line 2: not KEY=VALUE/);
      expect(badSecrets.stderr).not.toMatch(/hunter2/);
      const missing = await forel("jobs", "get", "00000000-0000-7000-8000-000000000000");
      expect(missing.code).toBe(1);
      expect(missing.stderr).toMatch(/^forelead: error: .*not.found/i);
    },
  );

  it(
    "jobs enqueue --wait prints the log live and exits with the job's exit " +
      "code; jobs logs and jobs events read it afterwards",
    async () => {
      const runner = await startTestRunner(cp, {
        runnerId: "ev-r2",
        workspaceId: "ev-w2",
        executor: "process",
      });
      try {
        const failed = await forel(
          "jobs",
          "enqueue",
          "--workspace",
          "ev-w2",
          "--label",
          "linux",
          "--image",
          "busybox",
          "--timeout",
          "60s",
          "--wait",
          "--",
          "sh",
          "-c",
          "echo first line; echo second line >&2; exit 3",
        );
        expect(failed.code, failed.stderr).toBe(3);
        expect(failed.stdout).toBe("first line\nsecond line\n");
        expect(failed.stderr).toMatch(/forelead: job (\S+) failed with exit code 3/);
        // Queued, or running already when the runner was waiting for it (the direct handoff names
        // it).
        const jobId =
          /forelead: job (\S+) (?:queued|running on runner ev-r2) in workspace ev-w2/.exec(
            failed.stderr,
          )![1]!;

        const ok = await forel(
          "jobs",
          "enqueue",
          "--workspace",
          "ev-w2",
          "--label",
          "linux",
          "--image",
          "busybox",
          "--wait",
          "--json",
          "--",
          "sh",
          "-c",
          "echo all good",
        );
        expect(ok.code, ok.stderr).toBe(0);
        const [settled] = ok.stdout
          .split("\n")
          .filter(Boolean)
          .map((l) => JSON.parse(l) as { job: JobJson });
        expect(settled!.job).toMatchObject({ state: "succeeded", exitCode: 0 });
        // with --json the log goes to stderr, stdout holds the settled job
        expect(ok.stderr).toContain("all good\n");

        const logs = await forel("jobs", "logs", jobId);
        expect(logs.code, logs.stderr).toBe(0);
        expect(logs.stdout).toBe("first line\nsecond line\n");
        const entries = await json<{
          sequence: string;
          attempt: number;
          position: string;
          data: { stream: string; text: string };
        }>("jobs", "logs", jobId);
        expect(entries.map((e) => [e.attempt, e.data.stream, e.data.text])).toEqual([
          [1, "stdout", "first line"],
          [1, "stderr", "second line"],
        ]);
        const events = await json<{ data: { type: string } }>("jobs", "events", jobId);
        expect(events.length).toBeGreaterThan(0);
        expect(events.every((e) => typeof e.data.type === "string")).toBe(true);
        // a settled job: everything, then done
        const followed = await forel("jobs", "logs", jobId, "--follow");
        expect(followed.stdout).toBe("first line\nsecond line\n");
      } finally {
        await runner.close();
      }
    },
  );

  it("jobs enqueue --wait on a job cancelled while it waits exits 130", async () => {
    const waiter = spawn(
      process.execPath,
      [
        forelead,
        "jobs",
        "enqueue",
        "--workspace",
        "ev-w3",
        "--wait",
        ...(await certFlags(cp.pki, cp.url)),
        "--",
        "true",
      ],
      { cwd: dir, env: cleanEnv(), stdio: ["ignore", "pipe", "pipe"] },
    );
    let stderr = "";
    waiter.stderr!.on("data", (d: Buffer) => (stderr += d.toString()));
    const exited = new Promise<number | null>((resolve) => waiter.once("exit", resolve));
    try {
      const jobId = await eventually(
        "the enqueue to name its job",
        async () => /forelead: job (\S+) queued/.exec(stderr)?.[1],
      );
      expect((await forel("jobs", "cancel", jobId)).code).toBe(0);
      expect(await exited).toBe(130);
      expect(stderr).toMatch(new RegExp(`forelead: job ${jobId} cancelled`));
    } finally {
      await stop(waiter);
    }
  });

  it("runners list shows registered runners; runners retire retires one and releases its lease", async () => {
    const runner = await registeredRunner(cp, "ev-r4", "ev-w4");
    const jobId = (await cp.admin.enqueue({ workspaceId: "ev-w4" })).json.job.id as string;
    const claim = await runner.claim({ waitSeconds: 0 });
    expect(claim.status).toBe(200);
    const [list] = await json<{
      runners: Array<{
        runnerId: string;
        workspaceId: string;
        slots: number;
        liveLeases: number;
        retiredAt?: string;
      }>;
    }>("runners", "list", "--workspace", "ev-w4");
    expect(list!.runners).toEqual([
      expect.objectContaining({ runnerId: "ev-r4", workspaceId: "ev-w4", slots: 1, liveLeases: 1 }),
    ]);
    expect((await forel("runners", "list", "--workspace", "ev-w4")).stdout).toMatch(
      /^runner +workspace +state +slots +leases +labels .*\nev-r4 +ev-w4 +busy +1 +1 +linux +amd64 /,
    );

    // the lease is live when the retire comes, however slow the commands above were
    expect((await runner.renew(jobId, claim.json.token)).status).toBe(200);
    const [retired] = await json<{
      runnerId: string;
      newlyRetired?: boolean;
      releasedJobIds: string[];
    }>("runners", "retire", "ev-r4", "--workspace", "ev-w4", "--reason", "decommissioned");
    expect(retired).toMatchObject({
      runnerId: "ev-r4",
      newlyRetired: true,
      releasedJobIds: [jobId],
    });
    expect((await forel("runners", "retire", "ev-r4", "--workspace", "ev-w4")).stdout).toBe(
      'runner "ev-r4" in workspace "ev-w4" was already retired\n',
    );
    const [after] = await json<{ runners: Array<{ retiredAt?: string }> }>(
      "runners",
      "list",
      "--workspace",
      "ev-w4",
    );
    expect(after!.runners[0]!.retiredAt).toBeTruthy();
    const [audit] = await json<{ action?: string; target?: string }>(
      "audit",
      "--kind",
      "action",
      "--limit",
      "1",
    );
    expect(audit).toMatchObject({ action: "runner.retire" });
    await runner.close();
  });
});

describe("forelead configuration without flags", { timeout: slow }, () => {
  it(
    "takes each connection setting from the flag, else FORELEAD_*, else the " +
      "config file's profile, else the quick-start defaults",
    async () => {
      const cwd = join(dir, "precedence");
      await mkdir(join(cwd, "conf"), { recursive: true });
      await writeFile(
        join(cwd, "conf", "forelead.toml"),
        '[profiles.default]\nserver = "https://file.example:8443"\nca = ' +
          '"file-ca.pem"\ncert = "file-cert.pem"\nkey = "file-key.pem"\n',
      );
      const config = { FORELEAD_CONFIG: join(cwd, "conf", "forelead.toml") };
      const env = {
        FORELEAD_SERVER: "https://env.example:8443",
        FORELEAD_CA: "/env/ca.pem",
        FORELEAD_CERT: "/env/cert.pem",
        FORELEAD_KEY: "/env/key.pem",
      };
      const flags = [
        "--server",
        "https://flag.example:8443",
        "--ca",
        "/flag/ca.pem",
        "--cert",
        "/flag/cert.pem",
        "--key",
        "/flag/key.pem",
      ];
      type Shown = Record<"server" | "ca" | "cert" | "key", { value: string; source: string }> & {
        file: string | null;
      };
      const show = async (args: string[], extra: Record<string, string>) => {
        const out = await bare(["config", "show", "--json", ...args], { cwd, env: extra });
        expect(out.code, out.stderr).toBe(0);
        return JSON.parse(out.stdout) as Shown;
      };
      const all = await show(flags, { ...config, ...env });
      expect([all.server, all.ca, all.cert, all.key]).toEqual([
        { value: "https://flag.example:8443", source: "flag --server" },
        { value: "/flag/ca.pem", source: "flag --ca" },
        { value: "/flag/cert.pem", source: "flag --cert" },
        { value: "/flag/key.pem", source: "flag --key" },
      ]);
      const noFlags = await show([], { ...config, ...env });
      expect([noFlags.server, noFlags.ca, noFlags.cert, noFlags.key]).toEqual([
        { value: "https://env.example:8443", source: "env FORELEAD_SERVER" },
        { value: "/env/ca.pem", source: "env FORELEAD_CA" },
        { value: "/env/cert.pem", source: "env FORELEAD_CERT" },
        { value: "/env/key.pem", source: "env FORELEAD_KEY" },
      ]);
      const fileOnly = await show([], config);
      const fromFile = `file ${join(cwd, "conf", "forelead.toml")} (profile default)`;
      expect([fileOnly.server, fileOnly.ca, fileOnly.cert, fileOnly.key]).toEqual([
        { value: "https://file.example:8443", source: fromFile },
        // relative to the file's directory
        { value: join(cwd, "conf", "file-ca.pem"), source: fromFile },
        { value: join(cwd, "conf", "file-cert.pem"), source: fromFile },
        { value: join(cwd, "conf", "file-key.pem"), source: fromFile },
      ]);
      const defaults = await show([], {});
      expect(defaults.file).toBeNull();
      expect([defaults.server, defaults.ca, defaults.cert, defaults.key]).toEqual([
        { value: "https://127.0.0.1:8443", source: "default" },
        { value: "certs/ca.pem", source: "default" },
        { value: "certs/cli.pem", source: "default" },
        { value: "certs/cli-key.pem", source: "default" },
      ]);
      // One layer at a time under the others: env CA only, the rest from the file.
      const mixed = await show(["--server", "https://flag.example:8443"], {
        ...config,
        FORELEAD_CA: "/env/ca.pem",
      });
      expect([mixed.server.source, mixed.ca.source, mixed.cert.source]).toEqual([
        "flag --server",
        "env FORELEAD_CA",
        fromFile,
      ]);
    },
  );

  it(
    "profiles: the file's default profile, --profile and FORELEAD_PROFILE " +
      "pick one, and a command reaches the control plane with no connection " +
      "flag",
    async () => {
      const cwd = join(dir, "profiles");
      await mkdir(join(cwd, "certs"), { recursive: true });
      await certFiles(cp.pki, join(cwd, "certs"));
      const toml = [
        'profile = "test"',
        "[profiles.test]",
        `server = "${cp.url}"`,
        'ca = "certs/ca.pem"',
        'cert = "certs/admin.pem"',
        'key = "certs/admin-key.pem"',
        "[profiles.other]",
        'server = "https://other.example:8443"',
        "",
      ].join("\n");
      // ./forelead.toml, found without FORELEAD_CONFIG
      await writeFile(join(cwd, "forelead.toml"), toml);
      const text = await bare(["config", "show"], { cwd });
      expect(text.stdout).toMatch(/^profile: test \(file .*forelead\.toml\)$/m);
      expect(text.stdout).toMatch(
        new RegExp(`^server +${cp.url.replace(/[.]/g, "\\.")} +file `, "m"),
      );
      expect(text.stdout).not.toMatch(/BEGIN/); // paths, never a key's contents

      const enqueued = await bare(
        ["jobs", "enqueue", "--workspace", "ev-w5", "--json", "--", "true"],
        { cwd },
      );
      expect(enqueued.code, enqueued.stderr).toBe(0);
      const jobId = (JSON.parse(enqueued.stdout) as { job: JobJson }).job.id;
      const listed = await bare(["jobs", "list", "--workspace", "ev-w5", "--json"], {
        cwd,
        env: { FORELEAD_PROFILE: "test" },
      });
      expect((JSON.parse(listed.stdout) as { jobs: JobJson[] }).jobs.map((j) => j.id)).toEqual([
        jobId,
      ]);

      const other = JSON.parse(
        (await bare(["config", "show", "--json", "--profile", "other"], { cwd })).stdout,
      ) as {
        server: { value: string };
        ca: { source: string };
        profile: { value: string; source: string };
      };
      expect(other).toMatchObject({
        server: { value: "https://other.example:8443" },
        ca: { source: "default" },
        profile: { value: "other", source: "flag --profile" },
      });
      const fromEnv = JSON.parse(
        (await bare(["config", "show", "--json"], { cwd, env: { FORELEAD_PROFILE: "other" } }))
          .stdout,
      ) as { profile: { source: string } };
      expect(fromEnv.profile.source).toBe("env FORELEAD_PROFILE");
      const unknown = await bare(["status", "--profile", "nope"], { cwd });
      expect(unknown.code).toBe(1);
      expect(unknown.stderr).toMatch(
        /^forelead: error: profile "nope" \(flag --profile\) is not in config file .*forelead\.toml; it has test, other/,
      );
    },
  );

  it("a bad config file is refused naming the file, the line and the key; JSON is accepted too", async () => {
    const cwd = join(dir, "bad");
    await mkdir(cwd, { recursive: true });
    const file = join(cwd, "forelead.toml");
    await writeFile(
      file,
      '[profiles.default]\nserver = "https://a:1"\n\n[profiles.prod]\nserver = "https://b:1"\nsever = "typo"\n',
    );
    const typo = await bare(["config", "show"], { cwd });
    expect(typo.code).toBe(1);
    expect(typo.stderr).toBe(
      `forelead: error: config file ${file}:6: key profiles.prod.sever: ` +
        `unknown key; a profile takes server, ca, cert, key\n`,
    );
    await writeFile(file, '[profiles.default]\nserver = "https://a:1"\nca = 42\n');
    expect((await bare(["jobs", "list"], { cwd })).stderr).toBe(
      `forelead: error: config file ${file}:3: key profiles.default.ca: must be a non-empty string\n`,
    );
    await writeFile(file, '[profiles.default]\nserver = "https://a:1\n');
    expect((await bare(["config", "show"], { cwd })).stderr).toMatch(
      new RegExp(
        `^forelead: error: config file ${file.replace(/[.]/g, "\\.")}:2:\\d+: not valid TOML`,
      ),
    );

    const jsonFile = join(cwd, "forelead.json");
    await writeFile(
      jsonFile,
      JSON.stringify(
        { profiles: { default: { server: "https://json.example:8443", ca: "ca.pem" } } },
        null,
        2,
      ),
    );
    const shown = JSON.parse(
      (await bare(["config", "show", "--json"], { cwd, env: { FORELEAD_CONFIG: jsonFile } }))
        .stdout,
    ) as { server: { value: string }; ca: { value: string } };
    expect(shown).toMatchObject({
      server: { value: "https://json.example:8443" },
      ca: { value: join(cwd, "ca.pem") },
    });
    const missing = await bare(["config", "show"], {
      cwd,
      env: { FORELEAD_CONFIG: join(cwd, "nowhere.toml") },
    });
    expect(missing.stderr).toMatch(
      /config file .*nowhere\.toml: cannot read it \(ENOENT\); FORELEAD_CONFIG names it/,
    );
  });

  it("serve --config reads the [serve] table through the flags' own checks; a flag wins over the file", async () => {
    const cwd = join(dir, "serve");
    await mkdir(cwd, { recursive: true });
    const file = join(cwd, "serve.toml");
    await writeFile(
      file,
      '[serve]\nlisten = "127.0.0.1:0"\nmetrics-listen = "off"\nlease-seconds = 2\n',
    );
    const bad = await bare(["serve", "--config", file, "--check"], { cwd });
    expect(bad.code).toBe(1);
    expect(bad.stderr).toMatch(
      new RegExp(
        `^forelead: error: config file ${file.replace(/[.]/g, "\\.")}:4: key ` +
          `serve\\.lease-seconds: --lease-seconds must be a whole number from 5 to ` +
          `3600; got "2"`,
      ),
    );
    await writeFile(file, '[serve]\nlisten = "127.0.0.1:0"\nlistn = "x"\n');
    expect((await bare(["serve", "--config", file, "--check"], { cwd })).stderr).toMatch(
      /:3: key serve\.listn: not an option of forelead serve/,
    );
    await writeFile(file, '[serve]\nlease-seconds = 2\nadmin = ["not-a-spiffe-id"]\n');
    // --lease-seconds on the command line wins, so the file's 2 is never parsed; the admin list is,
    // and --check reports it.
    const flagWins = await bare(
      [
        "serve",
        "--config",
        file,
        "--lease-seconds",
        "10",
        "--database",
        join(cwd, "db"),
        "--certs-dir",
        join(cwd, "certs"),
        "--metrics-listen",
        "off",
        "--check",
      ],
      { cwd },
    );
    expect(flagWins.stderr).not.toMatch(/lease-seconds/);
    expect(flagWins.stdout).toMatch(/not-a-spiffe-id/);
  });
});

describe(
  `forelead jobs logs --follow across a control-plane restart (${databaseKind})`,
  { timeout: slow },
  () => {
    it(
      "reconnects after the control plane restarts and resumes after the last " +
        "entry: every line once, in order, then exits when the job settles",
      async () => {
        const dbDir =
          databaseKind === "embedded"
            ? await mkdtemp(join(tmpdir(), "forelead-cli-logs-restart-"))
            : undefined;
        const database = dbDir
          ? {
              location: join(dbDir, "db"),
              kind: "embedded" as const,
              drop: () => rm(dbDir, { recursive: true, force: true }),
            }
          : await createTestDatabase();
        let plane: TestControlPlane | undefined = await startTestControlPlane({
          database,
          leaseSeconds: 120,
        });
        const { pki } = plane;
        const port = Number(new URL(plane.url).port);
        let follow: ChildProcess | undefined;
        try {
          const restAdmin = await adminActor(plane);
          let runner = await runnerActor(plane, "ev-rf", "ev-wf");
          expect((await runner.register()).status).toBe(200);
          const jobId = (await restAdmin.enqueue({ workspaceId: "ev-wf" })).json.job.id as string;
          await restAdmin.close();
          const claim = await runner.claim({ waitSeconds: 0 });
          expect(claim.status, claim.text).toBe(200);
          const token = claim.json.token as string;
          const line = (sequence: number, text: string) => ({
            apiVersion: "v1",
            runnerId: "ev-rf",
            jobId,
            leaseToken: token,
            sequence,
            data: { stream: "stdout", text },
          });
          expect(
            (await runner.rest.ndjson("/v1/runner/logs", [line(1, "one"), line(2, "two")])).status,
          ).toBe(204);

          follow = spawn(
            process.execPath,
            [forelead, "jobs", "logs", jobId, "--follow", ...(await certFlags(pki, plane.url))],
            { cwd: dir, env: cleanEnv(), stdio: ["ignore", "pipe", "pipe"] },
          );
          let stdout = "";
          let stderr = "";
          follow.stdout!.on("data", (d: Buffer) => (stdout += d.toString()));
          follow.stderr!.on("data", (d: Buffer) => (stderr += d.toString()));
          const exited = new Promise<number | null>((resolve) => follow!.once("exit", resolve));
          await eventually("the follower to print the first two lines", async () =>
            stdout === "one\ntwo\n" ? true : undefined,
          );

          await runner.close();
          await plane.close();
          plane = await startTestControlPlane({ database, pki, port, leaseSeconds: 120 });
          runner = await runnerActor(plane, "ev-rf", "ev-wf");
          expect(
            (await runner.rest.ndjson("/v1/runner/logs", [line(3, "three"), line(4, "four")]))
              .status,
          ).toBe(204);
          await eventually(
            "the follower to print the lines sent after the restart",
            async () => (stdout.includes("four") ? true : undefined),
            30_000,
          );
          expect((await runner.complete(jobId, token)).status).toBe(200);
          expect(await exited).toBe(0); // the job settled: the follower is done
          expect(stdout).toBe("one\ntwo\nthree\nfour\n");
          expect(stderr).toMatch(
            new RegExp(
              `forelead: logs of job ${jobId}: connection lost .*; resuming after position \\S+`,
            ),
          );
          await runner.close();
        } finally {
          if (follow) await stop(follow);
          await plane?.close();
          await database.drop();
        }
      },
    );
  },
);
