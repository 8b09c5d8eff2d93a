import "reflect-metadata";
import type http2 from "node:http2";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { create, toBinary } from "@bufbuild/protobuf";
import { ConnectError, type Client } from "@connectrpc/connect";
import { codeToString } from "@connectrpc/connect/protocol-connect";
import { sql } from "kysely";
import { AdminService, EnqueueJobRequestSchema } from "../../gen/forelead/admin/v1/admin_pb.js";
import { EnrollService } from "../../gen/forelead/enroll/v1/enroll_pb.js";
import { RunnerService } from "../../gen/forelead/runner/v1/runner_pb.js";
import { jobBody, leasedJob, registeredRunner, type LeasedJob } from "../support/actors.js";
import {
  createRestClient,
  createTestClient,
  type RestClient,
  type RestReply,
} from "../support/clients.js";
import { databaseKind } from "../support/database.js";
import { useControlPlane } from "../support/fixture.js";
import { makeCsr } from "../support/identity.js";
import { readSequences } from "../support/streams.js";

const cp = useControlPlane();
const { admin } = cp;
const ws = "hostile";
const lastAccepted = "forelead-last-accepted-sequence";

/**
 * Every error the server logged while this file ran. An internal error is
 * logged as "error <incident> in <route>: ..." (src/api/errors.ts), and bad
 * input must never be one.
 */
const logged: string[] = [];
beforeAll(() => {
  vi.spyOn(console, "error").mockImplementation(
    (...args: unknown[]) => void logged.push(args.map(String).join(" ")),
  );
});
afterAll(() => vi.restoreAllMocks());

/** What a refusal looked like on either surface. */
interface Refusal {
  readonly status?: number;
  readonly code: string;
  readonly message: string;
  readonly header?: string;
}

const fromRest = (r: RestReply): Refusal => ({
  status: r.status,
  code: r.json?.code,
  message: r.json?.message ?? r.text,
  header: r.headers[lastAccepted] as string | undefined,
});
async function fromRpc(call: () => Promise<unknown>): Promise<Refusal> {
  try {
    await call();
  } catch (err) {
    const e = ConnectError.from(err);
    return {
      code: codeToString(e.code),
      message: e.rawMessage,
      header: e.metadata.get(lastAccepted) ?? undefined,
    };
  }
  throw new Error("the call was accepted");
}

/** A raw Connect unary call (protobuf or JSON body), for bytes a generated client cannot send. */
async function rawConnect(
  rest: RestClient,
  path: string,
  body: Buffer,
  contentType: string,
): Promise<Refusal> {
  return fromRest(await rest.request("POST", path, body, { "content-type": contentType }));
}

/** The server serves a legitimate client within 1 s. */
async function servedAfter(): Promise<void> {
  const started = performance.now();
  const reply = await admin.rest.request("GET", `/v1/admin/jobs?workspaceId=${ws}&pageSize=1`);
  expect(reply.status, reply.text).toBe(200);
  expect(performance.now() - started).toBeLessThan(1000);
}

const jobCount = async () =>
  Number(
    (
      await sql<{ n: string }>`select count(*) as n from jobs where workspace_id = ${ws}`.execute(
        cp.plane.store.db,
      )
    ).rows[0]!.n,
  );
const grantCount = async () =>
  Number(
    (
      await sql<{ n: string }>`select count(*) as n from enrollment_grants`.execute(
        cp.plane.store.db,
      )
    ).rows[0]!.n,
  );
const retirements = async () =>
  Number(
    (
      await sql<{ n: string }>`select count(*) as n from runner_retirements`.execute(
        cp.plane.store.db,
      )
    ).rows[0]!.n,
  );
const runnerRow = async (id: string) =>
  (
    await sql<{
      memory_bytes: number;
    }>`select memory_bytes from runners where runner_id = ${id}`.execute(cp.plane.store.db)
  ).rows[0];

