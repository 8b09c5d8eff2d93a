// Scenario: the cost of a job's ID token (docs/workload-identity.md). (1) Signing alone: ES256
// JWTs with the claims the control plane writes, one after another, tokens/s and CPU per token.
// (2) The route: POST /v1/runner/id-token over one HTTP/2 + mTLS connection with N requests in
// flight against an in-process control plane (PGlite, or Postgres with DATABASE_URL), tokens/s
// and the process's CPU per token (server and client together: an upper bound of the control
// plane's). Not part of `npm run bench`.
// Run: node --import tsx bench/job-tokens.ts [tokens] [in-flight]
import "reflect-metadata";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { SignJWT } from "jose";
import { createJobTokenKeyFile, readJobTokenKeys } from "../src/identity/job-tokens/key-set.js";
import { adminActor, registeredRunner } from "../test/support/actors.js";
import { startTestControlPlane } from "../test/support/control-plane.js";

const tokens = Number(process.argv[2] ?? 5000);
const inFlight = Number(process.argv[3] ?? 16);
const dir = await mkdtemp(join(tmpdir(), "forelead-bench-job-tokens-"));
const keyFile = join(dir, "keys.json");
await createJobTokenKeyFile(keyFile);

function measure<T>(run: () => Promise<T>) {
  return async () => {
    const cpu0 = process.cpuUsage();
    const t0 = performance.now();
    await run();
    const seconds = (performance.now() - t0) / 1000;
    const cpu = process.cpuUsage(cpu0);
    const cpuMs = (cpu.user + cpu.system) / 1000;
    return {
      tokensPerSecond: Math.round(tokens / seconds),
      cpuMsPerToken: +(cpuMs / tokens).toFixed(3),
    };
  };
}

const { signing } = await readJobTokenKeys(keyFile);
const now = Math.floor(Date.now() / 1000);
const sign = await measure(async () => {
  for (let i = 0; i < tokens; i++)
    await new SignJWT({ workspace: "w1", job_id: "j", attempt: 1, runner_id: "r1" })
      .setProtectedHeader({ alg: "ES256", kid: signing.kid, typ: "JWT" })
      .setIssuer("https://ci.example:8444")
      .setSubject("spiffe://forelead/workspaces/w1/jobs/j")
      .setAudience("sts.amazonaws.com")
      .setIssuedAt(now)
      .setNotBefore(now)
      .setExpirationTime(now + 30)
      .setJti(String(i))
      .sign(signing.key);
})();
console.log(`signing alone: ${JSON.stringify(sign)}`);

const cp = await startTestControlPlane({
  leaseSeconds: 3600,
  jobTokens: { keyFile, issuerUrl: "https://ci.example:8444" },
});
const admin = await adminActor(cp);
try {
  const enq = await admin.enqueue({
    workspaceId: "bench",
    idToken: { allowedAudiences: ["sts.amazonaws.com"] },
  });
  if (enq.status !== 200) throw new Error(enq.text);
  const runner = await registeredRunner(cp, "r1", "bench");
  const claim = await runner.claim();
  const body = {
    apiVersion: "v1",
    jobId: claim.json.job.id,
    leaseToken: claim.json.token,
    audience: "sts.amazonaws.com",
  };
  let next = 0;
  const route = await measure(async () => {
    await Promise.all(
      Array.from({ length: inFlight }, async () => {
        while (next++ < tokens) {
          const reply = await runner.rest.request("POST", "/v1/runner/id-token", body);
          if (reply.status !== 200) throw new Error(reply.text);
        }
      }),
    );
  })();
  console.log(`POST /v1/runner/id-token, ${inFlight} in flight: ${JSON.stringify(route)}`);
  await runner.close();
} finally {
  await admin.close();
  await cp.close();
  await rm(dir, { recursive: true, force: true });
}
