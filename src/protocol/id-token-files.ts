import { createHash } from "node:crypto";

/** The env variable naming the directory of a job's ID-token files (docs/job-contract.md). */
export const idTokenDirEnv = "FORELEAD_ID_TOKEN_DIR";

/** The env variable naming a process job's on-demand ID-token socket (docs/job-contract.md). */
export const idTokenSocketEnv = "FORELEAD_ID_TOKEN_SOCKET";

/**
 * The socket's name in FORELEAD_ID_TOKEN_DIR: no token file can have it (a file name never starts
 * with ".").
 */
export const idTokenSocketName = ".socket";

/**
 * The file, in FORELEAD_ID_TOKEN_DIR, holding a job's current ID token for `audience`: each
 * character outside A-Z a-z 0-9 . _ - becomes %XX (its UTF-8 bytes, upper-case hex), and a leading
 * "." becomes %2E; a name that would be longer than 200 characters is "sha256-" and the hex
 * SHA-256 of the audience instead. "sts.amazonaws.com" is sts.amazonaws.com,
 * "https://vault.example" is https%3A%2F%2Fvault.example.
 */
export function idTokenFileName(audience: string): string {
  const encoded = [...Buffer.from(audience, "utf8")]
    .map((b) =>
      /[A-Za-z0-9._-]/.test(String.fromCharCode(b))
        ? String.fromCharCode(b)
        : `%${b.toString(16).toUpperCase().padStart(2, "0")}`,
    )
    .join("")
    .replace(/^\./, "%2E");
  return encoded.length <= 200
    ? encoded
    : `sha256-${createHash("sha256").update(audience).digest("hex")}`;
}
