import { randomBytes } from "node:crypto";
import { chmod, mkdtemp, readdir, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { sql } from "kysely";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { RunnerService } from "../../gen/forelead/runner/v1/runner_pb.js";
import { checkoutBase } from "../../src/runner/checkout/checkout.js";
import { createTestClient, type RestReply } from "../support/clients.js";
import {
  leaseCodeJob,
  publishBundle,
  registerRepository,
  requestBundle,
  requestHead,
} from "../support/code-actors.js";
import { databaseKind } from "../support/database.js";
import { useControlPlane } from "../support/fixture.js";
import { createTestOrigin, git, type TestOrigin } from "../support/git-repos.js";
import { startGitHttpsServer, type GitHttpsServer } from "../support/git-https.js";
import { createTestPki, type TestPki } from "../support/pki.js";

// An https code host that wants one password, and a `git` wrapper first on PATH that records the
// argv of every git process: the credential must reach the code host and appear nowhere else.
const secret = `s3cr3t-${randomBytes(12).toString("hex")}`;
const wrongSecret = `wr0ng-${randomBytes(12).toString("hex")}`;
let pki: TestPki;
let origin: TestOrigin;
let host: GitHttpsServer;
let scratch: string;
const replies: RestReply[] = [];
const logged: string[] = [];

beforeAll(async () => {
  scratch = await mkdtemp(join(tmpdir(), "forelead-cred-test-"));
  pki = await createTestPki();
  await writeFile(join(scratch, "ca.pem"), pki.ca.certPem);
  // the control plane's git trusts the test code host
  process.env.GIT_SSL_CAINFO = join(scratch, "ca.pem");
  const realGit = (await git(scratch, ["--exec-path"])).replace(
    /\/lib\/git-core$|\/libexec\/git-core$/,
    "/bin/git",
  );
  await writeFile(
    join(scratch, "git"),
    `#!/bin/sh\nprintf '%s\\n' "$*" >> '${join(scratch, "argv.log")}'\nexec '${realGit}' "$@"\n`,
  );
  await chmod(join(scratch, "git"), 0o755);
  process.env.PATH = `${scratch}:${process.env.PATH}`;
  for (const stream of [process.stdout, process.stderr]) {
    const write = stream.write.bind(stream);
    vi.spyOn(stream, "write").mockImplementation(
      (chunk: unknown, ...rest: unknown[]) => (
        logged.push(String(chunk)),
        write(chunk as string, ...(rest as []))
      ),
    );
  }
  for (const level of ["log", "error", "warn", "info", "debug"] as const) {
    const original = console[level].bind(console);
    vi.spyOn(console, level).mockImplementation(
      (...args: unknown[]) => (
        logged.push(
          args
            .map((a) => (a instanceof Error ? `${a.stack} ${JSON.stringify(a)}` : String(a)))
            .join(" "),
        ),
        original(...args)
      ),
    );
  }
  origin = await createTestOrigin();
  host = await startGitHttpsServer(join(origin.path, ".."), pki.server, "forelead", secret);
});
afterAll(async () => {
  vi.restoreAllMocks();
  await host?.close();
  await origin?.remove();
  await rm(scratch, { recursive: true, force: true });
});
// Registered after the hooks above, so the control plane starts with their PKI once the code host
// and the git wrapper are up.
const cp = useControlPlane(() => ({ pki }));
const { admin } = cp;

/** Keeps every reply so the test can search all of them. */
async function kept(p: Promise<RestReply>): Promise<RestReply> {
  const reply = await p;
  replies.push(reply);
  return reply;
}

describe(`an https repository's credential (${databaseKind})`, () => {
  it(
    "reaches the code host for register, pin, head, bundle and publish, and " +
      "never appears in a reply, log line, error, audit record or git argv",
    async () => {
      const url = `${host.url}origin.git`;
      const wrong = await kept(registerRepository(admin, "app", url, wrongSecret));
      expect(wrong.status, wrong.text).toBe(400);
      expect(wrong.json.message).toContain("could not be read");
      const missing = await kept(
        registerRepository(admin, "app", `${host.url}missing.git`, secret),
      );
      expect(missing.status, missing.text).toBe(400);
      expect(host.refused()).toBeGreaterThan(0);

      const ok = await kept(registerRepository(admin, "app", url, secret));
      expect(ok.status, ok.text).toBe(200);
      expect(ok.json.repository).toMatchObject({ name: "app", url, hasCredential: true });
      await kept(admin.rest.request("GET", "/v1/admin/repositories"));

      const base = (await origin.branchHead("main"))!;
      const lease = await leaseCodeJob(cp, admin, "w1", "r1", {
        kind: "agent",
        repository: "app",
        targetBranch: "main",
      });
      expect(lease.lease.job.baseCommit).toBe(base);
      expect((await kept(requestHead(lease.runner, lease.jobId, lease.token))).json.commit).toBe(
        base,
      );
      expect(
        (await kept(requestBundle(lease.runner, lease.jobId, lease.token, "base", base))).status,
      ).toBe(200);
      await kept(requestBundle(lease.runner, lease.jobId, lease.token, "head", "0".repeat(40)));

      const client = createTestClient(
        RunnerService,
        cp.url,
        cp.pki.ca.certPem,
        await cp.pki.runner("r1", "w1"),
        "grpc",
      );
      const dir = join(scratch, "agent");
      await checkoutBase(
        {
          jobId: lease.jobId,
          leaseToken: lease.token,
          baseCommit: base,
          baseTree: lease.lease.job.baseTree!,
        },
        { client, dir },
      );
      await git(dir, ["commit", "--quiet", "--allow-empty", "-m", "agent"]);
      await git(dir, ["bundle", "create", "--quiet", "out.bundle", "HEAD", `^${base}`]);
      const published = await kept(
        publishBundle(
          lease.runner,
          lease.jobId,
          lease.token,
          await readFile(join(dir, "out.bundle")),
        ),
      );
      expect(published.status, published.text).toBe(200);
      // pushed over https with the credential
      expect(await origin.branchHead(`forelead/jobs/${lease.jobId}`)).toBe(published.json.commit);
      await kept(admin.job(lease.jobId));
      await lease.runner.close();

      const everything = [
        ...replies.map((r) => `${JSON.stringify(r.headers)} ${r.text}`),
        ...logged,
        await readFile(join(scratch, "argv.log"), "utf8"),
        JSON.stringify((await sql`select * from audit_records`.execute(cp.plane.store.db)).rows),
        JSON.stringify((await sql`select * from jobs`.execute(cp.plane.store.db)).rows),
      ].join("\n");
      // the argv log did record the control plane's git calls
      expect(everything).toContain("ls-remote");
      expect(everything).not.toContain(secret);
      expect(everything).not.toContain(wrongSecret);
      // The askpass directories are gone once each git call ends.
      expect((await readdir(tmpdir())).filter((f) => f.startsWith("forelead-git-"))).toEqual([]);
    },
  );
});
