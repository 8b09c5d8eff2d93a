import { readFile } from "node:fs/promises";
import { Command } from "commander";
import {
  fromJson,
  toJsonString,
  type DescMessage,
  type JsonValue,
  type MessageShape,
} from "@bufbuild/protobuf";
import { timestampDate } from "@bufbuild/protobuf/wkt";
import { parse as parseYaml } from "yaml";
import {
  CancelPipelineResponseSchema,
  GetPipelineResponseSchema,
  ListPipelinesResponseSchema,
  PipelineService,
  ResumePipelineResponseSchema,
  RetryJobResponseSchema,
  SubmitPipelineRequestSchema,
  SubmitPipelineResponseSchema,
  type Pipeline,
} from "../../gen/forelead/admin/v1/pipelines_pb.js";
import {
  serviceClientFromFlags,
  withAdminClientOptions,
  type AdminClientFlags,
} from "./connection.js";
import { formatTable } from "./doctor.js";

interface JsonFlags extends AdminClientFlags {
  json?: boolean;
}
interface SubmitFlags extends JsonFlags {
  workspace?: string;
  name?: string;
  idempotencyKey?: string;
}
interface ListFlags extends JsonFlags {
  workspace?: string;
  state?: string;
  pageSize?: string;
  pageToken?: string;
}
interface ResumeFlags extends JsonFlags {
  fromStep?: string;
}

/**
 * Reads a pipeline file: YAML (a superset of JSON, so a .json file reads the
 * same) in the JSON names of SubmitPipelineRequest. Errors name the file and
 * the field.
 */
export function readPipelineFile(file: string) {
  return readRequestFile(file, SubmitPipelineRequestSchema, "{workspaceId, name, steps: [...]}");
}

/**
 * Reads a request file: YAML (a superset of JSON) holding one object in the JSON names of
 * `schema`'s message (`shape` says what it holds, for the error); apiVersion defaults to v1.
 * Errors name the file and the field.
 */
export async function readRequestFile<T extends DescMessage>(
  file: string,
  schema: T,
  shape: string,
): Promise<MessageShape<T>> {
  let text: string;
  try {
    text = await readFile(file, "utf8");
  } catch (err) {
    throw new Error(
      `cannot read ${file}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`,
    );
  }
  let doc: unknown;
  try {
    doc = parseYaml(text);
  } catch (err) {
    throw new Error(`${file} is not YAML or JSON: ${(err as Error).message}`);
  }
  if (!doc || typeof doc !== "object" || Array.isArray(doc))
    throw new Error(`${file} must hold one object: ${shape}`);
  try {
    return fromJson(schema, {
      apiVersion: "v1",
      ...(doc as Record<string, JsonValue>),
    });
  } catch (err) {
    throw new Error(`${file}: ${(err as Error).message}`);
  }
}

/**
 * `forelead pipelines submit|get|list|cancel|resume`: step graphs sequenced by the control plane
 * (docs/pipelines.md).
 */
