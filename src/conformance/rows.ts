// The rows of the conformance kit: the invest-harness compatibility list,
// each a check the kit can observe from the control plane's side of the
// protocol (job views, logs, events, artifacts, the audit trail and its own
// request metrics), never by looking inside the runner. docs/conformance.md
// says what each row checks.
import { createHash, randomBytes } from "node:crypto";
import { describeJob, RowFailure, type Harness } from "./harness.js";

/** One row: its name in the table, what it holds, and its check (its pass reason, or a RowFailure). */
export interface Row {
  readonly name: string;
  readonly holds: string;
  /**
   * A feature the row needs from both the control plane and the runner
   * (issue 21: progress, result and suspend). The row is skipped with the
   * reason until controlPlaneFeatures lists it and the runner declares it.
   */
  readonly feature?: string;
  run(h: Harness): Promise<string>;
}

/**
 * The job-side features this control plane serves, which rows may require.
 * None yet: progress and result lines and suspend arrive with issue 21's
 * items 2 and 4; add each name here (and the runner's declaration check in
 * runnerDeclares) when its route merges.
 */
export const controlPlaneFeatures: ReadonlySet<string> = new Set<string>();

/**
 * Whether the runner declared `feature` at registration: the `features` of
 * its registration as the runner listing shows it (capabilities, issue 21
 * item 3; until that field exists, no runner declares anything).
 */
export async function runnerDeclares(h: Harness, feature: string): Promise<boolean> {
  const { runners } = await h.admin.listRunners({ workspaceId: h.launch.workspaceId });
  const me = runners.find((r) => r.runnerId === h.launch.runnerId) as { features?: unknown } | undefined;
  return Array.isArray(me?.features) && me.features.includes(feature);
}

const done = (job: { state: string }) => ["succeeded", "failed", "cancelled"].includes(job.state);

/** Enqueues `script` and waits until it settled; the job as settled. */
async function runToEnd(h: Harness, script: string, what: string, extra: { timeoutSeconds?: number; secrets?: Record<string, string>; withinMs?: number } = {}) {
  const jobId = await h.enqueue({ script, ...extra });
  return h.waitFor(jobId, what, done, extra.withinMs);
}

/** Fails the row unless the job ended in `state` by the runner's completion (the control plane's sweep sets a failure). */
function expectSettled(job: Awaited<ReturnType<Harness["job"]>>, state: string, what: string): void {
  if (job.state !== state || job.failure) throw new RowFailure(`${what}: job ${job.id} is ${describeJob(job)}; want ${state}, completed by the runner`);
}

/**
 * The runner stopped its last job: with its one slot, it takes a new job
 * and completes it within a lease length (plus the time a job takes to start).
 */
async function takesNextJob(h: Harness, after: string, onLeased: () => Promise<void> = async () => {}, script = "echo probe"): Promise<void> {
  const probe = await h.enqueue({ script });
  const withinMs = h.options.leaseSeconds * 1000 + 15_000;
  await h.waitFor(probe, `${after}, the runner did not take a new job (its one slot still busy?)`, (j) => j.state !== "queued", withinMs);
  await onLeased();
  await h.waitFor(probe, `${after}, the runner's next job did not succeed`, (j) => j.state === "succeeded", withinMs);
}

/** Completions refused so far (4xx on complete): a second, different completion, or one under a dead lease. */
async function refusedCompletions(h: Harness): Promise<number> {
  let refused = 0;
  for (const [code, n] of await h.answered("POST /v1/runner/complete")) if (code.startsWith("4")) refused += n;
  return refused;
}

