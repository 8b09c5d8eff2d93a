import { Code, ConnectError } from "@connectrpc/connect";
import type { RouteEntry } from "../routes.js";

/** Anything served on a route: matched by the route's HTTP method and path template. */
export interface Routed {
  readonly entry: Pick<RouteEntry, "httpMethod" | "path">;
}

/** A route's path template as a pattern. */
export interface CompiledRoute<B extends Routed> {
  readonly binding: B;
  readonly pattern: RegExp;
  /** JSON names of the request fields bound by path segments, in order. */
  readonly params: readonly string[];
}

/** The route a request line selects, or the refusal when none does. */
export type RouteMatch<B extends Routed> =
  | { readonly kind: "route"; readonly route: CompiledRoute<B> }
  | {
      readonly kind: "refused";
      readonly status: 404 | 405;
      readonly allow?: string;
      readonly body: { readonly code: string; readonly message: string };
    };

/**
 * Matches a request line against the routes. A path some route serves with
 * another method is 405 with the methods it is served with (Allow); a path no
 * route serves is 404. Both are answered before any body byte is read.
 */
export function createRouteMatcher<B extends Routed>(
  bindings: readonly B[],
): (method: string, pathname: string) => RouteMatch<B> {
  const routes = bindings.map(compile);
  return (method, pathname) => {
    const candidates = routes.filter((r) => r.pattern.test(pathname));
    const route = candidates.find((r) => r.binding.entry.httpMethod === method);
    if (route) return { kind: "route", route };
    if (candidates.length > 0) {
      const allow = [...new Set(candidates.map((r) => r.binding.entry.httpMethod))].join(", ");
      return {
        kind: "refused",
        status: 405,
        allow,
        body: {
          code: "unimplemented",
          message: `${method} ${pathname} is not served; use ${allow}`,
        },
      };
    }
    return {
      kind: "refused",
      status: 404,
      body: {
        code: "not_found",
        message: `no route ${method} ${pathname}; docs/routes.md lists the routes`,
      },
    };
  };
}

/**
 * The request fields a matched path binds, percent-decoded; an escape that
 * is malformed or not UTF-8 is invalid_argument naming the field.
 */
export function pathParams(route: CompiledRoute<Routed>, pathname: string): Record<string, string> {
  const m = route.pattern.exec(pathname);
  const out: Record<string, string> = {};
  route.params.forEach((name, i) => {
    try {
      out[name] = decodeURIComponent(m?.[i + 1] ?? "");
    } catch {
      throw new ConnectError(
        `path parameter ${name} is not valid percent-encoded UTF-8; percent-encode the UTF-8 bytes of the text`,
        Code.InvalidArgument,
      );
    }
  });
  return out;
}

function compile<B extends Routed>(binding: B): CompiledRoute<B> {
  const params: string[] = [];
  const source = binding.entry.path
    .split("/")
    .map((segment) => {
      const m = /^\{(\w+)\}$/.exec(segment);
      if (!m) return segment.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
      params.push(m[1]!);
      return "([^/]+)";
    })
    .join("/");
  return { binding, pattern: new RegExp(`^${source}$`), params };
}
