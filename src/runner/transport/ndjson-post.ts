import type http2 from "node:http2";

/** A reply to one NDJSON POST, with the headers the resume rule reads. */
export interface NdjsonReply {
  readonly status: number;
  readonly headers: http2.IncomingHttpHeaders;
  readonly text: string;
}

/** Posts one NDJSON body; rejects only when no reply came (connection lost, timeout). */
export type NdjsonPost = (path: string, body: string, timeoutMs: number) => Promise<NdjsonReply>;
