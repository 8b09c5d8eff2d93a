import { getOption, hasOption, type DescMethod, type DescService } from "@bufbuild/protobuf";
import { route as routeOption, type Route } from "../../gen/forelead/api/v1/route_pb.js";
import { roleNames, type RoleName } from "../identity/roles.js";

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
  readonly role: RoleName | undefined;
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
      if ((option.ndjsonRequest || option.rawRequestContentType !== "") !== (method.methodKind === "client_streaming")) {
        throw new Error(`${service.typeName}.${method.name}: ndjson_request or raw_request_content_type must be set exactly on client-streaming methods`);
      }
      if (option.ndjsonRequest && option.rawRequestContentType !== "") {
        throw new Error(`${service.typeName}.${method.name}: ndjson_request and raw_request_content_type exclude each other`);
      }
      if ((option.rawResponseContentType !== "") !== (method.methodKind === "server_streaming")) {
        throw new Error(`${service.typeName}.${method.name}: raw_response_content_type must be set exactly on server-streaming methods`);
      }
      const role = checkedRole(service, method, option);
      const key = `${option.method} ${option.path}`;
      const other = seen.get(key);
      if (other) throw new Error(`${key} is declared by both ${other} and ${method.name}`);
      seen.set(key, method.name);
      return { service, method, httpMethod: option.method, path: option.path, principal: option.principal as RoutePrincipal, role, option };
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
export function checkedRole(service: DescService, method: DescMethod, option: Route): RoleName | undefined {
  const name = `${service.typeName}.${method.name}`;
  if (option.principal !== "admin") {
    if (option.role !== "") throw new Error(`${name}: role is only for admin routes; this route's principal is ${option.principal}`);
    return undefined;
  }
  if (!roleNames.includes(option.role as RoleName)) {
    throw new Error(`${name}: an admin route must declare its role (${roleNames.join(", ")}), not ${JSON.stringify(option.role)}`);
  }
  if (option.role === "enqueue") {
    const names = method.input.fields.map((f) => f.name);
    if (method.methodKind !== "unary" || (!names.includes("workspace_id") && !names.includes("job_id"))) {
      throw new Error(`${name}: an "enqueue" method must be unary with a workspace_id or job_id field, so its workspace can be checked`);
    }
  }
  return option.role as RoleName;
}

/** The route of one method; throws when it has none. */
export function routeOf(method: DescMethod): Route {
  return getOption(method, routeOption);
}
