// CPU time of proto3 JSON for the messages every lease and completion carries, protobuf-es
// reflection (fromJson / toJson) beside the compiled plans of src/protocol/json/compiled.ts: a job
// snapshot as the broker makes it decoded into a Job, and a Lease (with that Job) encoded back;
// no server, no database (docs/performance.md, "Profiling and what changed" 8). Not part of
// `npm run bench`. Run: node --import tsx bench/micro/json-codec.ts
import { create, fromJson, toJson, type DescMessage, type JsonValue } from "@bufbuild/protobuf";
import { timestampFromDate } from "@bufbuild/protobuf/wkt";
import { JobSchema, LeaseSchema } from "../../gen/forelead/runner/v1/job_pb.js";
import { decodeJson, encodeJson } from "../../src/protocol/json/codec.js";

const snapshot: JsonValue = {
  id: "0190d3f4-0000-7000-8000-000000000000",
  workspaceId: "w1",
  labels: ["linux"],
  kind: "command",
  spec: { image: "busybox", argv: ["true"], env: { HOME: "/job" }, timeoutSeconds: 60 },
  state: "running",
  attempts: 1,
  maxAttempts: 3,
  priority: 0,
  cancelRequested: false,
  createdAt: "2026-12-04T17:52:10.123456Z",
  updatedAt: "2026-12-04T17:52:10.223456Z",
  runnerId: "runner-0001",
  leaseExpiresAt: "2026-12-04T17:52:40.223Z",
};
const job = fromJson(JobSchema, snapshot, { ignoreUnknownFields: true });
const lease = create(LeaseSchema, {
  apiVersion: "v1",
  token: "x".repeat(43),
  expiresAt: timestampFromDate(new Date()),
  job,
  attempt: 1,
});

const rows: [string, () => unknown, () => unknown][] = [
  [
    "snapshot → Job",
    () => fromJson(JobSchema, snapshot, { ignoreUnknownFields: true }),
    () => decodeJson(JobSchema, snapshot),
  ],
  [
    "Lease → JSON",
    () => toJson(LeaseSchema as DescMessage, lease),
    () => encodeJson(LeaseSchema, lease),
  ],
];
const n = 100_000;
function cpuPerCall(f: () => unknown): number {
  for (let i = 0; i < n / 10; i++) f(); // warm-up: the code is compiled
  const start = process.cpuUsage();
  for (let i = 0; i < n; i++) f();
  const used = process.cpuUsage(start);
  return (used.user + used.system) / n;
}
console.log("µs of CPU a call, 3 rounds: protobuf-es reflection | compiled plan");
for (let round = 0; round < 3; round++) {
  for (const [name, reflective, plan] of rows)
    console.log(
      `${name.padEnd(16)} ${cpuPerCall(reflective).toFixed(2).padStart(6)} | ` +
        `${cpuPerCall(plan).toFixed(2).padStart(6)}`,
    );
}
