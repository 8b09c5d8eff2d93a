// Which environment-variable names look like they hold a credential. One rule,
// shared by the control plane (job views show such spec.env values as "***")
// and the runner agent (it masks such values in a job's output). This folder
// holds rules of the wire contract that both sides apply; it imports nothing
// from either side.

/** The parts of a name that mark it as secret-looking, matched anywhere in the name, case-insensitively. */
export const secretNameParts = ["TOKEN", "SECRET", "PASSWORD", "PASSWD", "KEY", "CREDENTIAL", "AUTH"] as const;

const secretName = new RegExp(secretNameParts.join("|"), "i");

/**
 * Whether the env variable `name` looks like it holds a credential
 * (API_TOKEN, db_password, AWS_SECRET_ACCESS_KEY, GIT_AUTH, ...). A heuristic
 * for spec.env, which is not the place for credentials: EnqueueJob's
 * `secrets` is.
 */
export function looksSecret(name: string): boolean {
  return secretName.test(name);
}

/**
 * Why `name` cannot name a secret file (EnqueueJobRequest.secret_files), or
 * undefined when it can: one path segment of 1..255 bytes, not "." or "..",
 * without "/", "\" or NUL, so it cannot leave the directory it is written to.
 */
export function secretFileNameProblem(name: string): string | undefined {
  if (name.length === 0) return "is empty";
  if (name === "." || name === "..") return `is ${JSON.stringify(name)}`;
  if (/[/\\]/.test(name) || name.includes("\u0000")) return "holds \"/\", \"\\\" or NUL (it must be one path segment, e.g. \"deploy-key.pem\")";
  if (Buffer.byteLength(name) > 255) return "is over 255 bytes";
  return undefined;
}
