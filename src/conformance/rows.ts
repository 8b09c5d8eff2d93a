// The rows of the conformance kit: the invest-harness compatibility list,
// each a check the kit can observe from the control plane's side of the
// protocol (job views, logs, events, artifacts, the audit trail and its own
// request metrics), never by looking inside the runner. docs/conformance.md
// says what each row checks.
import { createHash, randomBytes } from "node:crypto";
import { fromJson } from "@bufbuild/protobuf";
import { ValueSchema } from "@bufbuild/protobuf/wkt";
import { features, suspendFeatures } from "../protocol/features.js";
import { inputPaths } from "../protocol/input-request.js";
import { describeJob, RowFailure, type Harness } from "./harness.js";

/**
 * One row: its name in the table, what it holds, and its check (its pass reason, or a RowFailure).
 */
export interface Row {
  readonly name: string;
  readonly holds: string;
  /**
   * The features the row needs from both the control plane and the runner
   * (src/protocol/features.ts: progress, result and suspend). The row is
   * skipped, naming the first one missing, unless controlPlaneFeatures lists
   * them all and the runner declared them all at registration.
   */
  readonly features?: readonly string[];
  run(h: Harness): Promise<string>;
}

/**
 * The features this control plane serves, which rows may require: every
 * name of src/protocol/features.ts (cancel, progress and result lines and
 * result.json reach the job view) and suspend's checkpoint-v1 and input-v1.
 */
export const controlPlaneFeatures: ReadonlySet<string> = new Set<string>([
  ...Object.values(features),
  ...suspendFeatures,
]);

/**
 * The ones of `wanted` the runner did not declare at registration: the
 * `features` of its registration as the admin runner listing shows it.
 */
export async function undeclared(h: Harness, wanted: readonly string[]): Promise<string[]> {
  const { runners } = await h.admin.listRunners({ workspaceId: h.launch.workspaceId });
  const declared = runners.find((r) => r.runnerId === h.launch.runnerId)?.features ?? [];
  return wanted.filter((f) => !declared.includes(f));
}

const done = (job: { state: string }) => ["succeeded", "failed", "cancelled"].includes(job.state);

/** Enqueues `script` and waits until it settled; the job as settled. */
async function runToEnd(
  h: Harness,
  script: string,
  what: string,
  extra: { timeoutSeconds?: number; secrets?: Record<string, string>; withinMs?: number } = {},
) {
  const jobId = await h.enqueue({ script, ...extra });
  return h.waitFor(jobId, what, done, extra.withinMs);
}

/**
 * Fails the row unless the job ended in `state` by the runner's completion (the control plane's
 * sweep sets a failure).
 */
function expectSettled(
  job: Awaited<ReturnType<Harness["job"]>>,
  state: string,
  what: string,
): void {
  if (job.state !== state || job.failure)
    throw new RowFailure(
      `${what}: job ${job.id} is ${describeJob(job)}; want ${state}, completed by the runner`,
    );
}

/**
 * The runner stopped its last job: with its one slot, it takes a new job
 * and completes it within a lease length (plus the time a job takes to start).
 */
async function takesNextJob(
  h: Harness,
  after: string,
  onLeased: () => Promise<void> = async () => {},
  script = "echo probe",
): Promise<void> {
  const probe = await h.enqueue({ script });
  const withinMs = h.options.leaseSeconds * 1000 + 15_000;
  await h.waitFor(
    probe,
    `${after}, the runner did not take a new job (its one slot still busy?)`,
    (j) => j.state !== "queued",
    withinMs,
  );
  await onLeased();
  await h.waitFor(
    probe,
    `${after}, the runner's next job did not succeed`,
    (j) => j.state === "succeeded",
    withinMs,
  );
}

/**
 * Completions refused so far (4xx on complete): a second, different completion, or one under a dead
 * lease.
 */
