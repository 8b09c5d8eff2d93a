import { Code, ConnectError } from "@connectrpc/connect";
import type { Kysely, Transaction } from "kysely";
import { jobSecretBinding } from "../../secrets/bindings.js";
import type { SecretBox } from "../../secrets/box.js";
import type { Database } from "../../store/schema.js";

/** A job's secrets as enqueued: environment-variable name to value, and file name to content. */
export interface JobSecretsInput {
  readonly secrets?: Readonly<Record<string, string>>;
  readonly secretFiles?: Readonly<Record<string, string>>;
}

/** What a lease delivers: the values, opened. */
export interface LeaseSecrets {
  readonly secrets: Record<string, string>;
  readonly secretFiles: Record<string, string>;
}

/** Bounds on a job's secrets; past them the enqueue is refused by name. */
const secretLimits = { maxSecrets: 100, maxValueBytes: 64 * 1024 } as const;

const envName = /^[A-Za-z_][A-Za-z0-9_]*$/;
/**
 * One path segment: no separator, not "." or "..", nothing a shell or a tmpfs mount would trip on.
 */
const fileName = /^(?!\.\.?$)[A-Za-z0-9._-]{1,128}$/;

function bad(message: string): never {
  throw new ConnectError(message, Code.InvalidArgument);
}

type Entry = readonly [kind: "env" | "file", name: string, value: string];

function entries(input: JobSecretsInput): Entry[] {
  return [
    ...Object.entries(input.secrets ?? {}).map(([n, v]) => ["env", n, v] as const),
    ...Object.entries(input.secretFiles ?? {}).map(([n, v]) => ["file", n, v] as const),
  ];
}

/**
 * Checks a job's secrets: names, count, sizes, text. Every refusal names the
 * secret by its name and never quotes a value.
 */
export function validateSecrets(input: JobSecretsInput): void {
  const all = entries(input);
  if (all.length > secretLimits.maxSecrets)
    bad(
      `the job has ${all.length} secrets and secret files; at most ${secretLimits.maxSecrets} are allowed`,
    );
  for (const [kind, name, value] of all) {
    const field = kind === "env" ? "secrets" : "secretFiles";
    if (kind === "env" && !envName.test(name))
      bad(
        `${field} key ${JSON.stringify(name.slice(0, 80))} is not an environment ` +
          `variable name ([A-Za-z_][A-Za-z0-9_]*)`,
      );
    if (kind === "file" && !fileName.test(name))
      bad(
        `${field} key ${JSON.stringify(name.slice(0, 80))} is not a file name: 1 ` +
          `to 128 characters of A-Z a-z 0-9 . _ -, one path segment`,
      );
    if (Buffer.byteLength(value, "utf8") > secretLimits.maxValueBytes)
      bad(`${field}.${name} is over ${secretLimits.maxValueBytes} bytes`);
    if (value.includes("\0") || /\p{Cs}/u.test(value))
      bad(
        `${field}.${name} holds a NUL or is not valid text; a secret must be UTF-8 text without NUL`,
      );
  }
}

/** The names, for the job row: sorted, env and file apart. */
export function secretNames(input: JobSecretsInput): {
  secret_names: string[];
  secret_file_names: string[];
} {
  return {
    secret_names: Object.keys(input.secrets ?? {}).sort(),
    secret_file_names: Object.keys(input.secretFiles ?? {}).sort(),
  };
}

/** Whether an enqueue carries any secret. */
export function hasSecrets(input: JobSecretsInput): boolean {
  return entries(input).length > 0;
}

/**
 * What the idempotency hash of an enqueue includes of its secrets: each
 * name with the keyed hash of its value (never the value), so a retry with
 * the same secrets matches and one with a different value does not.
 */
export function secretsDigest(
  box: SecretBox,
  input: JobSecretsInput,
): Array<[string, string, string]> {
  return entries(input)
    .map(([kind, name, value]) => [kind, name, box.keyedHash(value)] as [string, string, string])
    .sort((a, b) => (a[0] + a[1] < b[0] + b[1] ? -1 : 1));
}

/**
 * Stores a job's secrets sealed, bound to the job and their names; in the enqueue's transaction.
 */
export async function storeJobSecrets(
  tx: Transaction<Database>,
  box: SecretBox,
  jobId: string,
  input: JobSecretsInput,
): Promise<void> {
  const rows = entries(input).map(([kind, name, value]) => ({
    job_id: jobId,
    kind,
    name,
    sealed: box.seal(value, jobSecretBinding(jobId, kind, name)),
  }));
  if (rows.length) await tx.insertInto("job_secrets").values(rows).execute();
}

/**
 * Opens the secrets of the jobs just leased, by job id. Only for jobs whose
 * row lists secret names: a claim of a job without any reads nothing more.
 */
export async function leaseSecrets(
  db: Kysely<Database>,
  box: SecretBox | undefined,
  jobIds: readonly string[],
): Promise<Map<string, LeaseSecrets>> {
  const out = new Map<string, LeaseSecrets>();
  if (!jobIds.length) return out;
  if (!box)
    throw new ConnectError(
      "this control plane has no secrets key, so it cannot deliver a job's secrets",
      Code.FailedPrecondition,
    );
  const rows = await db
    .selectFrom("job_secrets")
    .selectAll()
    .where("job_id", "in", [...jobIds])
    .execute();
  for (const r of rows) {
    let got = out.get(r.job_id);
    if (!got) out.set(r.job_id, (got = { secrets: {}, secretFiles: {} }));
    (r.kind === "env" ? got.secrets : got.secretFiles)[r.name] = box.open(
      r.sealed,
      jobSecretBinding(r.job_id, r.kind, r.name),
    );
  }
  return out;
}