/** Env, argv and the like with a byte sequence that is not UTF-8 (C3 28 FF) where "@@@" stands. */
const invalidUtf8 = (input: string | Uint8Array) => {
  const bytes = Buffer.from(typeof input === "string" ? Buffer.from(input, "utf8") : input);
  const at = bytes.indexOf("@@@");
  Buffer.from([0xc3, 0x28, 0xff]).copy(bytes, at);
  return bytes;
};
const secret = "s3cr\u0000t";

let job: LeasedJob;
let runnerRpc: Client<typeof RunnerService>;
let adminRpc: Client<typeof AdminService>;
let enrollRpc: Client<typeof EnrollService>;
let raw: RestClient;

beforeAll(async () => {
  job = await leasedJob(cp, admin, "hx-runner", ws);
  runnerRpc = createTestClient(
    RunnerService,
    cp.url,
    cp.pki.ca.certPem,
    await cp.pki.runner("hx-runner", ws),
    "connect-binary",
  );
  adminRpc = createTestClient(
    AdminService,
    cp.url,
    cp.pki.ca.certPem,
    await cp.pki.service("test-admin"),
    "connect-binary",
  );
  enrollRpc = createTestClient(
    EnrollService,
    cp.url,
    cp.pki.ca.certPem,
    await cp.pki.service("test-admin"),
    "grpc",
  );
  raw = createRestClient(cp.url, cp.pki.ca.certPem, await cp.pki.service("test-admin"));
});
afterAll(async () => {
  await Promise.all([job.runner.close(), raw.close()]);
});

type Row = readonly [
  name: string,
  send: () => Promise<Refusal>,
  expected: { status: number; code: string; message: RegExp; header?: string },
  /** A snapshot of what the input would have changed: the same after the refusal. */
  state: () => Promise<unknown>,
];

const lease = () => ({ apiVersion: "v1", jobId: job.jobId, leaseToken: job.token });
const enqueueSpec = (spec: Record<string, unknown>) =>
  jobBody({
    workspaceId: ws,
    spec: { image: "busybox", argv: ["true"], timeoutSeconds: 60, ...spec },
  });
const jobState = async () => (await admin.job(job.jobId)).json.job.state as string;
const logs = () => readSequences(admin, job.jobId, "logs");
const events = () => readSequences(admin, job.jobId, "events");
const freshGrant = async () =>
  (
    await admin.rest.request("POST", "/v1/admin/enrollment-grants", {
      apiVersion: "v1",
      workspaceId: ws,
    })
  ).json.grant as string;
const nul = (field: string) =>
  new RegExp(`field "${field.replace(/[.[\]]/g, "\\$&")}" contains NUL \\(U\\+0000\\)`);
const notUtf8 = (field: string) =>
  new RegExp(`field "${field.replace(/[.[\]]/g, "\\$&")}" is not valid UTF-8`);
const bad = (message: RegExp, header?: string) => ({
  status: 400,
  code: "invalid_argument",
  message,
  header,
});

