import type { Kysely, Transaction } from "kysely";
import type { Database } from "./schema.js";

/**
 * Runs `fn` in a transaction: the caller's when `db` already is one (kysely
 * refuses to nest), else a new one. Lets a statement that settles a job and
 * what must commit with it (a pipeline's next steps) share one transaction
 * whoever opened it.
 */
export function inTransaction<T>(
  db: Kysely<Database>,
  fn: (tx: Transaction<Database>) => Promise<T>,
): Promise<T> {
  return db.isTransaction ? fn(db as Transaction<Database>) : db.transaction().execute(fn);
}