async function refusedCompletions(h: Harness): Promise<number> {
  let refused = 0;
  for (const [code, n] of await h.answered("POST /v1/runner/complete"))
    if (code.startsWith("4")) refused += n;
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
          if (me.slots !== 1)
            throw new RowFailure(
              `registered with ${me.slots} slots; run it with one (the kit sees a job ` +
                `stopped when the runner takes the next)`,
            );
          return (
            `registered: labels [${me.labels.join(", ")}], ${me.cpu} CPUs, ` +
            `${me.architecture || "no architecture"}`
          );
        }
        const exit = h.runnerExit();
        if (exit)
          throw new RowFailure(
            `the runner exited (${exit}) without registering; its output:\n${(await h.runnerOutput()).slice(-2000)}`,
          );
        if (Date.now() > deadline)
          throw new RowFailure(
            `the runner did not register within ${h.options.rowTimeoutSeconds}s; its ` +
              `output:\n${(await h.runnerOutput()).slice(-2000)}`,
          );
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
      if (job.exitCode !== 0)
        throw new RowFailure(
          `a job exiting 0 was completed with exit code ${job.exitCode ?? "none"}`,
        );
      return "succeeded, exit code 0";
    },
  },
  {
    name: "failure",
    holds: "a job that exits 3 is completed failed with exit code 3",
    async run(h) {
      const job = await runToEnd(h, "exit 3", "a job exiting 3 did not settle");
      expectSettled(job, "failed", "a job exiting 3");
      if (job.exitCode !== 3)
        throw new RowFailure(
          `a job exiting 3 was completed with exit code ${job.exitCode ?? "none"}`,
        );
      return `failed, exit code 3${job.error?.code ? `, error ${job.error.code}` : ""}`;
    },
  },
  {
    name: "incompatible-spec",
    holds:
      "a job needing a label the runner lacks is never leased; a spec beyond " +
      "the runner (more CPUs than it registered) is failed with an error, " +
      "without running",
    async run(h) {
      const unmatched = await h.enqueue({
        script: "echo must-not-run",
        labels: ["forelead-conformance-absent"],
      });
      const oversized = await h.enqueue({ script: "echo must-not-run", cpu: 1_000_000 });
      const job = await h.waitFor(
        oversized,
        "a job asking for 1,000,000 CPUs did not settle",
        done,
      );
      expectSettled(job, "failed", "a job asking for 1,000,000 CPUs");
      if (!job.error?.code)
        throw new RowFailure(
          `a job asking for 1,000,000 CPUs was failed without an error code: ${describeJob(job)}`,
        );
      if (job.exitCode !== undefined)
        throw new RowFailure(
          `a job asking for 1,000,000 CPUs ran (exit code ${job.exitCode}); it should be refused before it starts`,
        );
      // The runner claimed the second job after the first was queued: the first was passed over.
      const passed = await h.job(unmatched);
      if (passed.state !== "queued" || passed.attempts)
        throw new RowFailure(
          `a job labelled forelead-conformance-absent was leased: ${describeJob(passed)}`,
        );
      await h.admin.cancelJob({ apiVersion: "v1", jobId: unmatched });
      return `label not offered: not leased; 1,000,000 CPUs: failed ${job.error.code}`;
    },
  },
  {
    name: "cancel",
    holds:
      "a running job cancelled is completed cancelled by the runner within a lease length, and the runner's slot frees",
    async run(h) {
      const jobId = await h.enqueue({ script: "echo started; sleep 300" });
      await h.waitFor(jobId, "the job to cancel did not start", (j) => j.state === "running");
      await h.admin.cancelJob({ apiVersion: "v1", jobId });
      const job = await h.waitFor(
        jobId,
        "the cancelled job did not settle",
        done,
        h.options.leaseSeconds * 1000 + 5_000,
      );
      expectSettled(job, "cancelled", "the cancelled job");
      await takesNextJob(h, "after the cancel");
      return "completed cancelled; the runner took the next job";
    },
  },
  {
    name: "timeout",
    holds: "a job over its timeoutSeconds is stopped and completed failed with error timeout",
    async run(h) {
      const job = await runToEnd(h, "sleep 300", "a job over its 2 s timeout did not settle", {
        timeoutSeconds: 2,
        withinMs: 2_000 + h.options.leaseSeconds * 1000 + 10_000,
      });
      expectSettled(job, "failed", "a job over its 2 s timeout");
      if (job.error?.code !== "timeout")
        throw new RowFailure(
          `a job over its 2 s timeout was failed with ${describeJob(job)}; want error timeout`,
        );
      return "failed, error timeout";
    },
  },
  {
    name: "renew",
    holds: "a job running two and a half lease lengths keeps its lease (renewed) and succeeds",
    async run(h) {
      const seconds = Math.ceil(h.options.leaseSeconds * 2.5);
      const job = await runToEnd(
        h,
        `sleep ${seconds}; echo done`,
        `a ${seconds} s job did not settle`,
        { withinMs: seconds * 1000 + h.options.rowTimeoutSeconds * 1000 },
      );
      expectSettled(job, "succeeded", `a ${seconds} s job (lease ${h.options.leaseSeconds} s)`);
      return `a ${seconds} s job on ${h.options.leaseSeconds} s leases succeeded`;
    },
  },
  {
    name: "expired-lease",
    holds:
      "after the control plane expires a running job's lease, the runner stops " +
      "the job (its slot frees within a lease length) and sends no completion " +
      "for it",
    async run(h) {
      const jobId = await h.enqueue({ script: "echo started; sleep 300" });
      await h.waitFor(jobId, "the job did not start", (j) => j.state === "running");
      const refusedBefore = await refusedCompletions(h);
      await h.expireLease(jobId);
      const job = await h.job(jobId);
      if (job.state !== "failed" || job.failure?.reason !== "lease_lost")
        throw new RowFailure(
          `after its lease expired the job is ${describeJob(job)}; want failed lease_lost`,
        );
      // A runner completes (or not) the job it lost before it takes the next on its one slot; the
      // next job runs a few seconds, so its own completions come after the count.
      const countRefused = async () => {
        const refused = (await refusedCompletions(h)) - refusedBefore;
        if (refused > 0)
          throw new RowFailure(
            `the runner sent ${refused} completion(s) for the job after its lease ` +
              `expired; the control plane refused them`,
          );
      };
      await takesNextJob(h, "after its lease expired", countRefused, "sleep 3; echo probe");
      return "stopped; no completion sent; the runner took the next job";
    },
  },
  {
    name: "isolation",
    holds:
      "a file a job writes in its directory is not visible to the next job, in " +
      "its own directory or at the first job's path",
    async run(h) {
      const marker = `conformance-marker-${randomBytes(4).toString("hex")}`;
      const first = await runToEnd(
        h,
        `echo written > ${marker} && echo "dir=$(pwd)"`,
        "the writing job did not settle",
      );
      expectSettled(first, "succeeded", "the writing job");
      const line = (await h.logText(first.id)).find((l) => l.startsWith("dir="));
      if (!line)
        throw new RowFailure(
          `the writing job's log has no "dir=" line (its output is not in the job's log)`,
        );
      const path = `${line.slice(4).trim().replace(/\/$/, "")}/${marker}`;
      const second = await runToEnd(
        h,
        `if [ -e ${marker} ] || [ -e '${path.replace(/'/g, "")}' ]; then echo "sees ${marker}"; exit 9; fi`,
        "the reading job did not settle",
      );
      if (second.exitCode === 9)
        throw new RowFailure(
          `the next job sees the first job's file ${marker} (at ${path} or in its own directory)`,
        );
      expectSettled(second, "succeeded", "the reading job");
      return `the next job did not see ${path}`;
    },
  },
  {
    name: "upload-digest",
    holds:
      "a file the job writes to its output directory is an artifact with the " +
      "digest and size the job computed, and downloads as the same bytes",
    async run(h) {
      const file = `${h.outputDir}/conformance.bin`;
      const job = await runToEnd(
        h,
        `head -c 100000 /dev/urandom > ${file} && if command -v sha256sum ` +
          `>/dev/null; then sha256sum ${file}; else busybox sha256sum ${file}; fi`,
        "the uploading job did not settle",
      );
      expectSettled(job, "succeeded", "the uploading job");
      const computed = (await h.logText(job.id))
        .map((l) => /^([0-9a-f]{64})\s/.exec(l)?.[1])
        .find(Boolean);
      if (!computed)
        throw new RowFailure(
          "the uploading job's log has no sha256sum line (its output is not in the job's log)",
        );
      const artifact = job.artifacts.find((a) => a.name === "conformance.bin");
      if (!artifact)
        throw new RowFailure(
          `the job's artifacts do not list conformance.bin: [${job.artifacts.map((a) => a.name).join(", ")}]`,
        );
      if (artifact.digest !== `sha256:${computed}` || Number(artifact.size) !== 100_000)
        throw new RowFailure(
          `conformance.bin is listed as ${artifact.digest}, ${artifact.size} ` +
            `bytes; the job computed sha256:${computed}, 100000 bytes`,
        );
      const hash = createHash("sha256");
      for await (const chunk of h.admin.downloadArtifact({
        jobId: job.id,
        name: "conformance.bin",
      }))
        hash.update(chunk.data);
      const downloaded = hash.digest("hex");
      if (downloaded !== computed)
        throw new RowFailure(
          `conformance.bin downloads as sha256:${downloaded}; the job computed sha256:${computed}`,
        );
      return `conformance.bin sha256:${computed.slice(0, 12)}…, 100000 bytes`;
    },
  },
  {
    name: "secrets",
    holds:
      "a job gets its secret; the value is in no log line, job event, " +
      "workspace event, audit record, job view or the runner's own output",
    async run(h) {
      const value = randomBytes(32).toString("base64url");
      const job = await runToEnd(
        h,
        'test "${#CONFORMANCE_TOKEN}" -eq 43 && echo "token: $CONFORMANCE_TOKEN"',
        "the job with a secret did not settle",
        { secrets: { CONFORMANCE_TOKEN: value } },
      );
      expectSettled(job, "succeeded", "the job with a secret (it checks the secret's length)");
      const places: Array<[string, () => Promise<string>]> = [
        ["the job's log", async () => (await h.logText(job.id)).join("\n")],
        ["the job's events", async () => JSON.stringify(await h.jobEvents(job.id))],
        ["the workspace's event stream", async () => JSON.stringify(await h.workspaceEvents())],
        ["the audit trail", () => h.auditText()],
        [
          "the job view",
          async () =>
            JSON.stringify(await h.job(job.id), (_, v: unknown) =>
              typeof v === "bigint" ? v.toString() : v,
            ),
        ],
        ["the runner's own output", () => h.runnerOutput()],
      ];
      if (!(await h.logText(job.id)).some((l) => l.startsWith("token: ")))
        throw new RowFailure(
          "the job's log has no \"token: \" line: its output is not in the job's log, so the masking cannot be seen",
        );
      for (const [where, read] of places)
        if ((await read()).includes(value))
          throw new RowFailure(`the secret's value is in ${where}`);
      return `not in ${places.map(([where]) => where.replace(/^the /, "")).join(", ")}`;
    },
  },
  {
    name: "repeated-complete",
    holds:
      "every completion the runner sent was accepted (a repeat only with the " +
      "same completionId and body), and each job settled once",
    async run(h) {
      const job = await runToEnd(h, "echo once", "the job did not settle");
      expectSettled(job, "succeeded", "the job");
      const counts = await h.answered("POST /v1/runner/complete");
      const refused = [...counts].filter(([code]) => code.startsWith("4"));
      if (refused.length)
        throw new RowFailure(
          `the control plane refused completions: ` +
            `${refused.map(([code, n]) => `${n} × ${code}`).join(", ")} (a second, ` +
            `different completion of a settled job, or one under a dead lease)`,
        );
      const settled = new Map<string, number>();
      for (const e of await h.workspaceEvents())
        if (e.type === "job.settled") settled.set(e.jobId, (settled.get(e.jobId) ?? 0) + 1);
      const twice = [...settled].filter(([, n]) => n > 1);
      if (twice.length)
        throw new RowFailure(
          `jobs settled more than once: ${twice.map(([id, n]) => `${id} × ${n}`).join(", ")}`,
        );
      const accepted = [...counts].reduce((sum, [, n]) => sum + n, 0);
      return `${accepted} completion(s), all accepted; ${settled.size} jobs settled once each`;
    },
  },
  {
    name: "progress",
    features: [features.progress],
    holds:
      "::forelead::progress 3/10 then 100 are job.progress events, and the job view shows the last",
    async run(h) {
      const job = await runToEnd(
        h,
        "echo '::forelead::progress 3/10'; sleep 1; echo '::forelead::progress 100'",
        "the job printing progress lines did not settle",
      );
      expectSettled(job, "succeeded", "the job printing progress lines");
      const events = (await h.jobEvents(job.id)) as Array<{
        type?: unknown;
        percent?: unknown;
        done?: unknown;
        total?: unknown;
      }>;
      const progress = events.filter((e) => e?.type === "job.progress");
      const shown = JSON.stringify(progress);
      if (!progress.some((e) => e.done === 3 && e.total === 10))
        throw new RowFailure(
          `no job.progress event with done 3 of total 10 for "::forelead::progress ` +
            `3/10"; the job's job.progress events: ${shown}`,
        );
      if (!progress.some((e) => e.percent === 100))
        throw new RowFailure(
          `no job.progress event with percent 100 for "::forelead::progress 100"; ` +
            `the job's job.progress events: ${shown}`,
        );
      if (job.progress?.percent !== 100)
        throw new RowFailure(
          `the job view's progress is ` +
            `${JSON.stringify(job.progress ?? null, (_, v: unknown) => (typeof v === "bigint" ? v.toString() : v))}; ` +
            `want percent 100, the last line's`,
        );
      return `${progress.length} job.progress events (3/10, 100); the job view shows 100 percent`;
    },
  },
  {
    name: "result",
    features: [features.result],
    holds:
      "a job's result.json in its output directory, and a ::forelead::result " +
      "line, are the job's result in the job view",
    async run(h) {
      const nonce = randomBytes(4).toString("hex");
      const checks: Array<[string, string, string]> = [
        [
          "result.json",
          `printf '%s' '{"kit":"file","nonce":"${nonce}"}' > ${h.outputDir}/result.json`,
          "file",
        ],
        [
          "a ::forelead::result line",
          `echo '::forelead::result {"kit":"line","nonce":"${nonce}"}'`,
          "line",
        ],
      ];
      for (const [what, script, kit] of checks) {
        const job = await runToEnd(h, script, `the job writing ${what} did not settle`);
        expectSettled(job, "succeeded", `the job writing ${what}`);
        if (job.result?.kit !== kit || job.result?.nonce !== nonce)
          throw new RowFailure(
            `the job writing ${what} has the result ` +
              `${JSON.stringify(job.result ?? null)} in its view; want ` +
              `{"kit":"${kit}","nonce":"${nonce}"}`,
          );
      }
      return "result.json and a result line each are the job's result";
    },
  },
  {
    name: "suspend",
    features: suspendFeatures,
    holds:
      "a job writing a checkpoint and an input request waits for input with no " +
      "attempt charged; answered, it resumes and finds the answer and its " +
      "checkpoint in its input directory",
    async run(h) {
      const requestId = `kit-${randomBytes(3).toString("hex")}`;
      const saved = `saved-${randomBytes(4).toString("hex")}`;
      const answered = `answered-${randomBytes(4).toString("hex")}`;
      const request = {
        id: requestId,
        prompt: "conformance kit: go on?",
        expiresInSeconds: 600,
        schema: { type: "object", properties: { word: { type: "string" } }, required: ["word"] },
      };
      const [input, output] = [h.inputDir, h.outputDir];
      // One script for both attempts: the first saves and asks, the resumed one prints what it
      // found.
      const script = [
        `if [ -f ${input}/${inputPaths.answer} ]; then echo "answer: $(cat ` +
          `${input}/${inputPaths.answer})"; echo "checkpoint: $(cat ` +
          `${input}/${inputPaths.checkpointDir}/state.txt)"; exit 0; fi`,
        `mkdir -p ${output}/${inputPaths.checkpointDir} && echo ${saved} > ` +
          `${output}/${inputPaths.checkpointDir}/state.txt`,
        `printf '%s' '${JSON.stringify(request)}' > ${output}/${inputPaths.request}`,
      ].join("\n");
      const jobId = await h.enqueue({ script });
      const waiting = await h.waitFor(
        jobId,
        "the job asking for input did not suspend",
        (j) => j.state === "waiting_input" || done(j),
      );
      if (waiting.state !== "waiting_input")
        throw new RowFailure(
          `the job asking for input is ${describeJob(waiting)}; want waiting_input`,
        );
      if (waiting.attempts)
        throw new RowFailure(
          `the suspended job has ${waiting.attempts} attempt(s) charged; a suspend gives its attempt back (want 0)`,
        );
      if (waiting.inputRequest?.id !== requestId)
        throw new RowFailure(
          `the suspended job's view shows the input request ` +
            `${JSON.stringify(waiting.inputRequest?.id ?? null)}; want ${requestId}`,
        );
      if (!waiting.checkpoint.some((a) => a.name === "state.txt"))
        throw new RowFailure(
          `the suspended job's checkpoint does not list state.txt: ` +
            `[${waiting.checkpoint.map((a) => a.name).join(", ")}]`,
        );
      await h.input.answerInput({
        apiVersion: "v1",
        jobId,
        requestId,
        answer: fromJson(ValueSchema, { word: answered }),
      });
      const job = await h.waitFor(jobId, "the answered job did not settle", done);
      expectSettled(job, "succeeded", "the answered job");
      const log = await h.logText(jobId);
      const answerLine = log.find((l) => l.startsWith("answer: "));
      if (!answerLine?.includes(answered))
        throw new RowFailure(
          `the resumed job did not print the answer ${answered} from ` +
            `${input}/${inputPaths.answer}; its line: ` +
            `${JSON.stringify(answerLine ?? null)}`,
        );
      const checkpointLine = log.find((l) => l.startsWith("checkpoint: "));
      if (checkpointLine?.trim() !== `checkpoint: ${saved}`)
        throw new RowFailure(
          `the resumed job did not print its checkpoint ${saved} from ` +
            `${input}/${inputPaths.checkpointDir}/state.txt; its line: ` +
            `${JSON.stringify(checkpointLine ?? null)}`,
        );
      return "waiting_input, no attempt charged; answered, resumed with the answer and its checkpoint";
    },
  },
];
