import { createHmac } from "node:crypto";
import http from "node:http";
import https from "node:https";
import type { LookupFunction } from "node:net";
import type { ConnectionOptions, SecureContext } from "node:tls";
import type { Destination } from "./destination.js";

/** A delivery's request, as signed. */
export interface SignedRequest {
  readonly deliveryId: string;
  readonly eventType: string;
  readonly body: string;
  readonly secret: string;
}

/** What one attempt got: a status code, or an error that says why there was none. */
export type AttemptResult =
  { readonly responseCode: number } | { readonly error: string; readonly retryable: boolean };

/** Bytes of a receiver's answer read (and discarded) at most. */
const maxResponseBytes = 64 * 1024;

/**
 * The `forelead-signature` header: `t=<unix seconds>,v1=<hex HMAC-SHA256 of
 * "<t>.<body>" under the secret>` (docs/webhooks.md has the receiver's side).
 */
function signature(secret: string, body: string, unixSeconds: number): string {
  const v1 = createHmac("sha256", secret).update(`${unixSeconds}.${body}`).digest("hex");
  return `t=${unixSeconds},v1=${v1}`;
}

/**
 * POSTs one delivery to `to.address`, the address that was checked: the
 * connection never resolves the name again, while TLS (SNI, the
 * certificate's name) and the Host header still use the URL's host name.
 */
export function post(
  to: Destination,
  request: SignedRequest,
  options: {
    readonly timeoutMs: number;
    /** Trust besides the defaults (--webhook-ca), made once by the caller. */
    readonly secureContext?: SecureContext;
  },
): Promise<AttemptResult> {
  const pinned: LookupFunction = (_host, opts, callback) => {
    if ((opts as { all?: boolean }).all)
      (callback as (e: null, a: { address: string; family: number }[]) => void)(null, [
        { address: to.address, family: to.family },
      ]);
    else callback(null, to.address, to.family);
  };
  const headers = {
    "content-type": "application/json",
    "user-agent": "forelead-webhooks",
    "forelead-delivery": request.deliveryId,
    "forelead-event": request.eventType,
    "forelead-signature": signature(request.secret, request.body, Math.floor(Date.now() / 1000)),
  };
  const client = to.url.protocol === "https:" ? https : http;
  // tls.connect takes secureContext from the request's options; @types/node's https.RequestOptions
  // leaves it out.
  const requestOptions: https.RequestOptions & Pick<ConnectionOptions, "secureContext"> = {
    method: "POST",
    headers,
    lookup: pinned,
    agent: false,
    timeout: options.timeoutMs,
    secureContext: options.secureContext,
  };
  return new Promise((resolve) => {
    const req = client.request(to.url, requestOptions, (res) => {
      let read = 0;
      res.on("data", (chunk: Buffer) => {
        read += chunk.length;
        if (read > maxResponseBytes) res.destroy();
      });
      res.on("close", () => resolve({ responseCode: res.statusCode ?? 0 }));
      res.on("error", () => resolve({ responseCode: res.statusCode ?? 0 }));
    });
    // The whole attempt is bounded, not only each idle gap: a receiver that drips its answer must
    // not outlast the claim's hold, or another replica would send the delivery too.
    const giveUp = () => req.destroy(new Error(`no answer within ${options.timeoutMs / 1000} s`));
    req.on("timeout", giveUp);
    const deadline = setTimeout(giveUp, options.timeoutMs);
    req.on("close", () => clearTimeout(deadline));
    req.on("error", (err: NodeJS.ErrnoException) => {
      resolve({
        error: `${err.code ? `${err.code}: ` : ""}${err.message}`.slice(0, 300),
        retryable: true,
      });
    });
    req.end(request.body);
  });
}
