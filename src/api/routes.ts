import { getOption, hasOption, type DescMethod, type DescService } from "@bufbuild/protobuf";
import { route as routeOption, type Route } from "../../gen/forelead/api/v1/route_pb.js";

/** Who may call a route. */
export type RoutePrincipal = "runner" | "admin" | "none";

/** One method with its REST route, read from the `(forelead.api.v1.route)` option. */
export interface RouteEntry {
  readonly service: DescService;
  readonly method: DescMethod;
  readonly httpMethod: string;
  readonly path: string;
  readonly principal: RoutePrincipal;
  readonly option: Route;
}

const principals = new Set<string>(["runner", "admin", "none"]);

/** Reads the route option of every method; throws naming a method that lacks one or is malformed. */
export function routeTable(services: readonly DescService[]): RouteEntry[] {
  const seen = new Map<string, string>();
  return services.flatMap((service) =>
    service.methods.map((method) => {
      if (!hasOption(method, routeOption)) throw new Error(`${service.typeName}.${method.name} has no (forelead.api.v1.route) option`);
      const option = getOption(method, routeOption);
      if (!principals.has(option.principal)) {
        throw new Error(`${service.typeName}.${method.name}: route principal must be runner, admin or none, not ${JSON.stringify(option.principal)}`);
      }
      if (option.ndjsonRequest !== (method.methodKind === "client_streaming")) {
        throw new Error(`${service.typeName}.${method.name}: ndjson_request must be set exactly on client-streaming methods`);
      }
      if ((option.rawResponseContentType !== "" || option.ndjsonResponse) !== (method.methodKind === "server_streaming")) {
        throw new Error(`${service.typeName}.${method.name}: raw_response_content_type or ndjson_response must be set exactly on server-streaming methods`);
      }
      checkMessageStreamOption(`${service.typeName}.${method.name}`, method, option);
      const key = `${option.method} ${option.path}`;
      const other = seen.get(key);
      if (other) throw new Error(`${key} is declared by both ${other} and ${method.name}`);
      seen.set(key, method.name);
      return { service, method, httpMethod: option.method, path: option.path, principal: option.principal as RoutePrincipal, option };
    }),
  );
}

/** The route of one method; throws when it has none. */
export function routeOf(method: DescMethod): Route {
  return getOption(method, routeOption);
}

/** The companions of ndjson_response name fields that exist, and need it. */
function checkMessageStreamOption(name: string, method: DescMethod, option: Route): void {
  const companions = { event_stream_field: option.eventStreamField, event_id_field: option.eventIdField, last_event_id_field: option.lastEventIdField, text_field: option.textField };
  const set = Object.entries(companions).filter(([, v]) => v !== "");
  if (set.length === 0) return;
  if (!option.ndjsonResponse) throw new Error(`${name}: ${set.map(([k]) => k).join(", ")} need ndjson_response`);
  if (option.rawResponseContentType) throw new Error(`${name}: ndjson_response and raw_response_content_type exclude each other`);
  const has = (fields: DescMethod["input"]["fields"], jsonName: string) => jsonName === "" || fields.some((f) => f.jsonName === jsonName);
  if (!has(method.input.fields, option.eventStreamField) || !has(method.input.fields, option.lastEventIdField)) {
    throw new Error(`${name}: event_stream_field and last_event_id_field must name fields of ${method.input.typeName}`);
  }
  if (!has(method.output.fields, option.eventIdField) || !has(method.output.fields, option.textField)) {
    throw new Error(`${name}: event_id_field and text_field must name fields of ${method.output.typeName}`);
  }
}
