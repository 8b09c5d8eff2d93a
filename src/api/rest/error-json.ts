import { constants as http2Constants, type Http2ServerResponse } from "node:http2";
import type { JsonValue } from "@bufbuild/protobuf";
import type { ConnectError } from "@connectrpc/connect";
import { codeToString } from "@connectrpc/connect/protocol-connect";
import { httpStatusOf } from "./http-status.js";

/** The REST error body: the Connect error shape {code, message}. */
export function errorBody(err: ConnectError): { code: string; message: string } {
  return { code: codeToString(err.code), message: err.rawMessage };
}

/** A JSON reply; nothing when the headers are already sent. */
export function writeJson(res: Http2ServerResponse, status: number, body: JsonValue): void {
  if (res.headersSent) return;
  const text = JSON.stringify(body);
  res.writeHead(status, {
    "content-type": "application/json",
    "content-length": Buffer.byteLength(text),
  });
  res.end(text);
}

/**
 * An error reply: its metadata as headers, the status of its code, the JSON
 * error body. After the headers, the stream is reset instead: the client sees
 * a broken stream, never a truncated success.
 */
export function writeError(res: Http2ServerResponse, err: ConnectError): void {
  if (res.headersSent) {
    res.stream.close(http2Constants.NGHTTP2_INTERNAL_ERROR);
    return;
  }
  err.metadata.forEach((value, key) => res.setHeader(key, value));
  writeJson(res, httpStatusOf(err), errorBody(err));
}
