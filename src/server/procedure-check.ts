import type { Http2ServerRequest } from "node:http2";
import type { DescMethod, DescService } from "@bufbuild/protobuf";
import { createHandlerContext, type ContextValues } from "@connectrpc/connect";
import { authorizeOnce, type GuardOptions } from "../api/guard.js";

/**
 * Connect and gRPC parse a unary request's body before any handler (and so
 * the guard) runs: a refused identity sending a malformed body would get
 * invalid_argument and leave no audit record. This decides the identity of
 * every procedure call (`POST /<package.Service>/<Method>`) first, from the
 * request line and the TLS session alone, into the request's context values;
 * the guarded handler then finds the decision there (authorizeOnce) and
 * neither decides nor audits again. A refusal is not answered here: the
 * guard throws it again, in the error format of the caller's protocol.
 */
export function createProcedureCheck(
  services: readonly DescService[],
  guard: GuardOptions,
): (req: Http2ServerRequest, values: ContextValues) => void {
  const procedures = new Map<string, DescMethod>();
  for (const service of services)
    for (const method of service.methods)
      procedures.set(`/${service.typeName}/${method.name}`, method);
  return (req, values) => {
    const method = req.method === "POST" ? procedures.get(req.url.split("?")[0]!) : undefined;
    if (!method) return;
    const ctx = createHandlerContext({
      service: method.parent,
      method,
      protocolName: "connect",
      requestMethod: req.method,
      url: `https://${req.authority || "localhost"}${req.url}`,
      requestSignal: new AbortController().signal,
      requestHeader: new Headers(),
      contextValues: values,
    });
    try {
      authorizeOnce(ctx, guard);
    } catch {
      // Decided and audited; kept in `values` for the guard to throw again.
    }
  };
}
