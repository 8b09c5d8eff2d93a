import type { Http2ServerResponse } from "node:http2";
import type { DescMethod, JsonValue, Message } from "@bufbuild/protobuf";
import { reflect } from "@bufbuild/protobuf/reflect";
import type { Route } from "../../../gen/forelead/api/v1/route_pb.js";
import { encodeJson } from "../../protocol/json/codec.js";
import { writeJson } from "./error-json.js";

/**
 * The REST body of a reply by the route's body mapping: the response_body
 * field, or the whole message. Undefined means 204 No Content: the field is
 * unset, or (without response_body) no field is set, on a route with
 * no_content_when_empty.
 */
export function routeBody(route: Route, method: DescMethod, reply: Message): JsonValue | undefined {
  if (route.responseBody) {
    const field = method.output.fields.find((f) => f.name === route.responseBody);
    if (!field || field.fieldKind !== "message")
      throw new Error(`${method.name}: response_body ${route.responseBody} is not a message field`);
    const message = reflect(method.output, reply);
    if (!message.isSet(field)) {
      if (route.noContentWhenEmpty) return undefined;
      throw new Error(`${method.name}: the reply has no ${route.responseBody}`);
    }
    return encodeJson(field.message, message.get(field).message);
  }
  const json = encodeJson(method.output, reply);
  if (
    route.noContentWhenEmpty &&
    json !== null &&
    typeof json === "object" &&
    Object.keys(json).length === 0
  )
    return undefined;
  return json;
}

/** Writes a unary or client-streaming reply: 200 with its JSON body, or 204. */
export function writeReply(
  res: Http2ServerResponse,
  route: Route,
  method: DescMethod,
  reply: Message,
): void {
  const body = routeBody(route, method, reply);
  if (body === undefined) {
    res.writeHead(204);
    res.end();
    return;
  }
  writeJson(res, 200, body);
}
