import { readFile } from "node:fs/promises";
import {
  create,
  fromJson,
  toJson,
  toJsonString,
  type JsonObject,
  type JsonValue,
  type MessageInitShape,
} from "@bufbuild/protobuf";
import {
  EnqueueJobRequestSchema,
  type EnqueueJobRequest,
} from "../../gen/forelead/admin/v1/admin_pb.js";
import { BatchService, EnqueueJobsResponseSchema } from "../../gen/forelead/admin/v1/batch_pb.js";
import { withService, type AdminClientFlags } from "./connection.js";
import { formatTable } from "./doctor.js";
import { readStdin } from "./options.js";

/**
 * `forelead jobs enqueue --batch FILE`: the file's jobs (NDJSON, or a JSON
 * array, of EnqueueJob requests in proto3 JSON; "-" reads standard input)
 * in one EnqueueJobs call. `defaults` is the request the command's own flags
 * build (workspace, labels, image, ...): each job's fields win over it, its
 * spec field by field. Prints the jobs as a table, or the reply as proto3 JSON.
 */
export async function enqueueBatch(
  file: string,
  defaults: MessageInitShape<typeof EnqueueJobRequestSchema>,
  flags: AdminClientFlags & { json?: boolean },
  write: (text: string) => void,
): Promise<void> {
  const base = toJson(
    EnqueueJobRequestSchema,
    create(EnqueueJobRequestSchema, defaults),
  ) as JsonObject;
  const jobs = (await readBatch(file)).map(({ where, json }) => jobOf(where, base, json));
  await withService(flags, BatchService, async (batch) => {
    const reply = await batch.enqueueJobs({ apiVersion: "v1", jobs });
    if (flags.json) return write(`${toJsonString(EnqueueJobsResponseSchema, reply)}\n`);
    const rows = [
      ["INDEX", "JOB", "STATE", "WORKSPACE"],
      ...reply.jobs.map((j, i) => [String(i), j.id, j.state, j.workspaceId]),
    ];
    write(
      `${formatTable(rows).join("\n")}\n${reply.jobs.length} jobs, ` +
        `${reply.created} new (the others were already enqueued under their ` +
        `idempotency keys)\n`,
    );
  });
}

/** One job of the file over the defaults; an error names the file's line or item and the field. */
function jobOf(where: string, base: JsonObject, json: JsonValue): EnqueueJobRequest {
  if (typeof json !== "object" || json === null || Array.isArray(json))
    throw new Error(
      `${where}: a job is a JSON object (an EnqueueJob request), not ${Array.isArray(json) ? "an array" : typeof json}`,
    );
  const spec = {
    ...(base["spec"] as JsonObject | undefined),
    ...(json["spec"] as JsonObject | undefined),
  };
  const merged: JsonObject = { ...base, ...json, ...(Object.keys(spec).length ? { spec } : {}) };
  try {
    return fromJson(EnqueueJobRequestSchema, merged);
  } catch (err) {
    throw new Error(`${where}: ${(err as Error).message}`);
  }
}

/** The jobs of a batch file, each with where it is ("--batch F line 3" or "item 3"). */
async function readBatch(file: string): Promise<Array<{ where: string; json: JsonValue }>> {
  let text: string;
  try {
    text = file === "-" ? await readStdin() : await readFile(file, "utf8");
  } catch (err) {
    throw new Error(
      `cannot read --batch ${file}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`,
    );
  }
  const parse = (where: string, t: string): JsonValue => {
    try {
      return JSON.parse(t) as JsonValue;
    } catch (err) {
      throw new Error(`${where} is not JSON: ${(err as Error).message}`);
    }
  };
  if (text.trimStart().startsWith("[")) {
    const items = parse(`--batch ${file}`, text) as JsonValue[];
    return items.map((json, i) => ({ where: `--batch ${file} item ${i}`, json }));
  }
  const jobs = text.split("\n").flatMap((line, i) =>
    line.trim() === ""
      ? []
      : [
          {
            where: `--batch ${file} line ${i + 1}`,
            json: parse(`--batch ${file} line ${i + 1}`, line),
          },
        ],
  );
  if (jobs.length === 0)
    throw new Error(
      `--batch ${file} holds no jobs: give one EnqueueJob request (JSON) a line, or a JSON array of them`,
    );
  return jobs;
}
