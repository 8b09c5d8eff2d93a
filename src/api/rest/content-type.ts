import { Code, ConnectError } from "@connectrpc/connect";

/**
 * Throws invalid_argument unless the Content-Type header (parameters and
 * case aside) is `expected`.
 */
export function requireContentType(header: string | undefined, expected: string): void {
  const given = String(header ?? "")
    .split(";")[0]!
    .trim()
    .toLowerCase();
  if (given !== expected)
    throw new ConnectError(
      `send the request body as ${expected}, not ${JSON.stringify(given || "(no content-type)")}`,
      Code.InvalidArgument,
    );
}
