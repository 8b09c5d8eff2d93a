/**
 * Which environment-variable names look like they hold a secret: the one rule
 * that both the control plane's job views (values shown as "***") and the
 * runner's output masker (values masked in logs) apply. It lives outside
 * api/ and runner/ so both layers import the same list.
 *
 * A name looks secret when, compared case-insensitively, it contains one of
 * `secretNameParts`, or is or ends with one of `secretNameSuffixes`, or has one
 * of `secretNameWords` as a word of its own (`AUTH`, `GITHUB_AUTH`,
 * `GIT_AUTH_HEADER`, but not `AUTHOR`). Credentials belong in a job's
 * `secrets`, which no view ever returns; this rule is the safety net for
 * those that were put in `spec.env` anyway.
 */
export const secretNameParts: readonly string[] = [
  "TOKEN",
  "SECRET",
  "PASSWORD",
  "PASSWD",
  "KEY",
  "CREDENTIAL",
  "AUTHORIZATION",
];

/** Name endings that look secret on their own (see `secretNameParts`). */
export const secretNameSuffixes: readonly string[] = ["AUTH"];

/**
 * Words that look secret where they stand alone between non-letters (`GIT_AUTH_HEADER`), not inside
 * a word (`AUTHOR`).
 */
export const secretNameWords: readonly string[] = ["AUTH"];

const secretWord = new RegExp(`(?:^|[^A-Z])(?:${secretNameWords.join("|")})(?:[^A-Z]|$)`);

/** The value a view shows in place of a secret-looking env value. */
export const maskedValue = "***";

/** Whether the environment-variable `name` looks like it holds a secret. */
export function looksSecret(name: string): boolean {
  const upper = name.toUpperCase();
  return (
    secretNameParts.some((part) => upper.includes(part)) ||
    secretNameSuffixes.some((suffix) => upper.endsWith(suffix)) ||
    secretWord.test(upper)
  );
}

/**
 * Why `name` cannot name a secret file (EnqueueJobRequest.secret_files), or
 * undefined when it can: one path segment of 1..255 bytes, not "." or "..",
 * without "/", "\" or NUL, so it cannot leave the directory it is written to.
 */
export function secretFileNameProblem(name: string): string | undefined {
  if (name.length === 0) return "is empty";
  if (name === "." || name === "..") return `is ${JSON.stringify(name)}`;
  if (/[/\\]/.test(name) || name.includes("\u0000"))
    return 'holds "/", "\\" or NUL (it must be one path segment, e.g. "deploy-key.pem")';
  if (Buffer.byteLength(name) > 255) return "is over 255 bytes";
  return undefined;
}
