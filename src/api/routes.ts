import {
  getOption,
  hasOption,
  ScalarType,
  type DescField,
  type DescMessage,
  type DescMethod,
  type DescService,
} from "@bufbuild/protobuf";
import {
  route as routeOption,
  type HeaderField,
  type Route,
} from "../../gen/forelead/api/v1/route_pb.js";
import { roleNames, type RoleName } from "../identity/roles.js";

/**
 * The role an admin route needs: a granted role, or "granted" (any identity granted a role, a
 * delegate too, acting for nobody: only what a dashboard reports about itself).
 */
export type RouteRole = RoleName | "granted";

const routeRoles: readonly RouteRole[] = [...roleNames, "granted"];

/** Who may call a route. */
export type RoutePrincipal = "runner" | "admin" | "none";

/** One method with its REST route, read from the `(forelead.api.v1.route)` option. */
export interface RouteEntry {
  readonly service: DescService;
  readonly method: DescMethod;
  readonly httpMethod: string;
  readonly path: string;
  readonly principal: RoutePrincipal;
  /** On admin routes: the role the caller needs. */
  readonly role: RouteRole | undefined;
  readonly option: Route;
}

const principals = new Set<string>(["runner", "admin", "none"]);

/**
 * Reads the route option of every method; throws naming a method that lacks one or is malformed.
 */
export function routeTable(services: readonly DescService[]): RouteEntry[] {
  const seen = new Map<string, string>();
  return services.flatMap((service) =>
    service.methods.map((method) => {
      if (!hasOption(method, routeOption))
        throw new Error(`${service.typeName}.${method.name} has no (forelead.api.v1.route) option`);
      const option = getOption(method, routeOption);
      if (!principals.has(option.principal)) {
        throw new Error(
          `${service.typeName}.${method.name}: route principal must be runner, ` +
            `admin or none, not ${JSON.stringify(option.principal)}`,
        );
      }
      const where = `${service.typeName}.${method.name}`;
      const requestMappings = [option.ndjsonRequest, option.rawRequestBody !== ""].filter(
        Boolean,
      ).length;
      if (requestMappings !== (method.methodKind === "client_streaming" ? 1 : 0)) {
        throw new Error(
          `${where}: client-streaming methods need exactly one of ndjson_request ` +
            `and raw_request_body; other methods none`,
        );
      }
      if (
        (option.rawResponseContentType !== "" || option.ndjsonResponse) !==
        (method.methodKind === "server_streaming")
      ) {
        throw new Error(
          `${where}: raw_response_content_type or ndjson_response must be set exactly on server-streaming methods`,
        );
      }
      const role = checkedRole(service, method, option);
      checkBodyMappings(where, method, option);
      checkMessageStreamOption(where, method, option);
      const key = `${option.method} ${option.path}`;
      const other = seen.get(key);
      if (other) throw new Error(`${key} is declared by both ${other} and ${method.name}`);
      seen.set(key, method.name);
      return {
        service,
        method,
        httpMethod: option.method,
        path: option.path,
        principal: option.principal as RoutePrincipal,
        role,
        option,
      };
    }),
  );
}

/**
 * The role an admin method declares. Every admin method must declare one, so
 * a new method cannot silently be open to every granted identity; a role on
 * a runner or unauthenticated route would mean nothing and is refused too.
 * An "enqueue" method is scoped to a workspace, so its request must name one
 * (workspace_id) or name a job (job_id) whose workspace the guard looks up.
 */
export function checkedRole(
  service: DescService,
  method: DescMethod,
  option: Route,
): RouteRole | undefined {
  const name = `${service.typeName}.${method.name}`;
  if (option.principal !== "admin") {
    if (option.role !== "")
      throw new Error(
        `${name}: role is only for admin routes; this route's principal is ${option.principal}`,
      );
    return undefined;
  }
  if (!routeRoles.includes(option.role as RouteRole)) {
    throw new Error(
      `${name}: an admin route must declare its role (${routeRoles.join(", ")}), not ${JSON.stringify(option.role)}`,
    );
  }
  if (option.role === "enqueue") {
    const names = method.input.fields.map((f) => f.name);
    if (
      method.methodKind !== "unary" ||
      (!["workspace_id", "job_id", "pipeline_id", "schedule_id"].some((n) => names.includes(n)) &&
        !batchField(method))
    ) {
      throw new Error(
        `${name}: an "enqueue" method must be unary with a workspace_id, job_id, ` +
          `pipeline_id or schedule_id field, or a batch of messages with one (jobs), so its ` +
          `workspace can be checked`,
      );
    }
  }
  return option.role as RouteRole;
}

