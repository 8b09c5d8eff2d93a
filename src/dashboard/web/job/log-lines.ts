import type { JsonValue } from "@bufbuild/protobuf";
import { logEntryText } from "../../../protocol/log-text.js";
import { createAnsiReader, type AnsiSegment } from "./ansi.js";

/**
 * A job's log as lines to show: entries (text chunks or {stream, text}) in stream order
 * become lines, a chunk that stops mid-line is continued by the next chunk of the same
 * stream and attempt, and each stream's ANSI state carries across its chunks.
 */

type LogStream = "stdout" | "stderr";

export interface LogLine {
  /** Stable per line: its place in the log. */
  readonly key: number;
  readonly attempt: number;
  readonly stream: LogStream;
  readonly segments: AnsiSegment[];
  /** The line's text without colours (what a person reads; what a test matches). */
  text: string;
  /** False while the line awaits the rest of its chunk. */
  complete: boolean;
}

interface LogEntryLike {
  readonly attempt: number;
  readonly data: JsonValue | undefined;
}

function streamOf(data: JsonValue | undefined): LogStream {
  return data && typeof data === "object" && !Array.isArray(data) && data["stream"] === "stderr"
    ? "stderr"
    : "stdout";
}

export interface LogLines {
  /** Adds one entry; the lines it touched are updated in place. */
  readonly push: (entry: LogEntryLike) => void;
  readonly lines: () => readonly LogLine[];
}

export function createLogLines(): LogLines {
  const lines: LogLine[] = [];
  const readers = new Map<string, ReturnType<typeof createAnsiReader>>();
  const open = new Map<string, LogLine>();

  return {
    lines: () => lines,
    push(entry) {
      const stream = streamOf(entry.data);
      const id = `${entry.attempt}/${stream}`;
      let reader = readers.get(id);
      if (!reader) readers.set(id, (reader = createAnsiReader()));
      const pieces = logEntryText(entry.data).split("\n");
      // "a\nb" is a complete line and an open one; "a\n" is one complete line.
      pieces.forEach((piece, i) => {
        const last = i === pieces.length - 1;
        if (last && piece === "") return;
        let line = open.get(id);
        if (!line) {
          line = {
            key: lines.length,
            attempt: entry.attempt,
            stream,
            segments: [],
            text: "",
            complete: false,
          };
          lines.push(line);
          open.set(id, line);
        }
        line.segments.push(...reader.segments(piece));
        line.text = line.segments.map((s) => s.text).join("");
        if (!last) {
          line.complete = true;
          open.delete(id);
        }
      });
    },
  };
}