/** The rows in the order they run. A row after a failed `register` is skipped. */
export const rows: readonly Row[] = [
  {
    name: "register",
    holds: "the runner registers in its certificate's workspace with one slot",
    async run(h) {
      const deadline = Date.now() + h.options.rowTimeoutSeconds * 1000;
      for (;;) {
        const { runners } = await h.admin.listRunners({ workspaceId: h.launch.workspaceId });
        const me = runners.find((r) => r.runnerId === h.launch.runnerId);
        if (me) {
          if (me.slots !== 1) throw new RowFailure(`registered with ${me.slots} slots; run it with one (the kit sees a job stopped when the runner takes the next)`);
          return `registered: labels [${me.labels.join(", ")}], ${me.cpu} CPUs, ${me.architecture || "no architecture"}`;
        }
        const exit = h.runnerExit();
        if (exit) throw new RowFailure(`the runner exited (${exit}) without registering; its output:\n${(await h.runnerOutput()).slice(-2000)}`);
        if (Date.now() > deadline) throw new RowFailure(`the runner did not register within ${h.options.rowTimeoutSeconds}s; its output:\n${(await h.runnerOutput()).slice(-2000)}`);
        await new Promise((r) => setTimeout(r, 200));
      }
    },
  },
  {
    name: "success",
    holds: "a job that exits 0 is completed succeeded with exit code 0",
    async run(h) {
      const job = await runToEnd(h, "echo conformance", "a job exiting 0 did not settle");
      expectSettled(job, "succeeded", "a job exiting 0");
      if (job.exitCode !== 0) throw new RowFailure(`a job exiting 0 was completed with exit code ${job.exitCode ?? "none"}`);
      return "succeeded, exit code 0";
    },
  },
  {
    name: "failure",
    holds: "a job that exits 3 is completed failed with exit code 3",
    async run(h) {
      const job = await runToEnd(h, "exit 3", "a job exiting 3 did not settle");
      expectSettled(job, "failed", "a job exiting 3");
      if (job.exitCode !== 3) throw new RowFailure(`a job exiting 3 was completed with exit code ${job.exitCode ?? "none"}`);
      return `failed, exit code 3${job.error?.code ? `, error ${job.error.code}` : ""}`;
    },
  },
  {
    name: "incompatible-spec",
    holds: "a job needing a label the runner lacks is never leased; a spec beyond the runner (more CPUs than it registered) is failed with an error, without running",
    async run(h) {
      const unmatched = await h.enqueue({ script: "echo must-not-run", labels: ["forelead-conformance-absent"] });
      const oversized = await h.enqueue({ script: "echo must-not-run", cpu: 1_000_000 });
      const job = await h.waitFor(oversized, "a job asking for 1,000,000 CPUs did not settle", done);
      expectSettled(job, "failed", "a job asking for 1,000,000 CPUs");
      if (!job.error?.code) throw new RowFailure(`a job asking for 1,000,000 CPUs was failed without an error code: ${describeJob(job)}`);
      if (job.exitCode !== undefined) throw new RowFailure(`a job asking for 1,000,000 CPUs ran (exit code ${job.exitCode}); it should be refused before it starts`);
      // The runner claimed the second job after the first was queued: the first was passed over.
      const passed = await h.job(unmatched);
      if (passed.state !== "queued" || passed.attempts) throw new RowFailure(`a job labelled forelead-conformance-absent was leased: ${describeJob(passed)}`);
      await h.admin.cancelJob({ apiVersion: "v1", jobId: unmatched });
      return `label not offered: not leased; 1,000,000 CPUs: failed ${job.error.code}`;
    },
  },
  {
    name: "cancel",
    holds: "a running job cancelled is completed cancelled by the runner within a lease length, and the runner's slot frees",
    async run(h) {
      const jobId = await h.enqueue({ script: "echo started; sleep 300" });
      await h.waitFor(jobId, "the job to cancel did not start", (j) => j.state === "running");
      await h.admin.cancelJob({ apiVersion: "v1", jobId });
      const job = await h.waitFor(jobId, "the cancelled job did not settle", done, h.options.leaseSeconds * 1000 + 5_000);
      expectSettled(job, "cancelled", "the cancelled job");
      await takesNextJob(h, "after the cancel");
      return "completed cancelled; the runner took the next job";
    },
  },
  {
    name: "timeout",
    holds: "a job over its timeoutSeconds is stopped and completed failed with error timeout",
    async run(h) {
      const job = await runToEnd(h, "sleep 300", "a job over its 2 s timeout did not settle", { timeoutSeconds: 2, withinMs: 2_000 + h.options.leaseSeconds * 1000 + 10_000 });
      expectSettled(job, "failed", "a job over its 2 s timeout");
      if (job.error?.code !== "timeout") throw new RowFailure(`a job over its 2 s timeout was failed with ${describeJob(job)}; want error timeout`);
      return "failed, error timeout";
    },
  },
  {
    name: "renew",
    holds: "a job running two and a half lease lengths keeps its lease (renewed) and succeeds",
    async run(h) {
      const seconds = Math.ceil(h.options.leaseSeconds * 2.5);
      const job = await runToEnd(h, `sleep ${seconds}; echo done`, `a ${seconds} s job did not settle`, { withinMs: seconds * 1000 + h.options.rowTimeoutSeconds * 1000 });
      expectSettled(job, "succeeded", `a ${seconds} s job (lease ${h.options.leaseSeconds} s)`);
      return `a ${seconds} s job on ${h.options.leaseSeconds} s leases succeeded`;
    },
  },
  {
    name: "expired-lease",
    holds: "after the control plane expires a running job's lease, the runner stops the job (its slot frees within a lease length) and sends no completion for it",
    async run(h) {
      const jobId = await h.enqueue({ script: "echo started; sleep 300" });
      await h.waitFor(jobId, "the job did not start", (j) => j.state === "running");
      const refusedBefore = await refusedCompletions(h);
      await h.expireLease(jobId);
      const job = await h.job(jobId);
      if (job.state !== "failed" || job.failure?.reason !== "lease_lost") throw new RowFailure(`after its lease expired the job is ${describeJob(job)}; want failed lease_lost`);
      // A runner completes (or not) the job it lost before it takes the next on its one slot; the
      // next job runs a few seconds, so its own completions come after the count.
      const countRefused = async () => {
        const refused = (await refusedCompletions(h)) - refusedBefore;
        if (refused > 0) throw new RowFailure(`the runner sent ${refused} completion(s) for the job after its lease expired; the control plane refused them`);
      };
      await takesNextJob(h, "after its lease expired", countRefused, "sleep 3; echo probe");
      return "stopped; no completion sent; the runner took the next job";
    },
  },
  {
    name: "isolation",
    holds: "a file a job writes in its directory is not visible to the next job, in its own directory or at the first job's path",
    async run(h) {
      const marker = `conformance-marker-${randomBytes(4).toString("hex")}`;
      const first = await runToEnd(h, `echo written > ${marker} && echo "dir=$(pwd)"`, "the writing job did not settle");
      expectSettled(first, "succeeded", "the writing job");
      const line = (await h.logText(first.id)).find((l) => l.startsWith("dir="));
      if (!line) throw new RowFailure(`the writing job's log has no "dir=" line (its output is not in the job's log)`);
      const path = `${line.slice(4).trim().replace(/\/$/, "")}/${marker}`;
      const second = await runToEnd(h, `if [ -e ${marker} ] || [ -e '${path.replace(/'/g, "")}' ]; then echo "sees ${marker}"; exit 9; fi`, "the reading job did not settle");
      if (second.exitCode === 9) throw new RowFailure(`the next job sees the first job's file ${marker} (at ${path} or in its own directory)`);
      expectSettled(second, "succeeded", "the reading job");
      return `the next job did not see ${path}`;
    },
  },
  {
    name: "upload-digest",
    holds: "a file the job writes to its output directory is an artifact with the digest and size the job computed, and downloads as the same bytes",
    async run(h) {
      const file = `${h.outputDir}/conformance.bin`;
      const job = await runToEnd(h, `head -c 100000 /dev/urandom > ${file} && if command -v sha256sum >/dev/null; then sha256sum ${file}; else busybox sha256sum ${file}; fi`, "the uploading job did not settle");
      expectSettled(job, "succeeded", "the uploading job");
      const computed = (await h.logText(job.id)).map((l) => /^([0-9a-f]{64})\s/.exec(l)?.[1]).find(Boolean);
      if (!computed) throw new RowFailure("the uploading job's log has no sha256sum line (its output is not in the job's log)");
      const artifact = job.artifacts.find((a) => a.name === "conformance.bin");
      if (!artifact) throw new RowFailure(`the job's artifacts do not list conformance.bin: [${job.artifacts.map((a) => a.name).join(", ")}]`);
      if (artifact.digest !== `sha256:${computed}` || Number(artifact.size) !== 100_000) throw new RowFailure(`conformance.bin is listed as ${artifact.digest}, ${artifact.size} bytes; the job computed sha256:${computed}, 100000 bytes`);
      const hash = createHash("sha256");
      for await (const chunk of h.admin.downloadArtifact({ jobId: job.id, name: "conformance.bin" })) hash.update(chunk.data);
      const downloaded = hash.digest("hex");
      if (downloaded !== computed) throw new RowFailure(`conformance.bin downloads as sha256:${downloaded}; the job computed sha256:${computed}`);
      return `conformance.bin sha256:${computed.slice(0, 12)}…, 100000 bytes`;
    },
  },
  {
    name: "secrets",
    holds: "a job gets its secret; the value is in no log line, job event, workspace event, audit record, job view or the runner's own output",
    async run(h) {
      const value = randomBytes(32).toString("base64url");
      const job = await runToEnd(h, 'test "${#CONFORMANCE_TOKEN}" -eq 43 && echo "token: $CONFORMANCE_TOKEN"', "the job with a secret did not settle", { secrets: { CONFORMANCE_TOKEN: value } });
      expectSettled(job, "succeeded", "the job with a secret (it checks the secret's length)");
      const places: Array<[string, () => Promise<string>]> = [
        ["the job's log", async () => (await h.logText(job.id)).join("\n")],
        ["the job's events", async () => JSON.stringify(await h.jobEvents(job.id))],
        ["the workspace's event stream", async () => JSON.stringify(await h.workspaceEvents())],
        ["the audit trail", () => h.auditText()],
        ["the job view", async () => JSON.stringify(await h.job(job.id), (_, v: unknown) => (typeof v === "bigint" ? v.toString() : v))],
        ["the runner's own output", () => h.runnerOutput()],
      ];
      if (!(await h.logText(job.id)).some((l) => l.startsWith("token: "))) throw new RowFailure('the job\'s log has no "token: " line: its output is not in the job\'s log, so the masking cannot be seen');
      for (const [where, read] of places) if ((await read()).includes(value)) throw new RowFailure(`the secret's value is in ${where}`);
      return `not in ${places.map(([where]) => where.replace(/^the /, "")).join(", ")}`;
    },
  },
  {
    name: "repeated-complete",
    holds: "every completion the runner sent was accepted (a repeat only with the same completionId and body), and each job settled once",
    async run(h) {
      const job = await runToEnd(h, "echo once", "the job did not settle");
      expectSettled(job, "succeeded", "the job");
      const counts = await h.answered("POST /v1/runner/complete");
      const refused = [...counts].filter(([code]) => code.startsWith("4"));
      if (refused.length) throw new RowFailure(`the control plane refused completions: ${refused.map(([code, n]) => `${n} × ${code}`).join(", ")} (a second, different completion of a settled job, or one under a dead lease)`);
      const settled = new Map<string, number>();
      for (const e of await h.workspaceEvents()) if (e.type === "job.settled") settled.set(e.jobId, (settled.get(e.jobId) ?? 0) + 1);
      const twice = [...settled].filter(([, n]) => n > 1);
      if (twice.length) throw new RowFailure(`jobs settled more than once: ${twice.map(([id, n]) => `${id} × ${n}`).join(", ")}`);
      const accepted = [...counts].reduce((sum, [, n]) => sum + n, 0);
      return `${accepted} completion(s), all accepted; ${settled.size} jobs settled once each`;
    },
  },
  {
    name: "progress",
    feature: "progress-v1",
    holds: "::forelead::progress lines set the job's progress (issue 21 item 2)",
    run: () => Promise.reject(new RowFailure("not written yet: lands with the progress lines")),
  },
  {
    name: "result",
    feature: "result-v1",
    holds: "/output/result.json and ::forelead::result lines reach the job view (issue 21 items 1-2)",
    run: () => Promise.reject(new RowFailure("not written yet: lands with result.json")),
  },
  {
    name: "suspend",
    feature: "checkpoint-v1",
    holds: "a job suspends with a checkpoint and an input request, and resumes with the answer (issue 21 item 4)",
    run: () => Promise.reject(new RowFailure("not written yet: lands with suspend")),
  },
];
