import { StringDecoder } from "node:string_decoder";
import type { Readable } from "node:stream";
import type { MaskingStream } from "../output/secret-masker.js";

/**
 * Longest line passed on whole; longer ones are cut into pieces of this size, so one endless line
 * cannot exhaust memory.
 */
export const maxLineChars = 16 * 1024;

/**
 * Calls `onLine` for every line of `stream` (without its "\n" or "\r\n"),
 * including a last line with no newline, with NUL as U+FFFD. Resolves when the stream has ended
 * and every line was passed on. With `masking`, the decoded text goes through it before it is
 * cut into lines, so a secret value is masked whether it was split over reads, over the 16 KiB
 * cut of a long line, or holds a line break itself.
 */
export function forEachLine(
  stream: Readable,
  onLine: (text: string) => void,
  masking?: MaskingStream,
): Promise<void> {
  const decoder = new StringDecoder("utf8");
  let partial = "";
  const take = (chunk: string) => {
    partial += chunk;
    let nl: number;
    while ((nl = partial.indexOf("\n")) !== -1) {
      const line = partial.slice(0, nl);
      partial = partial.slice(nl + 1);
      emit(line.endsWith("\r") ? line.slice(0, -1) : line);
    }
    while (partial.length > maxLineChars) {
      onLine(withoutNul(partial.slice(0, maxLineChars)));
      partial = partial.slice(maxLineChars);
    }
  };
  // The control plane refuses text with NUL (Postgres text cannot hold it): a NUL byte in a job's
  // output is passed on as U+FFFD, as invalid UTF-8 already is by the decoder, so the line still
  // gets through.
  const emit = (line: string) => {
    const text = withoutNul(line);
    for (let i = 0; i < text.length || i === 0; i += maxLineChars)
      onLine(text.slice(i, i + maxLineChars));
  };
  return new Promise((resolve) => {
    const decoded = (text: string) => (masking ? masking.write(text) : text);
    stream.on("data", (chunk: Buffer | string) =>
      take(decoded(typeof chunk === "string" ? chunk : decoder.write(chunk))),
    );
    let finished = false;
    const finish = () => {
      if (finished) return;
      finished = true;
      take(decoded(decoder.end()) + (masking?.end() ?? ""));
      if (partial.length > 0) emit(partial);
      partial = "";
      resolve();
    };
    stream.once("end", finish);
    stream.once("error", finish); // a broken pipe ends the output; the exit code says the rest
  });
}

function withoutNul(text: string): string {
  return text.includes("\u0000") ? text.replaceAll("\u0000", "\ufffd") : text;
}