/**
 * A batch method's `jobs` field: a repeated message with a workspace_id, each
 * item scoped on its own (the guard checks the workspace of every one).
 */
export function batchField(method: DescMethod): DescField | undefined {
  const field = method.input.fields.find((f) => f.name === "jobs");
  return field?.fieldKind === "list" &&
    field.listKind === "message" &&
    field.message.fields.some((f) => f.name === "workspace_id")
    ? field
    : undefined;
}

const headerName = /^[a-z0-9][a-z0-9-]*$/;

/**
 * raw_request_body names a bytes field; header fields name scalar fields by JSON name and real
 * header names.
 */
function checkBodyMappings(where: string, method: DescMethod, option: Route): void {
  if (option.rawRequestBody) {
    const field = method.input.fields.find((f) => f.name === option.rawRequestBody);
    if (field?.fieldKind !== "scalar" || field.scalar !== ScalarType.BYTES)
      throw new Error(
        `${where}: raw_request_body ${option.rawRequestBody} is not a bytes field of ${method.input.name}`,
      );
  }
  if (option.rawRequestContentType && !option.rawRequestBody)
    throw new Error(`${where}: raw_request_content_type applies only with raw_request_body`);
  if (option.ndjsonRequest && option.headerFields.length > 0)
    throw new Error(
      `${where}: header_fields do not apply to NDJSON requests (each line is a whole message)`,
    );
  if (!option.rawResponseContentType && option.responseHeaderFields.length > 0)
    throw new Error(`${where}: response_header_fields apply only to raw responses`);
  const check = (what: string, message: DescMessage, bindings: readonly HeaderField[]) => {
    for (const { header, field } of bindings) {
      if (!headerName.test(header))
        throw new Error(
          `${where}: ${what} header ${JSON.stringify(header)} must be a lower-case header name`,
        );
      if (message.fields.find((f) => f.jsonName === field)?.fieldKind !== "scalar")
        throw new Error(
          `${where}: ${what} field ${JSON.stringify(field)} is not a scalar field (JSON name) of ${message.name}`,
        );
    }
  };
  check("header_fields", method.input, option.headerFields);
  check("response_header_fields", method.output, option.responseHeaderFields);
}

/** The route of one method; throws when it has none. */
export function routeOf(method: DescMethod): Route {
  return getOption(method, routeOption);
}

/** The companions of ndjson_response name fields that exist, and need it. */
function checkMessageStreamOption(name: string, method: DescMethod, option: Route): void {
  const companions = {
    event_stream_field: option.eventStreamField,
    event_id_field: option.eventIdField,
    last_event_id_field: option.lastEventIdField,
    text_field: option.textField,
    event_type_field: option.eventTypeField,
  };
  const set = Object.entries(companions).filter(([, v]) => v !== "");
  if (set.length === 0) return;
  if (!option.ndjsonResponse)
    throw new Error(`${name}: ${set.map(([k]) => k).join(", ")} need ndjson_response`);
  if (option.rawResponseContentType)
    throw new Error(`${name}: ndjson_response and raw_response_content_type exclude each other`);
  const has = (fields: DescMethod["input"]["fields"], jsonName: string) =>
    jsonName === "" || fields.some((f) => f.jsonName === jsonName);
  if (
    !has(method.input.fields, option.eventStreamField) ||
    !has(method.input.fields, option.lastEventIdField)
  ) {
    throw new Error(
      `${name}: event_stream_field and last_event_id_field must name fields of ${method.input.typeName}`,
    );
  }
  if (
    !has(method.output.fields, option.eventIdField) ||
    !has(method.output.fields, option.textField) ||
    !has(method.output.fields, option.eventTypeField)
  ) {
    throw new Error(
      `${name}: event_id_field, event_type_field and text_field must name fields of ${method.output.typeName}`,
    );
  }
}
