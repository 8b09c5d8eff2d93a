// CPU time a line of the NDJSON request reader alone (src/api/rest/ndjson-body.ts): 500 lines
// as the runner's stream writer sends them (~300 bytes with their envelope, 100 B of data), in
// 16 KiB chunks as HTTP/2 DATA frames bring them, read into LogsRequest messages; no server, no
// database (docs/performance.md, section 3). --root DIR reads that checkout's sources instead, so
// two commits can be compared in one sitting. Not part of `npm run bench`.
// Run: node --import tsx bench/micro/ndjson-decode.ts [--root DIR]
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { parseArgs } from "node:util";
import type * as NdjsonBody from "../../src/api/rest/ndjson-body.js";
import type * as RunnerPb from "../../gen/forelead/runner/v1/runner_pb.js";

const { values } = parseArgs({ options: { root: { type: "string" } } });
const root = path.resolve(values.root ?? fileURLToPath(new URL("../..", import.meta.url)));
const from = (file: string) => import(pathToFileURL(path.join(root, file)).href);
const { ndjsonMessages } = (await from("src/api/rest/ndjson-body.ts")) as typeof NdjsonBody;
const { LogsRequestSchema } = (await from(
  "gen/forelead/runner/v1/runner_pb.ts",
)) as typeof RunnerPb;

const head = JSON.stringify({
  apiVersion: "v1",
  runnerId: "runner-0001",
  jobId: "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b",
  leaseToken: `lt_${"x".repeat(43)}`,
}).slice(0, -1);
const body = Buffer.from(
  Array.from(
    { length: 500 },
    (_, i) =>
      `${head},"sequence":${i + 1},"data":${JSON.stringify({ stream: "stdout", text: "y".repeat(70) })}}\n`,
  ).join(""),
);
const chunks = Array.from({ length: Math.ceil(body.length / 16384) }, (_, i) =>
  body.subarray(i * 16384, (i + 1) * 16384),
);
async function* request(): AsyncGenerator<Buffer> {
  yield* chunks;
}
async function readRequest(): Promise<number> {
  let lines = 0;
  for await (const _ of ndjsonMessages(request(), LogsRequestSchema, 1 << 20)) lines++;
  return lines;
}

for (let i = 0; i < 300; i++) await readRequest(); // warm-up: the code is compiled
const perLine: string[] = [];
for (let run = 0; run < 5; run++) {
  const start = process.cpuUsage();
  let lines = 0;
  for (let i = 0; i < 400; i++) lines += await readRequest();
  const used = process.cpuUsage(start);
  perLine.push(((used.user + used.system) / lines).toFixed(2));
}
console.log(`${root}: µs of CPU a line, 5 runs of 200,000 lines: ${perLine.join(" ")}`);