export function pipelinesCommand(
  write: (text: string) => void = (t) => process.stdout.write(t),
): Command {
  const pipelines = new Command("pipelines");
  withAdminClientOptions(
    pipelines
      .command("submit")
      .description(
        "submit the pipeline in FILE (YAML or JSON: workspaceId, name, " +
          "steps[{name, needs, labels, spec, inputs, concurrencyKey, delaySeconds, " +
          "requirements, ...}])",
      )
      .argument("<file>", "the pipeline file")
      .option("--workspace <id>", "the workspace, instead of the file's workspaceId")
      .option("--name <name>", "the name, instead of the file's")
      .option(
        "--idempotency-key <key>",
        "submitting again with the same key returns the same pipeline",
      )
      .option("--json", "print the reply as JSON"),
  ).action(async (file: string, flags: SubmitFlags) => {
    const req = await readPipelineFile(file);
    if (flags.workspace) req.workspaceId = flags.workspace;
    if (flags.name) req.name = flags.name;
    if (flags.idempotencyKey) req.idempotencyKey = flags.idempotencyKey;
    const client = await serviceClientFromFlags(flags, PipelineService);
    const reply = await client.submitPipeline(req);
    write(
      flags.json
        ? `${toJsonString(SubmitPipelineResponseSchema, reply)}\n`
        : formatPipeline(reply.pipeline!),
    );
  });
  withAdminClientOptions(
    pipelines
      .command("get")
      .description("a pipeline with its steps: state, attempts, job ids")
      .argument("<pipeline>", "pipeline id")
      .option("--json", "print the reply as JSON"),
  ).action(async (pipelineId: string, flags: JsonFlags) => {
    const reply = await (
      await serviceClientFromFlags(flags, PipelineService)
    ).getPipeline({ pipelineId });
    write(
      flags.json
        ? `${toJsonString(GetPipelineResponseSchema, reply)}\n`
        : formatPipeline(reply.pipeline!),
    );
  });
  withAdminClientOptions(
    pipelines
      .command("list")
      .description("pipelines, newest first")
      .option("--workspace <id>", "only this workspace")
      .option("--state <state>", "queued, running, succeeded, failed or cancelled")
      .option("--page-size <n>", "1..500", "50")
      .option("--page-token <token>", "the next page, as the previous page named it")
      .option("--json", "print the reply as JSON"),
  ).action(async (flags: ListFlags) => {
    const reply = await (
      await serviceClientFromFlags(flags, PipelineService)
    ).listPipelines({
      workspaceId: flags.workspace ?? "",
      state: flags.state ?? "",
      pageSize: Number(flags.pageSize),
      pageToken: flags.pageToken ?? "",
    });
    if (flags.json) return write(`${toJsonString(ListPipelinesResponseSchema, reply)}\n`);
    const rows = reply.pipelines.map((p) => [
      p.id,
      p.workspaceId,
      p.name,
      p.state,
      `${p.steps.filter((s) => s.state === "succeeded").length}/${p.steps.length}`,
      p.createdAt ? timestampDate(p.createdAt).toISOString() : "",
    ]);
    write(
      table([["PIPELINE", "WORKSPACE", "NAME", "STATE", "SUCCEEDED", "CREATED"], ...rows]) +
        (reply.nextPageToken ? `next page: --page-token ${reply.nextPageToken}\n` : ""),
    );
  });
  withAdminClientOptions(
    pipelines
      .command("cancel")
      .description("cancel a pipeline: pending steps at once, running jobs through their runners")
      .argument("<pipeline>", "pipeline id")
      .option("--json", "print the reply as JSON"),
  ).action(async (pipelineId: string, flags: JsonFlags) => {
    const reply = await (
      await serviceClientFromFlags(flags, PipelineService)
    ).cancelPipeline({ apiVersion: "v1", pipelineId });
    write(
      flags.json
        ? `${toJsonString(CancelPipelineResponseSchema, reply)}\n`
        : formatPipeline(reply.pipeline!),
    );
  });
  withAdminClientOptions(
    pipelines
      .command("resume")
      .description(
        "re-run a settled pipeline's steps that did not succeed (or --from-step " +
          "and everything downstream), with new jobs",
      )
      .argument("<pipeline>", "pipeline id")
      .option("--from-step <step>", "re-run this step and every step after it")
      .option("--json", "print the reply as JSON"),
  ).action(async (pipelineId: string, flags: ResumeFlags) => {
    const reply = await (
      await serviceClientFromFlags(flags, PipelineService)
    ).resumePipeline({ apiVersion: "v1", pipelineId, fromStep: flags.fromStep ?? "" });
    write(
      flags.json
        ? `${toJsonString(ResumePipelineResponseSchema, reply)}\n`
        : formatPipeline(reply.pipeline!),
    );
  });
  return pipelines;
}

/** Adds `jobs retry JOB` to the jobs group: a new job with the same spec, linked both ways. */
export function addRetryCommand(
  jobs: Command,
  write: (text: string) => void = (t) => process.stdout.write(t),
): Command {
  withAdminClientOptions(
    jobs
      .command("retry")
      .description("enqueue a settled job again with the same spec (linked: retryOf, retriedBy)")
      .argument("<job>", "job id")
      .option("--json", "print the reply as JSON"),
  ).action(async (jobId: string, flags: JsonFlags) => {
    const reply = await (
      await serviceClientFromFlags(flags, PipelineService)
    ).retryJob({ apiVersion: "v1", jobId });
    write(
      flags.json
        ? `${toJsonString(RetryJobResponseSchema, reply)}\n`
        : `job ${reply.job!.id} retries job ${reply.job!.retryOf} (${reply.job!.state})\n`,
    );
  });
  return jobs;
}

function formatPipeline(p: Pipeline): string {
  const head =
    `pipeline ${p.id} ${JSON.stringify(p.name)} in workspace ` +
    `${JSON.stringify(p.workspaceId)}: ` +
    `${p.state}${p.cancelRequested && p.state !== "cancelled" ? " (cancel requested)" : ""}\n`;
  return (
    head +
    table([
      ["STEP", "NAME", "NEEDS", "STATE", "ATTEMPTS", "JOB"],
      ...p.steps.map((s) => [
        s.name,
        s.displayName || "-",
        s.needs.join(",") || "-",
        s.state,
        String(s.attempts),
        s.jobId || "-",
      ]),
    ])
  );
}

/** Rows as an aligned table, a line each. */
export function table(rows: readonly (readonly string[])[]): string {
  return formatTable(rows)
    .map((l) => `${l}\n`)
    .join("");
}
