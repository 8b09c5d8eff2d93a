import { readFile } from "node:fs/promises";
import type { Command } from "commander";
import { fromJson, toJsonString, type JsonValue } from "@bufbuild/protobuf";
import { ValueSchema } from "@bufbuild/protobuf/wkt";
import { AnswerInputResponseSchema, InputService } from "../../gen/forelead/admin/v1/input_pb.js";
import {
  serviceClientFromFlags,
  withAdminClientOptions,
  type AdminClientFlags,
} from "./connection.js";
import { readStdin } from "./options.js";

interface AnswerFlags extends AdminClientFlags {
  requestId: string;
  answerFile: string;
  json?: boolean;
}

/** Adds `answer JOB` to the `jobs` command: InputService AnswerInput (docs/suspend.md). */
export function addAnswerCommand(
  jobs: Command,
  write: (text: string) => void = (t) => process.stdout.write(t),
): Command {
  withAdminClientOptions(
    jobs
      .command("answer")
      .description(
        "answer the input request of a job waiting in waiting_input; it is queued again and resumes with the answer",
      )
      .argument("<job>", "job id")
      .requiredOption("--request-id <id>", "the inputRequest.id the job view shows")
      .requiredOption(
        "--answer-file <file>",
        "a JSON file holding the answer (- for standard input); it must meet the request's schema",
      )
      .option("--json", "print the reply as JSON"),
  ).action(async (jobId: string, flags: AnswerFlags) => {
    const answer = fromJson(ValueSchema, await readAnswer(flags.answerFile));
    const client = await serviceClientFromFlags(flags, InputService);
    const reply = await client.answerInput({
      apiVersion: "v1",
      jobId,
      requestId: flags.requestId,
      answer,
    });
    write(
      flags.json
        ? `${toJsonString(AnswerInputResponseSchema, reply)}\n`
        : `job ${jobId}: input request ${flags.requestId} answered; the job is ${reply.job?.state ?? "?"}\n`,
    );
  });
  return jobs;
}

async function readAnswer(file: string): Promise<JsonValue> {
  let text: string;
  try {
    text = file === "-" ? await readStdin() : await readFile(file, "utf8");
  } catch (err) {
    throw new Error(
      `cannot read --answer-file ${file}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`,
    );
  }
  try {
    return JSON.parse(text) as JsonValue;
  } catch (err) {
    throw new Error(`--answer-file ${file} is not JSON: ${(err as Error).message}`);
  }
}
