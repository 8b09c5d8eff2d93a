import { Code, ConnectError } from "@connectrpc/connect";

/** Longest artifact name, in UTF-8 bytes, and longest segment of one. */
const nameLimits = { maxBytes: 1024, maxSegmentBytes: 255 } as const;

/** The media type of an artifact that declared none. */
const defaultMediaType = "application/octet-stream";

/** A digest as the wire writes it: "sha256:" and 64 lower-case hex digits. */
export type Digest = `sha256:${string}`;

const digestPattern = /^sha256:[0-9a-f]{64}$/;
// type/subtype with optional parameters, printable ASCII only: it is echoed in a header.
const mediaTypePattern =
  /^[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,126}\/[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]{0,126}(\s*;\s*[\x21-\x7e]+=[\x20-\x7e]*)*$/;

/**
 * Why `name` is not an artifact name, or undefined when it is one: a
 * relative path with "/" separators whose every segment is a real name.
 * Names never become filesystem paths on the control plane (blobs are stored
 * by digest), but a runner or an operator may write them to disk, so a name
 * that could escape a directory is refused outright.
 */
export function artifactNameProblem(name: string): string | undefined {
  if (name === "") return "is empty";
  if (Buffer.byteLength(name, "utf8") > nameLimits.maxBytes)
    return `is longer than ${nameLimits.maxBytes} bytes`;
  // eslint-disable-next-line no-control-regex
  if (/[\x00-\x1f\x7f]/.test(name)) return "holds a control character (NUL, newline, ...)";
  // Characters that are invisible or reorder what is shown (U+202E, zero-width spaces, C1
  // controls, line separators) would let a name look like another in the dashboard and the CLI.
  const hidden = name.match(/[\p{Cc}\p{Cf}\p{Zl}\p{Zp}]/u)?.[0];
  if (hidden)
    return (
      `holds ` +
      `U+${hidden.codePointAt(0)!.toString(16).toUpperCase().padStart(4, "0")}, ` +
      `an invisible or bidirectional control character`
    );
  if (name.includes("\\")) return 'holds a backslash; separate segments with "/"';
  if (name.startsWith("/"))
    return "is an absolute path; names are relative to the output directory";
  for (const segment of name.split("/")) {
    if (segment === "") return "has an empty segment (a leading, trailing or doubled /)";
    if (segment === "." || segment === "..") return `has a "${segment}" segment`;
    if (Buffer.byteLength(segment, "utf8") > nameLimits.maxSegmentBytes)
      return `has a segment longer than ${nameLimits.maxSegmentBytes} bytes`;
  }
  return undefined;
}

/** Throws invalid_argument unless `name` is an artifact name; `what` says where it came from. */
export function checkArtifactName(name: string, what = "name"): string {
  const problem = artifactNameProblem(name);
  if (problem)
    throw new ConnectError(
      `${what} ${JSON.stringify(name.slice(0, 200))} ${problem}`,
      Code.InvalidArgument,
    );
  return name;
}

/** Throws invalid_argument unless `digest` is "sha256:<64 lower-case hex>". */
export function checkDigest(digest: string, what = "digest"): Digest {
  if (!digestPattern.test(digest)) {
    throw new ConnectError(
      `${what} ${JSON.stringify(digest.slice(0, 100))} is not "sha256:" followed by 64 lower-case hex digits`,
      Code.InvalidArgument,
    );
  }
  return digest as Digest;
}

/** The media type to store: the declared one, or application/octet-stream. */
export function checkMediaType(mediaType: string, what = "mediaType"): string {
  if (mediaType === "") return defaultMediaType;
  if (mediaType.length > 255 || !mediaTypePattern.test(mediaType)) {
    throw new ConnectError(
      `${what} ${JSON.stringify(mediaType.slice(0, 100))} is not a media type ` +
        `such as "text/plain" or "application/json"`,
      Code.InvalidArgument,
    );
  }
  return mediaType;
}

/** The hex part of a digest. */
export function digestHex(digest: Digest): string {
  return digest.slice("sha256:".length);
}
