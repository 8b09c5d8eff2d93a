import http2 from "node:http2";
import { Duplex } from "node:stream";
import tls from "node:tls";
import type { IssuedCertificate } from "../../src/identity/ca.js";

/** One HTTP/2 frame as its 9-byte header says, with a RST_STREAM's or GOAWAY's error code. */
export interface Frame {
  readonly type: number;
  readonly flags: number;
  readonly streamId: number;
  readonly errorCode?: number;
}

/** Frame types and flags the tests look at (RFC 9113 section 6). */
export const frameType = {
  data: 0,
  headers: 1,
  rstStream: 3,
  settings: 4,
  ping: 6,
  goaway: 7,
} as const;
const endStreamFlag = 0x1;

/** Reads frames out of the bytes of an HTTP/2 connection, as they arrive. */
export function createFrameReader(
  onFrame: (frame: Frame, payload: Buffer) => void,
): (bytes: Buffer) => void {
  let buffered = Buffer.alloc(0);
  return (bytes) => {
    buffered = Buffer.concat([buffered, bytes]);
    while (buffered.length >= 9) {
      const length = buffered.readUIntBE(0, 3);
      if (buffered.length < 9 + length) break;
      const type = buffered[3]!;
      const payload = buffered.subarray(9, 9 + length);
      const errorCode =
        type === frameType.rstStream
          ? payload.readUInt32BE(0)
          : type === frameType.goaway
            ? payload.readUInt32BE(4)
            : undefined;
      onFrame(
        {
          type,
          flags: buffered[4]!,
          streamId: buffered.readUInt32BE(5) & 0x7fffffff,
          errorCode,
        },
        payload,
      );
      buffered = buffered.subarray(9 + length);
    }
  };
}

/**
 * How one stream's reply ended, frame by frame: whether a frame with
 * END_STREAM came, and whether a RST_STREAM came before it (the reply was
 * cut: a strict client loses it) or after it (allowed, RFC 9113 section 8.1).
 */
export function replyEnding(
  frames: readonly Frame[],
  streamId: number,
): { endStream: boolean; resetBeforeEnd: boolean; resetCode: number | undefined } {
  const own = frames.filter((f) => f.streamId === streamId);
  const end = own.findIndex(
    (f) =>
      (f.type === frameType.data || f.type === frameType.headers) &&
      (f.flags & endStreamFlag) !== 0,
  );
  const reset = own.findIndex((f) => f.type === frameType.rstStream);
  return {
    endStream: end !== -1,
    resetBeforeEnd: reset !== -1 && (end === -1 || reset < end),
    resetCode: reset === -1 ? undefined : own[reset]!.errorCode,
  };
}

/**
 * A node:http2 client session whose incoming frames are also recorded: the
 * TLS socket is handed to the session through a pass-through stream, so the
 * frames' headers can be read before Node's HTTP/2 parser sees them.
 */
export function tappedSession(
  url: string,
  caPem: string,
  cert?: Pick<IssuedCertificate, "certPem" | "keyPem">,
): { session: http2.ClientHttp2Session; frames: Frame[] } {
  const frames: Frame[] = [];
  const read = createFrameReader((f) => frames.push(f));
  const { hostname, port } = new URL(url);
  const socket = tls.connect({
    host: hostname,
    port: Number(port),
    ca: caPem,
    ALPNProtocols: ["h2"],
    cert: cert?.certPem,
    key: cert?.keyPem,
  });
  const tap = new Duplex({
    read: () => void socket.resume(),
    write: (chunk: Buffer, _encoding, done) => void socket.write(chunk, done),
    final: (done) => {
      socket.end();
      done();
    },
    destroy: (err, done) => {
      socket.destroy();
      done(err);
    },
  });
  socket.on("data", (bytes: Buffer) => {
    read(bytes);
    if (!tap.push(bytes)) socket.pause();
  });
  socket.on("end", () => tap.push(null));
  socket.on("error", (err) => tap.destroy(err));
  const session = http2.connect(url, { createConnection: () => tap });
  session.on("error", () => {}); // surfaced per request
  return { session, frames };
}

/** The reply to one request on a tapped session, with how its stream ended on the wire. */
export interface StrictReply {
  readonly status: number;
  readonly headers: http2.IncomingHttpHeaders;
  readonly text: string;
  readonly streamId: number;
}

/**
 * Sends a request and waits for its stream to close: `body` chunks are
 * written, then the body is ended unless `keepOpen` (an unfinished body, as a
 * client refused early leaves it). A reply without END_STREAM is an error.
 */
export function strictRequest(
  session: http2.ClientHttp2Session,
  headers: http2.OutgoingHttpHeaders,
  body: readonly (string | Buffer)[],
  keepOpen = false,
): Promise<StrictReply> {
  return new Promise((resolve, reject) => {
    const stream = session.request(headers);
    let response: http2.IncomingHttpHeaders = {};
    const chunks: Buffer[] = [];
    stream.on("response", (h) => (response = h));
    stream.on("data", (c: Buffer) => chunks.push(c));
    stream.on("error", () => {}); // the close below says what happened
    stream.on("close", () => {
      if (response[":status"] === undefined)
        return reject(
          new Error(
            `${String(headers[":path"])}: no reply (stream reset with code ${stream.rstCode})`,
          ),
        );
      resolve({
        status: Number(response[":status"]),
        headers: response,
        text: Buffer.concat(chunks).toString("utf8"),
        streamId: stream.id!,
      });
    });
    for (const chunk of body) stream.write(chunk);
    if (!keepOpen) stream.end();
  });
}

/**
 * One HPACK "literal header field without indexing, new name" per header (RFC 7541 section 6.2.2);
 * short names and values only.
 */
export function hpackLiterals(headers: ReadonlyArray<readonly [string, string]>): Buffer {
  const parts: Buffer[] = [];
  for (const [name, value] of headers) {
    if (name.length > 126 || value.length > 126)
      throw new Error("hpackLiterals takes names and values under 127 bytes");
    parts.push(
      Buffer.from([0x00, name.length]),
      Buffer.from(name),
      Buffer.from([value.length]),
      Buffer.from(value),
    );
  }
  return Buffer.concat(parts);
}

/** One frame's bytes. */
export function frameBytes(
  type: number,
  flags: number,
  streamId: number,
  payload: Buffer = Buffer.alloc(0),
): Buffer {
  const head = Buffer.alloc(9);
  head.writeUIntBE(payload.length, 0, 3);
  head[3] = type;
  head[4] = flags;
  head.writeUInt32BE(streamId, 5);
  return Buffer.concat([head, payload]);
}

/** The client connection preface with an empty SETTINGS frame. */
export const clientPreface = Buffer.concat([
  Buffer.from("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"),
  frameBytes(frameType.settings, 0, 0),
]);
