import "reflect-metadata";
import { existsSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { eventually } from "../support/actors.js";
import { databaseKind } from "../support/database.js";
import { useControlPlane } from "../support/fixture.js";
import {
  executorsUnderTest,
  specFor,
  startTestRunner,
  type ExecutorKind,
  type TestRunner,
} from "../support/runner-agent.js";
import { readEntries } from "../support/streams.js";
import { maxLineChars } from "../../src/runner/executors/lines.js";

// Job secrets on the runner (issue 16 item 3): the job gets them as env and as files in a private
// directory that is gone afterwards, and its output is masked as one stream, so a value split over
// the 16 KiB cut of a long line, over two writes or holding a line break leaves no 8 characters of
// itself in the stored log. Each case runs twice: with the secrets put into the claimed lease by
// the test (the runner's side alone), and with the secrets given to EnqueueJob and delivered by the
// control plane in the claim reply.
const cp = useControlPlane({ leaseSeconds: 6 });
const { admin } = cp;
let n = 0;
const tag = Math.random().toString(36).slice(2, 8);
const executors = await executorsUnderTest();

const secrets = {
  DEPLOY_TOKEN: "tok-7f3a9c2e-51b8-4d0e-a6f1-93c4e8b2d7a5",
  MULTI_LINE_SECRET: "first-line-of-the-secret-8c1d\nsecond-line-of-the-secret-2e9f",
};
const secretFiles = {
  "deploy.pem":
    "-----BEGIN TEST KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7\n-----END TEST KEY-----\n",
};
const values = [...Object.values(secrets), ...Object.values(secretFiles)];
// Where the 16 KiB cut of a long line falls inside the token.
const pad = maxLineChars - 12;

/** Prints the secret directory, and in a container the host directory bound there. */
const showDir =
  'echo "dir=$FORELEAD_SECRETS_DIR"; grep " /run/secrets " ' +
  '/proc/self/mountinfo | while read -r l; do echo "mount $l"; done';

/**
 * What the job does: prints the secrets every way the masker must hold against, and shows the
 * secret files.
 */
const script = [
  "s=x; i=0; while [ $i -lt 14 ]; do s=$s$s; i=$((i+1)); done", // 16384 x
  'echo "env=$DEPLOY_TOKEN"',
  // two writes, cut at 16 KiB inside the token
  `printf '%s' "$s" | head -c ${pad}; printf '%s\\n' "$DEPLOY_TOKEN"`,
  // one write, cut at 16 KiB inside the token
  `printf '%s%s\\n' "$(printf '%s' "$s" | head -c ${pad})" "$DEPLOY_TOKEN"`,
  `printf 'two=%s' "$(printf '%s' "$DEPLOY_TOKEN" | head -c 20)"; printf ` +
    `'%s\\n' "$(printf '%s' "$DEPLOY_TOKEN" | tail -c +21)"`,
  'echo "multi=$MULTI_LINE_SECRET"',
  'echo "err=$DEPLOY_TOKEN" >&2',
  'echo "file:"; cat "$FORELEAD_SECRETS_DIR/deploy.pem"; echo "<end"',
  'echo "size $(wc -c < "$FORELEAD_SECRETS_DIR/deploy.pem")"',
  'echo "dirmode $(ls -ld "$FORELEAD_SECRETS_DIR")"',
  'echo "filemode $(ls -l "$FORELEAD_SECRETS_DIR/deploy.pem")"',
  showDir,
].join("\n");

async function settled(jobId: string) {
  return eventually(`job ${jobId} to settle`, async () => {
    const job = (await admin.job(jobId)).json.job;
    return ["succeeded", "failed", "cancelled"].includes(job.state) ? job : undefined;
  });
}

/** Every substring of `value` of 8 characters. */
const eightCharPieces = (value: string) =>
  Array.from({ length: value.length - 7 }, (_, i) => value.slice(i, i + 8));

type Delivery = "put into the claimed lease" | "given to EnqueueJob, delivered in the claim reply";

/**
 * A runner of its own in a workspace of its own; with "put into the claimed lease", it adds
 * `leaseSecrets` to every lease it claims.
 */
async function secretRunner(
  executor: ExecutorKind,
  delivery: Delivery,
  leaseSecrets: { secrets: Record<string, string>; secretFiles: Record<string, string> } = {
    secrets,
    secretFiles,
  },
): Promise<{ runner: TestRunner; ws: string }> {
  const ws = `sec${++n}`;
  const runner = await startTestRunner(cp, {
    runnerId: `s${n}-${tag}`,
    workspaceId: ws,
    executor,
    ...(delivery === "put into the claimed lease"
      ? {
          onLease: (lease) =>
            Object.assign(lease, {
              secrets: { ...leaseSecrets.secrets },
              secretFiles: { ...leaseSecrets.secretFiles },
            }),
        }
      : {}),
  });
  return { runner, ws };
}

async function enqueueSecretJob(
  ws: string,
  executor: ExecutorKind,
  delivery: Delivery,
  argv: string[],
): Promise<string> {
  const extra = delivery !== "put into the claimed lease" ? { secrets, secretFiles } : {};
  const reply = await admin.enqueue({
    workspaceId: ws,
    spec: specFor(executor, { argv }),
    ...extra,
  });
  expect(reply.status, reply.text).toBe(200);
  return reply.json.job.id as string;
}

/**
 * Checks the secret directory the job named in its "dir=" line (and, in a container, its "mount"
 * line) is gone.
 */
function expectSecretDirGone(executor: ExecutorKind, lines: string[]): void {
  const dir = lines.find((l) => l.startsWith("dir="))?.slice(4);
  if (executor === "process") {
    expect(dir).toMatch(/\/forelead-secrets-[^/]+$/);
    expect(existsSync(dir!)).toBe(false);
    return;
  }
  expect(dir).toBe("/run/secrets");
  // The host directory bound there, by the name the container's mount table gives it.
  const hostName = lines
    .find((l) => l.startsWith("mount "))
    ?.split(" ")[4]
    ?.split("/")
    .pop();
  expect(hostName).toMatch(/^forelead-secrets-/);
  for (const root of ["/dev/shm", tmpdir()]) expect(existsSync(join(root, hostName!))).toBe(false);
}

async function runSecretJob(
  executor: ExecutorKind,
  delivery: Delivery,
): Promise<{ runner: TestRunner; jobId: string; stored: string; everything: string }> {
  const { runner, ws } = await secretRunner(executor, delivery);
  const jobId = await enqueueSecretJob(ws, executor, delivery, ["sh", "-c", script]);
  const job = await settled(jobId);
  const entries = await readEntries(admin, jobId, "logs", "?pageSize=10000");
  const stored = entries.map((e) => (e.data as { text: string }).text).join("\n");
  const events = await readEntries(admin, jobId, "events", "?pageSize=10000");
  const everything = JSON.stringify([stored, events, job, runner.log, runner.recorded.job(jobId)]);
  return { runner, jobId, stored, everything };
}

for (const delivery of [
  "put into the claimed lease",
  "given to EnqueueJob, delivered in the claim reply",
] as const) {
  // "given to EnqueueJob" needs the control plane to deliver secrets in the claim reply (issue 16
  // item 1).
  describe.each(executors)(
    `job secrets ${delivery}, on the %s executor (${databaseKind})`,
    (executor) => {
      it(
        "the job sees its env secrets and secret files; the stored log, events, " +
          "job view and runner log hold no 8 characters of any value, however it " +
          "was printed",
        async () => {
          const { runner, stored, everything, jobId } = await runSecretJob(executor, delivery);
          try {
            const lines = stored.split("\n");
            expect(lines).toContain("env=***"); // masked: the job printed the exact value
            // across the 16 KiB cut, in two writes and in one
            expect(lines.filter((l) => l === `${"x".repeat(pad)}***`)).toHaveLength(2);
            expect(lines).toContain("two=***");
            expect(lines).toContain("multi=***");
            expect(lines).toContain("err=***");
            expect(lines).toContain("***<end");
            expect(lines).toContain(`size ${Buffer.byteLength(secretFiles["deploy.pem"])}`);
            expect(lines.find((l) => l.startsWith("dirmode "))).toMatch(/^dirmode drwx------ /);
            expect(lines.find((l) => l.startsWith("filemode "))).toMatch(/^filemode -r-------- /);
            for (const value of values)
              for (const piece of eightCharPieces(value))
                expect(everything, `a piece of a secret: ${JSON.stringify(piece)}`).not.toContain(
                  piece,
                );
            expect((await admin.job(jobId)).json.job.state).toBe("succeeded");
          } finally {
            await runner.close();
          }
        },
      );

      it("the secret files are gone once the job has ended", async () => {
        const { runner, stored } = await runSecretJob(executor, delivery);
        try {
          expectSecretDirGone(executor, stored.split("\n"));
        } finally {
          await runner.close();
        }
      });
    },
  );
}

describe.each(executors)(
  `job secrets put into the claimed lease on the %s executor, whatever the job's end (${databaseKind})`,
  (executor) => {
    it("a job that fails, and one cancelled while it runs, leave no secret files behind", async () => {
      const { runner, ws } = await secretRunner(executor, "put into the claimed lease");
      try {
        const failing = await enqueueSecretJob(ws, executor, "put into the claimed lease", [
          "sh",
          "-c",
          `${showDir}; exit 3`,
        ]);
        expect((await settled(failing)).state).toBe("failed");
        expectSecretDirGone(
          executor,
          runner.recorded.job(failing).logs.map((l) => l.text),
        );

        const cancelled = await enqueueSecretJob(ws, executor, "put into the claimed lease", [
          "sh",
          "-c",
          `${showDir}; echo up; sleep 60`,
        ]);
        await runner.waitForLine(cancelled, /^up$/);
        expect((await admin.cancel(cancelled)).status).toBe(200);
        expect((await settled(cancelled)).state).toBe("cancelled");
        expectSecretDirGone(
          executor,
          runner.recorded.job(cancelled).logs.map((l) => l.text),
        );
      } finally {
        await runner.close();
      }
    });

    it(
      "a secret an environment cannot carry (NUL) fails the job with " +
        "invalid_secrets naming the variable, never the value",
      async () => {
        const value = "nul-\u0000-secret-value-5d2c";
        const { runner, ws } = await secretRunner(executor, "put into the claimed lease", {
          secrets: { API_TOKEN: value },
          secretFiles: {},
        });
        try {
          const jobId = await enqueueSecretJob(ws, executor, "put into the claimed lease", [
            "sh",
            "-c",
            "echo never",
          ]);
          const job = await settled(jobId);
          expect(job).toMatchObject({ state: "failed", error: { code: "invalid_secrets" } });
          expect(job.error.message).toContain("API_TOKEN");
          expect(job.error.retryable ?? false).toBe(false);
          expect(JSON.stringify([job, runner.log, runner.recorded.job(jobId)])).not.toContain(
            "secret-value",
          );
        } finally {
          await runner.close();
        }
      },
    );
  },
);

describe.runIf(executors.includes("process"))(
  `secrets printed escaped or encoded, on the process executor (${databaseKind})`,
  () => {
    it(
      "a secret the job prints JSON-escaped (json.dumps), percent-encoded or " +
        "in base64 is masked in the stored log, result and events",
      async () => {
        const escaped = { AUTH: 'S3CR3T-"Q\\UOTE-8888', OTHER: "S3CR3T-caf\u00e9-9999" };
        const { runner, ws } = await secretRunner("process", "put into the claimed lease", {
          secrets: escaped,
          secretFiles: {},
        });
        const program = [
          "import base64, json, os, urllib.parse",
          "a, o = os.environ['AUTH'], os.environ['OTHER']",
          "print('::forelead::result ' + json.dumps({'auth': a, 'other': o}))",
          "print('dumps=' + json.dumps([a, o]))",
          "print('quoted=' + urllib.parse.quote(a, safe='') + ' ' + urllib.parse.quote_plus(o))",
          "print('b64=' + base64.b64encode(a.encode()).decode() + ' ' + " +
            "base64.b64encode(('user:' + o).encode()).decode())",
        ].join("\n");
        try {
          const jobId = await enqueueSecretJob(ws, "process", "put into the claimed lease", [
            "python3",
            "-c",
            program,
          ]);
          const job = await settled(jobId);
          expect(job.state, JSON.stringify(job)).toBe("succeeded");
          const entries = await readEntries(admin, jobId, "logs", "?pageSize=10000");
          const stored = entries.map((e) => (e.data as { text: string }).text).join("\n");
          const events = JSON.stringify(
            await readEntries(admin, jobId, "events", "?pageSize=10000"),
          );
          expect(stored).toContain('dumps=["***", "***"]');
          // Every form the job printed, and every 8 characters of it.
          const forms = Object.values(escaped).flatMap((v) => [
            v,
            JSON.stringify(v).slice(1, -1),
            JSON.stringify(v)
              .slice(1, -1)
              .replace(
                /[\u007f-\uffff]/g,
                (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`,
              ),
            encodeURIComponent(v),
            Buffer.from(v).toString("base64"),
          ]);
          for (const text of [stored, events, JSON.stringify(job)])
            for (const form of forms)
              for (const piece of eightCharPieces(form))
                expect(text, `a piece of a secret: ${JSON.stringify(piece)}`).not.toContain(piece);
        } finally {
          await runner.close();
        }
      },
    );
  },
);
