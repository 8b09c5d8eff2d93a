import { isAbsolute } from "node:path";
import { Code, ConnectError } from "@connectrpc/connect";
import { sql, type Kysely, type Selectable } from "kysely";
import { repositoryCredentialBinding } from "../secrets/bindings.js";
import type { SecretBox } from "../secrets/box.js";
import type { Database, RepositoriesTable } from "../store/schema.js";

/**
 * A repository row with its credential opened: never leaves src/code. The
 * credential is stored sealed (credential_sealed, src/secrets) and opened
 * only here.
 */
export type RepositoryRow = Omit<Selectable<RepositoriesTable>, "credential_sealed">;

/** A repository as admins see it: no credential, only whether one is set. */
export interface RepositoryView {
  readonly name: string;
  readonly url: string;
  readonly hasCredential: boolean;
  readonly createdAt: Date;
  readonly updatedAt: Date;
}

/** A registration, already decoded. */
export interface RegisterRepositoryInput {
  readonly name: string;
  readonly url: string;
  readonly credential: string;
}

const namePattern = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/;
/**
 * A credential is one token or one private key: bounded so a mistake (a whole file of something) is
 * caught.
 */
const maxCredentialBytes = 16 * 1024;

function bad(message: string): never {
  throw new ConnectError(message, Code.InvalidArgument);
}

/**
 * Checks a registration: a safe name; a URL that is an absolute path,
 * file://, https:// or ssh:// (never plain http, never a password in it);
 * a credential only where git can use one (https, ssh).
 */
export function validateRegistration(input: RegisterRepositoryInput): void {
  if (!namePattern.test(input.name))
    bad(
      `name ${JSON.stringify(input.name.slice(0, 80))} must be 1 to 64 ` +
        `characters of A-Z a-z 0-9 . _ -, starting with a letter or digit`,
    );
  const kind = urlKind(input.url);
  if (input.credential && (kind === "path" || kind === "file"))
    bad(
      `repository ${input.name} is on a local path, which needs no credential; register it without one`,
    );
  if (Buffer.byteLength(input.credential, "utf8") > maxCredentialBytes)
    bad(`the credential is over ${maxCredentialBytes} bytes; give one token or one private key`);
  if (/[\0]/.test(input.credential))
    bad("the credential holds a NUL byte; give one token or one private key");
}

/** What kind of location a repository URL is; throws invalid_argument naming what is wrong. */
function urlKind(url: string): "path" | "file" | "https" | "ssh" {
  if (!url) bad("url is required: an absolute path, or a file://, https:// or ssh:// URL");
  if (/[\s\0]/.test(url) || url.length > 2048)
    bad("url must be one URL or path, without spaces, at most 2048 characters");
  if (isAbsolute(url) && url.startsWith("/")) return "path";
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    return bad(
      `url ${JSON.stringify(url.slice(0, 200))} is not an absolute path or a file://, https:// or ssh:// URL`,
    );
  }
  if (parsed.password)
    bad(
      "the url holds a password; register the password or token with " +
        "--credential-file instead, so it stays out of URLs and logs",
    );
  switch (parsed.protocol) {
    case "file:":
      return "file";
    case "https:":
      return "https";
    case "ssh:":
      return "ssh";
    default:
      return bad(
        `url scheme ${parsed.protocol} is not allowed; use an absolute path, file://, https:// or ssh://`,
      );
  }
}

/**
 * Inserts or replaces a registration; the credential is replaced too (empty clears it), stored
 * sealed.
 */
export async function upsertRepository(
  db: Kysely<Database>,
  box: SecretBox,
  input: RegisterRepositoryInput,
  by: string,
): Promise<RepositoryView> {
  const sealed = input.credential
    ? box.seal(input.credential, repositoryCredentialBinding(input.name))
    : null;
  const row = await db
    .insertInto("repositories")
    .values({
      name: input.name,
      url: input.url,
      credential: null,
      credential_sealed: sealed,
      registered_by: by,
    })
    .onConflict((oc) =>
      oc.column("name").doUpdateSet({
        url: input.url,
        credential: null,
        credential_sealed: sealed,
        registered_by: by,
        updated_at: sql`now()`,
      }),
    )
    .returningAll()
    .executeTakeFirstOrThrow();
  return repositoryView(row);
}

/** Every registration, by name. */
export async function listRepositories(db: Kysely<Database>): Promise<RepositoryView[]> {
  const rows = await db.selectFrom("repositories").selectAll().orderBy("name").execute();
  return rows.map(repositoryView);
}

/** A registration with its credential, or invalid_argument saying how to register it. */
export async function findRepository(
  db: Kysely<Database>,
  box: SecretBox,
  name: string,
): Promise<RepositoryRow> {
  const row = await lookUpRepository(db, box, name);
  if (!row)
    bad(
      `repository ${JSON.stringify(name)} is not registered with this control ` +
        `plane; register it first (forelead repos add ${name} URL)`,
    );
  return row;
}

/** A registration with its credential opened, or undefined. */
export async function lookUpRepository(
  db: Kysely<Database>,
  box: SecretBox,
  name: string,
): Promise<RepositoryRow | undefined> {
  const row = await db
    .selectFrom("repositories")
    .selectAll()
    .where("name", "=", name)
    .executeTakeFirst();
  if (!row) return undefined;
  const { credential_sealed: sealed, ...rest } = row;
  return {
    ...rest,
    credential: sealed ? box.open(sealed, repositoryCredentialBinding(row.name)) : rest.credential,
  };
}

/** The admin view of a row. */
function repositoryView(row: Selectable<RepositoriesTable>): RepositoryView {
  return {
    name: row.name,
    url: row.url,
    hasCredential: row.credential_sealed !== null || row.credential !== null,
    createdAt: row.created_at,
    updatedAt: row.updated_at,
  };
}
