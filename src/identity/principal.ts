import { parseSpiffeId, type SpiffeId } from "./spiffe.js";

/**
 * Who is calling, as the certificate policy established it. A runner's
 * runner and workspace come only from its certificate's SPIFFE ID.
 */
export type Principal =
  | {
      readonly kind: "runner";
      readonly spiffeId: SpiffeId;
      readonly runnerId: string;
      readonly workspaceId: string;
    }
  | { readonly kind: "service"; readonly spiffeId: SpiffeId };

/** The path shape of a runner identity, in the protocol's words. */
export const runnerPathShape = "/runners/<runner-id>/workspaces/<workspace-id>";

/**
 * Reads a parsed SPIFFE ID as a principal: a runner when the path is
 * `/runners/<runner-id>/workspaces/<workspace-id>`, otherwise a service
 * (which may call admin routes only when the configuration grants its ID).
 */
export function principalOf(id: SpiffeId): Principal {
  const s = id.segments;
  if (s.length === 4 && s[0] === "runners" && s[2] === "workspaces") {
    return { kind: "runner", spiffeId: id, runnerId: s[1]!, workspaceId: s[3]! };
  }
  return { kind: "service", spiffeId: id };
}

/** The SPIFFE ID of a runner, as written in its certificate. */
export function runnerSpiffeId(trustDomain: string, runnerId: string, workspaceId: string): string {
  const text = `spiffe://${trustDomain}/runners/${runnerId}/workspaces/${workspaceId}`;
  parseSpiffeId(text); // throws with the rule when an ID part has characters SPIFFE forbids
  return text;
}
