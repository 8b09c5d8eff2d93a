import "reflect-metadata";
import { existsSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createRemoteJWKSet, customFetch, jwtVerify } from "jose";
import { afterAll, describe, expect, it } from "vitest";
import { idTokenFileName } from "../../src/protocol/id-token-files.js";
import { eventually } from "../support/actors.js";
import { databaseKind } from "../support/database.js";
import { useControlPlane } from "../support/fixture.js";
import { fetchTrusting } from "../support/https-get.js";
import { executorsUnderTest, specFor, startTestRunner } from "../support/runner-agent.js";
import { readEntries } from "../support/streams.js";

// A job's identity on the runner (issue 47 item 3): the runner fetches an ID token for each
// audience the job allows and keeps it fresh in a file per audience in FORELEAD_ID_TOKEN_DIR, which
// the job reads with cat, on each executor; the token is masked in the job's log and its directory
// is gone with the job. An event the job writes is masked with the same masker. Leases of 6 s make tokens that live at most 6 s, so the job sees its token
// replaced while it runs.
const dir = await mkdtemp(join(tmpdir(), "forelead-runner-id-tokens-"));
const cp = useControlPlane({
  leaseSeconds: 6,
  jobTokens: { keyFile: join(dir, "keys.json"), listen: { host: "127.0.0.1", port: 0 } },
});
const { admin } = cp;
const executors = await executorsUnderTest();
const tag = Math.random().toString(36).slice(2, 8);
const audience = "https://vault.example";
let n = 0;

afterAll(() => rm(dir, { recursive: true, force: true }));

/** The built command, as a process job runs it (as its own user; node by its absolute path). */
const forelead = `${process.execPath} ${join(process.cwd(), "bin/forelead.js")}`;

/** Reads its token twice, 8 s apart (past the first one's expiry), and shows where it was. */
const script = [
  `f="$FORELEAD_ID_TOKEN_DIR/${idTokenFileName(audience)}"`,
  'echo "dir=$FORELEAD_ID_TOKEN_DIR"',
  `grep " /run/forelead/id-tokens " /proc/self/mountinfo | while read -r l; do echo "mount $l"; done`,
  't1=$(cat "$f")',
  'echo "whole=$t1"',
  // The job echoes its token into an event: the stored event holds "***" instead.
  `printf '{"type":"deploy.token","token":"%s"}\\n' "$t1" >> "$FORELEAD_EVENTS"`,
  'echo "head=$(printf %s "$t1" | cut -c1-40)"',
  'echo "tail=$(printf %s "$t1" | cut -c41-)"',
  // Process jobs: a fresh token on demand through the socket, as `forelead job id-token` asks.
  'if [ -n "$FORELEAD_ID_TOKEN_SOCKET" ]; then',
  `  s=$(${forelead} job id-token --audience '${audience}')`,
  '  [ -n "$s" ] && [ "$s" != "$t1" ] && echo socket-fresh',
  '  echo "socket=$s"',
  `  ${forelead} job id-token --audience other.example || echo refused`,
  "fi",
  "sleep 8",
  't2=$(cat "$f")',
  '[ -n "$t2" ] && [ "$t1" != "$t2" ] && echo refreshed',
].join("\n");

describe.each(executors)(`job ID tokens on the %s executor (${databaseKind})`, (executor) => {
  it("the job reads a verifiable token from its file, kept fresh, masked in its log, removed after", async () => {
    const ws = `idt${++n}`;
    const runner = await startTestRunner(cp, {
      runnerId: `t${n}-${tag}`,
      workspaceId: ws,
      executor,
    });
    try {
      const enq = await admin.enqueue({
        workspaceId: ws,
        spec: specFor(executor, { argv: ["sh", "-c", script] }),
        idToken: { allowedAudiences: [audience] },
      });
      expect(enq.status, enq.text).toBe(200);
      const jobId: string = enq.json.job.id;
      const job = await eventually(
        `job ${jobId} to settle`,
        async () => {
          const j = (await admin.job(jobId)).json.job;
          return ["succeeded", "failed", "cancelled"].includes(j.state) ? j : undefined;
        },
        40_000,
      );
      const lines = (await readEntries(admin, jobId, "logs", "?pageSize=1000")).map(
        (e) => (e.data as { text: string }).text,
      );
      expect(job.state, lines.join("\n")).toBe("succeeded");
      expect(lines).toContain("whole=***");
      expect(lines).toContain("refreshed");
      const token =
        lines.find((l) => l.startsWith("head="))!.slice(5) +
        lines.find((l) => l.startsWith("tail="))!.slice(5);
      const issuer = cp.plane.jobTokens!.issuerUrl;
      const jwks = createRemoteJWKSet(new URL(`${issuer}/.well-known/jwks.json`), {
        [customFetch]: fetchTrusting(cp.pki.ca.certPem),
      });
      // Verified as of when it was issued: it has expired by now (its lease was 6 s).
      const { payload } = await jwtVerify(token, jwks, {
        issuer,
        audience,
        clockTolerance: 3600,
      });
      expect(payload).toMatchObject({
        sub: `spiffe://forelead/workspaces/${ws}/jobs/${jobId}`,
        job_id: jobId,
        runner_id: `t${n}-${tag}`,
      });
      expect(payload.exp! - payload.iat!).toBeLessThanOrEqual(6);
      if (executor === "process") {
        expect(lines).toContain("socket-fresh");
        expect(lines).toContain("socket=***");
        expect(lines).toContain("refused");
        expect(lines.join("\n")).toContain('audience "other.example" is not in job');
      }
      const tokenDir = lines.find((l) => l.startsWith("dir="))!.slice(4);
      if (executor === "process") {
        expect(tokenDir).toMatch(/\/forelead-secrets-[^/]+$/);
        expect(existsSync(tokenDir)).toBe(false);
      } else {
        expect(tokenDir).toBe("/run/forelead/id-tokens");
        const hostName = lines
          .find((l) => l.startsWith("mount "))
          ?.split(" ")[4]
          ?.split("/")
          .pop();
        expect(hostName).toMatch(/^forelead-secrets-/);
        for (const root of ["/dev/shm", tmpdir()])
          expect(existsSync(join(root, hostName!))).toBe(false);
      }
      // The runner's own log never holds the token, nor does any stored event.
      expect(runner.log.join("\n")).not.toContain(token);
      const events = await readEntries(admin, jobId, "events", "?pageSize=1000");
      expect(events.map((e) => e.data)).toContainEqual(
        expect.objectContaining({ type: "deploy.token", token: "***" }),
      );
      for (const part of [token, token.split(".")[2]!])
        expect(JSON.stringify(events)).not.toContain(part);
    } finally {
      await runner.close();
    }
  });
});
