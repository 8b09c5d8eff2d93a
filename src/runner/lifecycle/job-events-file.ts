import { constants as fsConstants } from "node:fs";
import { mkdir, open, type FileHandle } from "node:fs/promises";
import { join } from "node:path";
import { parseJobEvent, type JobEventData } from "../../protocol/job-events.js";
import { jobDirParts } from "../executors/job-dir.js";
import { maxLineChars } from "../executors/lines.js";

/** How often the events file is read while the job runs. */
const eventsPollMs = 200;

/** The job's events file, followed. */
export interface JobEventsFile {
  /**
   * The job has started (its job.started event is sent): reading begins, so the job's events come
   * after it.
   */
  start(): void;
  /** Reads what is left (after the job ended), passes it on, and stops following. */
  stop(): Promise<void>;
}

/** Where the events of the file go: the accepted ones, and why a line was dropped. */
export interface JobEventsSink {
  event(event: JobEventData): void;
  dropped(line: number, problem: string): void;
}

/**
 * Makes `jobDir/events/events.jsonl` (empty, mode 0600; the process
 * executor gives it to the job's user, a container gets the directory at
 * /events) and follows it: every line the job appends (one JSON object with
 * a string `type`, src/protocol/job-events.ts) is passed on in order; a line
 * that is not one, has a reserved type or is over the line bound (16 KiB,
 * the runner's bound of an output line) is dropped and reported. The file is
 * opened once, before the job starts, with O_NOFOLLOW: the runner reads the
 * file it made however the job renames or replaces it (replaced, its new
 * lines are not read, docs/job-contract.md), and never a file a link leads to.
 */
export async function followJobEvents(jobDir: string, sink: JobEventsSink): Promise<JobEventsFile> {
  await mkdir(join(jobDir, jobDirParts.events), { recursive: true, mode: 0o700 });
  const path = join(jobDir, jobDirParts.eventsFile);
  const file: FileHandle = await open(
    path,
    fsConstants.O_RDWR | fsConstants.O_CREAT | fsConstants.O_EXCL | fsConstants.O_NOFOLLOW,
    0o600,
  );
  const buffer = Buffer.alloc(64 * 1024);
  let position = 0;
  let partial = Buffer.alloc(0);
  let skipping = false; // inside a line already over the bound: dropped up to its newline
  let lineNumber = 0;
  const take = (line: Buffer) => {
    if (line.length > maxLineChars) return over();
    lineNumber++;
    const text = line.toString("utf8").replace(/\r$/, "");
    if (text.trim() === "") return;
    const parsed = parseJobEvent(text);
    if ("event" in parsed) sink.event(parsed.event);
    else sink.dropped(lineNumber, `line ${lineNumber} of the events file ${parsed.problem}`);
  };
  const over = () => {
    lineNumber++;
    sink.dropped(lineNumber, `line ${lineNumber} of the events file is over ${maxLineChars} bytes`);
  };
  const readMore = async (final: boolean) => {
    for (;;) {
      const { bytesRead } = await file.read(buffer, 0, buffer.length, position);
      if (bytesRead === 0) break;
      position += bytesRead;
      let chunk = buffer.subarray(0, bytesRead);
      for (let nl = chunk.indexOf(10); nl !== -1; nl = chunk.indexOf(10)) {
        if (skipping) skipping = false;
        else take(Buffer.concat([partial, chunk.subarray(0, nl)]));
        partial = Buffer.alloc(0);
        chunk = chunk.subarray(nl + 1);
      }
      if (skipping) continue;
      partial = Buffer.concat([partial, chunk]);
      if (partial.length > maxLineChars) {
        over();
        skipping = true;
        partial = Buffer.alloc(0);
      }
    }
    if (final && partial.length > 0 && !skipping) take(partial); // a last line without its newline
  };
  // One read at a time: each tick waits for the one before.
  let reading: Promise<void> = Promise.resolve();
  let timer: NodeJS.Timeout | undefined;
  return {
    start() {
      timer ??= setInterval(() => {
        reading = reading.then(() => readMore(false)).catch(() => undefined);
      }, eventsPollMs);
    },
    async stop() {
      clearInterval(timer);
      await reading;
      try {
        await readMore(true);
      } finally {
        await file.close();
      }
    },
  };
}