const rest: readonly Row[] = [
  [
    "NUL in a (secret) env value",
    () => admin.enqueue(enqueueSpec({ env: { SECRET: secret } })).then(fromRest),
    bad(nul("spec.env.SECRET")),
    jobCount,
  ],
  [
    "NUL in argv",
    () => admin.enqueue(enqueueSpec({ argv: ["true", "a\u0000"] })).then(fromRest),
    bad(nul("spec.argv[1]")),
    jobCount,
  ],
  [
    "NUL in idempotencyKey",
    () => admin.enqueue({ workspaceId: ws, idempotencyKey: "k\u0000" }).then(fromRest),
    bad(nul("idempotencyKey")),
    jobCount,
  ],
  [
    "NUL in a query parameter (workspaceId=w1%00)",
    () => admin.rest.request("GET", "/v1/admin/jobs?workspaceId=w1%00").then(fromRest),
    bad(nul("workspaceId")),
    jobCount,
  ],
  [
    "NUL in a retire reason",
    () =>
      admin.rest
        .request("POST", "/v1/admin/runners/hx-other/retire", {
          apiVersion: "v1",
          workspaceId: ws,
          reason: "leak\u0000",
        })
        .then(fromRest),
    bad(nul("reason")),
    retirements,
  ],
  [
    "NUL in a completion's error message",
    () =>
      job.runner
        .complete(job.jobId, job.token, {
          outcome: "failed",
          exitCode: 1,
          error: { code: "x", message: "boom\u0000" },
        })
        .then(fromRest),
    bad(nul("error.message")),
    jobState,
  ],
  [
    "NUL in log text",
    () =>
      job.runner.rest
        .ndjson("/v1/runner/logs", [job.msg(1, { stream: "stdout", text: "a\u0000b" })])
        .then(fromRest),
    bad(/^line 1: field "data\.text" contains NUL/, "0"),
    logs,
  ],
  [
    "NUL in event data",
    () =>
      job.runner.rest
        .ndjson("/v1/runner/events", [job.msg(1, { type: "note", detail: "\u0000" })])
        .then(fromRest),
    bad(/^line 1: field "data\.detail" contains NUL/, "0"),
    events,
  ],
  [
    "invalid UTF-8 in an env value",
    () =>
      admin.rest
        .request(
          "POST",
          "/v1/admin/jobs",
          invalidUtf8(JSON.stringify(enqueueSpec({ env: { SECRET: "x@@@y" } }))),
        )
        .then(fromRest),
    bad(notUtf8("spec.env.SECRET")),
    jobCount,
  ],
  [
    "invalid UTF-8 in an NDJSON line",
    () =>
      job.runner.rest
        .request(
          "POST",
          "/v1/runner/logs",
          invalidUtf8(`${JSON.stringify(job.msg(1, { stream: "stdout", text: "@@@" }))}\n`),
          { "content-type": "application/x-ndjson" },
        )
        .then(fromRest),
    bad(/^line 1: field "data\.text" is not valid UTF-8/, "0"),
    logs,
  ],
  [
    "invalid UTF-8 in a query parameter (%C3%28)",
    () => admin.rest.request("GET", "/v1/admin/jobs?workspaceId=%C3%28").then(fromRest),
    bad(/query parameter "workspaceId" is not valid percent-encoded UTF-8/),
    jobCount,
  ],
  [
    "invalid UTF-8 in a path parameter",
    () => admin.rest.request("GET", "/v1/admin/jobs/%C3%28").then(fromRest),
    bad(/path parameter jobId is not valid percent-encoded UTF-8/),
    jobCount,
  ],
  [
    'a grant for runnerId ".."',
    () =>
      admin.rest
        .request("POST", "/v1/admin/enrollment-grants", {
          apiVersion: "v1",
          workspaceId: ws,
          runnerId: "..",
        })
        .then(fromRest),
    bad(/runnerId "\.\." is not a valid id/),
    grantCount,
  ],
  [
    'a grant for workspaceId ".."',
    () =>
      admin.rest
        .request("POST", "/v1/admin/enrollment-grants", { apiVersion: "v1", workspaceId: ".." })
        .then(fromRest),
    bad(/workspaceId "\.\." is not a valid id/),
    grantCount,
  ],
  [
    'enrolling runnerId ".."',
    async () => {
      const grant = await freshGrant();
      const enrolling = createRestClient(cp.url, cp.pki.ca.certPem);
      try {
        return fromRest(
          await enrolling.request("POST", "/v1/enroll", {
            apiVersion: "v1",
            grant,
            runnerId: "..",
            csr: (await makeCsr()).csrPem,
          }),
        );
      } finally {
        await enrolling.close();
      }
    },
    bad(/runnerId "\.\." is not a valid id/),
    async () =>
      (
        await sql`select count(*) as n from enrollment_grants where used_at is not null`.execute(
          cp.plane.store.db,
        )
      ).rows,
  ],
  [
    'int64 past 2^53 as a string (memoryBytes "9007199254740993")',
    async () => await registeredRunnerRefusal({ memoryBytes: "9007199254740993" }),
    bad(/field "memoryBytes" is 9007199254740993, past 2\^53 - 1/),
    () => runnerRow("hx-reg"),
  ],
  [
    "int64 past 2^53 as a JSON number (memoryBytes 9007199254740993)",
    () => registeredRunnerRefusal('"memoryBytes":9007199254740993'),
    bad(
      /field "memoryBytes": the number 9007199254740993 is past 2\^53 - 1.*send 64-bit integers as strings \("9007199254740993"\)/,
    ),
    () => runnerRow("hx-reg"),
  ],
  [
    "a log stream other than stdout|stderr",
    () =>
      job.runner.rest
        .ndjson("/v1/runner/logs", [job.msg(1, { stream: "stdin", text: "x" })])
        .then(fromRest),
    bad(/^line 1: data's "stream" is "stdin", not "stdout" or "stderr"/, "0"),
    logs,
  ],
];

/** Registers runner hx-reg with `override` (fields, or raw JSON members spliced in). */
async function registeredRunnerRefusal(
  override: Record<string, unknown> | string,
): Promise<Refusal> {
  const rest = createRestClient(cp.url, cp.pki.ca.certPem, await cp.pki.runner("hx-reg", ws));
  try {
    const base = {
      apiVersion: "v1",
      runnerId: "hx-reg",
      workspaceId: ws,
      slots: 1,
      cpu: 2,
      architecture: "amd64",
      labels: ["linux"],
    };
    const body =
      typeof override === "string"
        ? JSON.stringify(base).replace(/}$/, `,${override}}`)
        : JSON.stringify({ ...base, ...override });
    return fromRest(await rest.request("POST", "/v1/runner/register", body));
  } finally {
    await rest.close();
  }
}

