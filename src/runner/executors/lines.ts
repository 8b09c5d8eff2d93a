import { StringDecoder } from "node:string_decoder";
import type { Readable } from "node:stream";

/** Longest line passed on whole; longer ones are cut into pieces of this size, so one endless line cannot exhaust memory. */
export const maxLineChars = 16 * 1024;

/**
 * Calls `onLine` for every line of `stream` (without its "\n" or "\r\n"),
 * including a last line with no newline. Resolves when the stream has ended
 * and every line was passed on.
 */
export function forEachLine(stream: Readable, onLine: (text: string) => void): Promise<void> {
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
      onLine(partial.slice(0, maxLineChars));
      partial = partial.slice(maxLineChars);
    }
  };
  const emit = (line: string) => {
    for (let i = 0; i < line.length || i === 0; i += maxLineChars) onLine(line.slice(i, i + maxLineChars));
  };
  return new Promise((resolve) => {
    stream.on("data", (chunk: Buffer | string) => take(typeof chunk === "string" ? chunk : decoder.write(chunk)));
    const finish = () => {
      take(decoder.end());
      if (partial.length > 0) emit(partial);
      partial = "";
      resolve();
    };
    stream.once("end", finish);
    stream.once("error", finish); // a broken pipe ends the output; the exit code says the rest
  });
}
