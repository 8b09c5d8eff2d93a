import { lstat, realpath } from "node:fs/promises";
import { join } from "node:path";
import { openExamined } from "../output/upload-output.js";
import {
  maxResultBytes,
  parseResult,
  resultProblem,
  type JobResult,
} from "../../protocol/job-result.js";

/**
 * What output/result.json came to: none, a result, or the problem that makes it invalid (naming the
 * file).
 */
export type ResultFile =
  | { readonly kind: "none" }
  | { readonly kind: "result"; readonly result: JobResult }
  | { readonly kind: "invalid"; readonly problem: string };

const name = "output/result.json";

/**
 * Reads `jobDir/output/result.json` after the job has ended. The job wrote it, so nothing about it
 * is trusted: output/ must be a directory and the file a regular file, both examined with lstat (a
 * symbolic link is refused, never followed); the file is opened as the upload opens output files
 * (upload-output.ts, openExamined: O_NOFOLLOW, the very inode examined, inside the real output/),
 * must be at most 1 MiB, and a JSON object (src/protocol/job-result.ts).
 */
export async function readResultFile(jobDir: string): Promise<ResultFile> {
  const dir = join(jobDir, "output");
  const path = join(dir, "result.json");
  const dirStat = await lstat(dir).catch(() => undefined);
  if (!dirStat) return { kind: "none" };
  if (!dirStat.isDirectory())
    return {
      kind: "invalid",
      problem:
        "output/ is not a directory (a symbolic link is never followed); the result cannot be read",
    };
  const examined = await lstat(path).catch(() => undefined);
  if (!examined) return { kind: "none" };
  if (examined.isSymbolicLink())
    return {
      kind: "invalid",
      problem: `${name} is a symbolic link; write the result as a regular file`,
    };
  if (!examined.isFile())
    return {
      kind: "invalid",
      problem: `${name} is not a regular file (a directory, FIFO, socket or device)`,
    };
  if (examined.size > maxResultBytes)
    return { kind: "invalid", problem: `${name} ${resultProblem(undefined, examined.size)}` };
  const file = await openExamined(path, examined, await realpath(dir));
  if (typeof file === "string") return { kind: "invalid", problem: `${name} ${file}` };
  try {
    // One byte over the bound is enough to refuse a file that grew since it was examined.
    const buffer = Buffer.alloc(maxResultBytes + 1);
    let size = 0;
    for (let n = -1; n !== 0 && size < buffer.length; size += n)
      n = (await file.read(buffer, size, buffer.length - size, size)).bytesRead;
    if (size > maxResultBytes)
      return { kind: "invalid", problem: `${name} ${resultProblem(undefined, size)}` };
    const parsed = parseResult(buffer.subarray(0, size).toString("utf8"));
    return "result" in parsed
      ? { kind: "result", result: parsed.result }
      : { kind: "invalid", problem: `${name} ${parsed.problem}` };
  } finally {
    await file.close();
  }
}