const rpcSpec = (spec: Record<string, unknown>) => ({
  apiVersion: "v1",
  workspaceId: ws,
  labels: ["linux"],
  spec: { image: "busybox", argv: ["true"], timeoutSeconds: 60, ...spec },
});
async function* one<T>(m: T): AsyncGenerator<T> {
  yield m;
}
const rpcLog = (data: unknown) =>
  one({
    apiVersion: "v1",
    runnerId: "hx-runner",
    jobId: job.jobId,
    leaseToken: job.token,
    sequence: 1n,
    data: data as never,
  });

const connect: readonly Row[] = [
  [
    "NUL in a (secret) env value",
    () => fromRpc(() => adminRpc.enqueueJob(rpcSpec({ env: { SECRET: secret } }))),
    bad(nul("spec.env.SECRET")),
    jobCount,
  ],
  [
    "NUL in argv",
    () => fromRpc(() => adminRpc.enqueueJob(rpcSpec({ argv: ["true", "a\u0000"] }))),
    bad(nul("spec.argv[1]")),
    jobCount,
  ],
  [
    "NUL in idempotencyKey",
    () => fromRpc(() => adminRpc.enqueueJob({ ...rpcSpec({}), idempotencyKey: "k\u0000" })),
    bad(nul("idempotencyKey")),
    jobCount,
  ],
  [
    "NUL in a list filter (workspaceId)",
    () => fromRpc(() => adminRpc.listJobs({ workspaceId: "w1\u0000" })),
    bad(nul("workspaceId")),
    jobCount,
  ],
  [
    "NUL in a retire reason",
    () =>
      fromRpc(() =>
        adminRpc.retireRunner({
          apiVersion: "v1",
          runnerId: "hx-other",
          workspaceId: ws,
          reason: "leak\u0000",
        }),
      ),
    bad(nul("reason")),
    retirements,
  ],
  [
    "NUL in a completion's error message",
    () =>
      fromRpc(() =>
        runnerRpc.complete({
          ...lease(),
          completionId: "c1",
          outcome: "failed",
          exitCode: 1,
          error: { code: "x", message: "boom\u0000" },
        }),
      ),
    bad(nul("error.message")),
    jobState,
  ],
  [
    "NUL in log text",
    () =>
      fromRpc(() =>
        runnerRpc.logs(
          rpcLog({
            kind: {
              case: "structValue",
              value: {
                fields: {
                  stream: { kind: { case: "stringValue", value: "stdout" } },
                  text: { kind: { case: "stringValue", value: "a\u0000" } },
                },
              },
            },
          }),
        ),
      ),
    bad(/^message 1: field "data\.text" contains NUL/, "0"),
    logs,
  ],
  [
    "invalid UTF-8 in an env value (Connect protobuf)",
    () =>
      rawConnect(
        raw,
        "/forelead.admin.v1.AdminService/EnqueueJob",
        invalidUtf8(
          toBinary(
            EnqueueJobRequestSchema,
            create(EnqueueJobRequestSchema, rpcSpec({ env: { SECRET: "x@@@y" } })),
          ),
        ),
        "application/proto",
      ),
    bad(notUtf8("spec.env.SECRET")),
    jobCount,
  ],
  [
    "invalid UTF-8 in an env value (Connect JSON)",
    () =>
      rawConnect(
        raw,
        "/forelead.admin.v1.AdminService/EnqueueJob",
        invalidUtf8(JSON.stringify(rpcSpec({ env: { SECRET: "x@@@y" } }))),
        "application/json",
      ),
    bad(notUtf8("spec.env.SECRET")),
    jobCount,
  ],
  [
    'a grant for runnerId ".."',
    () =>
      fromRpc(() =>
        adminRpc.createEnrollmentGrant({ apiVersion: "v1", workspaceId: ws, runnerId: ".." }),
      ),
    bad(/runnerId "\.\." is not a valid id/),
    grantCount,
  ],
  [
    'enrolling runnerId ".."',
    async () => {
      const grant = await freshGrant();
      return fromRpc(async () =>
        enrollRpc.enroll({
          apiVersion: "v1",
          grant,
          runnerId: "..",
          csr: (await makeCsr()).csrPem,
        }),
      );
    },
    bad(/runnerId "\.\." is not a valid id/),
    async () =>
      (
        await sql`select count(*) as n from enrollment_grants where used_at is not null`.execute(
          cp.plane.store.db,
        )
      ).rows,
  ],
  [
    "int64 past 2^53 (memoryBytes 9007199254740993n)",
    async () => {
      const client = createTestClient(
        RunnerService,
        cp.url,
        cp.pki.ca.certPem,
        await cp.pki.runner("hx-reg", ws),
        "connect-binary",
      );
      return fromRpc(() =>
        client.register({
          apiVersion: "v1",
          runnerId: "hx-reg",
          workspaceId: ws,
          slots: 1,
          cpu: 2,
          memoryBytes: 9007199254740993n,
          architecture: "amd64",
          labels: ["linux"],
        }),
      );
    },
    bad(/field "memoryBytes" is 9007199254740993, past 2\^53 - 1/),
    () => runnerRow("hx-reg"),
  ],
  [
    "int64 past 2^53 as a JSON number (Connect JSON)",
    async () => {
      const rest = createRestClient(cp.url, cp.pki.ca.certPem, await cp.pki.runner("hx-reg", ws));
      try {
        const body =
          `{"apiVersion":"v1","runnerId":"hx-reg","workspaceId":"` +
          `${ws}","slots":1,"memoryBytes":9007199254740993}`;
        return await rawConnect(
          rest,
          "/forelead.runner.v1.RunnerService/Register",
          Buffer.from(body),
          "application/json",
        );
      } finally {
        await rest.close();
      }
    },
    bad(/field "memoryBytes": the number 9007199254740993 is past 2\^53 - 1/),
    () => runnerRow("hx-reg"),
  ],
  [
    "a log stream other than stdout|stderr",
    () =>
      fromRpc(() =>
        runnerRpc.logs(
          rpcLog({
            kind: {
              case: "structValue",
              value: {
                fields: {
                  stream: { kind: { case: "stringValue", value: "stdin" } },
                  text: { kind: { case: "stringValue", value: "x" } },
                },
              },
            },
          }),
        ),
      ),
    bad(/^message 1: data's "stream" is "stdin"/, "0"),
    logs,
  ],
];

/**
 * A POST of `path` (with `headers`, :authority among them, over the usual ones) from a client
 * without a certificate: a request
 * target is read before anyone is identified, and one a URL parser throws on once ended the
 * server from inside its request listener.
 */
async function rawTarget(path: string, headers: http2.OutgoingHttpHeaders = {}): Promise<Refusal> {
  const anonymous = createRestClient(cp.url, cp.pki.ca.certPem);
  try {
    return fromRest(await anonymous.request("POST", path, {}, headers));
  } finally {
    await anonymous.close();
  }
}

// (A :path without a leading "/" and an empty :authority never get this far: nghttp2 resets them.)
const targets: readonly Row[] = [
  [
    ':path "//x:y" (a scheme-relative URL to a URL parser, with a port that is not one)',
    () => rawTarget("//x:y"),
    bad(/request path "\/\/x:y" is not a path starting with a single "\/"/),
    jobCount,
  ],
  [
    ':path "//[" on a Connect procedure\'s service',
    () => rawTarget("//[/forelead.runner.v1.RunnerService/Register"),
    bad(/request path "\/\/\[\/forelead/),
    jobCount,
  ],
  [
    ':path "//127.0.0.1/v1/admin/jobs" (a route behind a host)',
    () => rawTarget("//127.0.0.1/v1/admin/jobs"),
    bad(/is not a path starting with a single "\/"/),
    jobCount,
  ],
  [
    ':authority "x:y" on a Connect procedure',
    () => rawTarget("/forelead.runner.v1.RunnerService/Register", { ":authority": "x:y" }),
    bad(/:authority "x:y" is not a host\[:port\]/),
    jobCount,
  ],
];

describe(
  `hostile input: every bad input a 400 naming the field, nothing stored, ` +
    `the server serving on (${databaseKind})`,
  () => {
    describe.each([
      ["REST", rest],
      ["Connect (generated clients)", connect],
      ["request targets (no client certificate)", targets],
    ] as const)("%s", (_surface, rows) => {
      it.each(rows)("%s", async (_name, send, expected, state) => {
        const before = await state();
        const got = await send();
        if (got.status !== undefined) expect(got.status, got.message).toBe(expected.status);
        expect(got.code, got.message).toBe(expected.code);
        expect(got.message).toMatch(expected.message);
        expect(got.message).not.toContain("s3cr"); // a secret's text is never echoed
        if (expected.header !== undefined) expect(got.header).toBe(expected.header);
        expect(await state()).toEqual(before);
        await servedAfter();
      });
    });

    it("the lease on the job the rows wrote under is untouched: its next log line is sequence 1, stored", async () => {
      const ok = await job.runner.rest.ndjson("/v1/runner/logs", [
        job.msg(1, { stream: "stdout", text: "fine" }),
      ]);
      expect(ok.status, ok.text).toBe(204);
      expect(await logs()).toEqual([1]);
      const reg = await registeredRunner(cp, "hx-reg", ws, { memoryBytes: "9007199254740991" });
      expect((await runnerRow("hx-reg"))?.memory_bytes).toBe(9007199254740991);
      await reg.close();
    });

    it("no internal error was logged across this file", () => {
      expect(logged).toEqual([]);
    });
  },
);
