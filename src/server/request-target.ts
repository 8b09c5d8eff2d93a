/** The longest part of a refused :path or :authority quoted back in the refusal. */
const quoted = 120;
const quote = (s: string) => JSON.stringify(s.length > quoted ? `${s.slice(0, quoted)}…` : s);

/**
 * Why a request's target can't be served, or undefined. The :path must be a
 * path that starts with one "/" (a path starting with "//" reads as a
 * scheme-relative URL, "//host:port/...", to a URL parser), and the
 * :authority (or Host) a host[:port]. The listener checks this before any
 * handler runs, so that the handlers' own URL parsing (the REST router's,
 * connect-node's) never meets a target it throws on: such a throw escaped
 * the request listener and ended the process.
 */
export function badRequestTarget(
  path: string | undefined,
  authority: string | undefined,
): string | undefined {
  if (path === undefined || !path.startsWith("/") || path.startsWith("//")) {
    return (
      `the request path ${quote(path ?? "")} is not a path starting with a ` +
      `single "/"; routes look like /v1/runner/leases:claim (docs/routes.md)`
    );
  }
  if (!authority)
    return `the request has no :authority (nor Host) header; send the control plane's host:port there`;
  if (!URL.canParse(path, `https://${authority}`))
    return (
      `the request's :authority ${quote(authority)} is not a host[:port]; send ` +
      `the control plane's host:port there`
    );
  return undefined;
}
