import { sql, type Kysely, type Transaction } from "kysely";
import type { Database } from "../store/schema.js";
import {
  jobSecretBinding,
  pipelineStepSecretBinding,
  scheduleSecretBinding,
  keyCheckBinding,
  keyCheckValue,
  repositoryCredentialBinding,
  webhookSecretBinding,
} from "./bindings.js";
import { createSecretBox, type SecretBox, type SecretsKey } from "./box.js";

/** What openSecrets did, for the start-up log. */
export interface SecretsStart {
  readonly box: SecretBox;
  /** Rows re-encrypted from the previous key to the current one. */
  readonly rotated: number;
  /** Repository credentials found in plain text and sealed. */
  readonly sealedCredentials: number;
}

/** Rows re-encrypted per transaction during a rotation. */
const rotationBatch = 200;

/**
 * Makes the database's secrets usable with `current`, before anything is
 * served:
 *  - the key check: each key that sealed rows here left a sealed check
 *    value (secrets_keys); when there are check values and none opens with
 *    the keys given, the start is refused naming the key file, rather than
 *    serving with secrets nobody can open;
 *  - repository credentials still in plain text (stored before
 *    credential_sealed existed) are sealed and the plain column emptied;
 *  - with `previous`: every row sealed with another key is re-encrypted to
 *    `current`, in batches, each its own transaction; then only the current
 *    key's check value is kept, and the previous key is no longer needed.
 *    Rows left under another key without `previous` given refuse the start.
 */
export async function openSecrets(
  db: Kysely<Database>,
  current: SecretsKey,
  previous?: SecretsKey,
): Promise<SecretsStart> {
  const box = createSecretBox(current, previous);
  const checks = await db.selectFrom("secrets_keys").selectAll().execute();
  const opens = (id: number) =>
    checks.some((c) => c.key_id === id && tryOpen(box, c.sealed, keyCheckBinding(id)));
  if (checks.length && !opens(current.id) && !(box.previous && opens(box.previous.id))) {
    const ids = checks.map((c) => c.key_id).join(", ");
    throw new Error(
      `the secrets key ${current.source} does not open the secrets stored in ` +
        `this database (sealed with key id ${ids}); start with the key they were ` +
        `sealed with (--secrets-key), or give it as --secrets-key-previous to ` +
        `rotate to this one`,
    );
  }
  if (!checks.some((c) => c.key_id === current.id)) {
    await db
      .insertInto("secrets_keys")
      .values({ key_id: current.id, sealed: box.seal(keyCheckValue, keyCheckBinding(current.id)) })
      .onConflict((oc) => oc.column("key_id").doNothing())
      .execute();
  }
  const sealedCredentials = await sealPlainCredentials(db, box);
  let rotated = 0;
  if (box.previous) {
    rotated = await rotate(db, box);
    await db.deleteFrom("secrets_keys").where("key_id", "<>", current.id).execute();
  }
  const stale = await staleRows(db, current.id);
  if (stale > 0) {
    throw new Error(
      `${stale} secret(s) in this database are sealed with another key than ` +
        `${current.source} (key id ${current.id}); give that key as ` +
        `--secrets-key-previous FILE so they are re-encrypted to this one`,
    );
  }
  return { box, rotated, sealedCredentials };
}

function tryOpen(box: SecretBox, sealed: Uint8Array, boundTo: string): boolean {
  try {
    return box.open(sealed, boundTo) === keyCheckValue;
  } catch {
    return false;
  }
}

/** A sealed column whose key id byte is not the current key's. */
const notCurrent = (column: string, keyId: number) =>
  sql<boolean>`get_byte(${sql.ref(column)}, 1) <> ${keyId}`;

async function staleRows(db: Kysely<Database>, keyId: number): Promise<number> {
  const { rows } = await sql<{ n: number }>`
    select (select count(*) from job_secrets where ${notCurrent("sealed", keyId)})
      + (select count(*) from repositories where credential_sealed is not null
        and ${notCurrent("credential_sealed", keyId)})
      + (select count(*) from pipeline_step_secrets where ${notCurrent("sealed", keyId)})
      + (select count(*) from schedule_secrets where ${notCurrent("sealed", keyId)})
      + (select count(*) from webhook_subscriptions
        where ${notCurrent("secret_sealed", keyId)}) as n`.execute(db);
  return Number(rows[0]?.n ?? 0);
}

async function sealPlainCredentials(db: Kysely<Database>, box: SecretBox): Promise<number> {
  return db.transaction().execute(async (tx) => {
    const plain = await tx
      .selectFrom("repositories")
      .select(["name", "credential"])
      .where("credential", "is not", null)
      .forUpdate()
      .execute();
    for (const row of plain) {
      await tx
        .updateTable("repositories")
        .set({
          credential_sealed: box.seal(row.credential!, repositoryCredentialBinding(row.name)),
          credential: null,
        })
        .where("name", "=", row.name)
        .execute();
    }
    return plain.length;
  });
}

/**
 * One table's sealed values: how to find a batch still under another key, and how to store one
 * re-sealed.
 */
interface SealedRows<R> {
  batch(tx: Transaction<Database>, keyId: number): Promise<R[]>;
  binding(row: R): string;
  sealed(row: R): Uint8Array;
  store(tx: Transaction<Database>, row: R, sealed: Buffer): Promise<unknown>;
}

const jobSecretRows: SealedRows<{
  job_id: string;
  kind: "env" | "file";
  name: string;
  sealed: Buffer;
}> = {
  batch: (tx, id) =>
    tx
      .selectFrom("job_secrets")
      .select(["job_id", "kind", "name", "sealed"])
      .where(notCurrent("sealed", id))
      .limit(rotationBatch)
      .forUpdate()
      .skipLocked()
      .execute(),
  binding: (r) => jobSecretBinding(r.job_id, r.kind, r.name),
  sealed: (r) => r.sealed,
  store: (tx, r, sealed) =>
    tx
      .updateTable("job_secrets")
      .set({ sealed })
      .where("job_id", "=", r.job_id)
      .where("kind", "=", r.kind)
      .where("name", "=", r.name)
      .execute(),
};

const stepSecretRows: SealedRows<{
  pipeline_id: string;
  step: string;
  kind: "env" | "file";
  name: string;
  sealed: Buffer;
}> = {
  batch: (tx, id) =>
    tx
      .selectFrom("pipeline_step_secrets")
      .select(["pipeline_id", "step", "kind", "name", "sealed"])
      .where(notCurrent("sealed", id))
      .limit(rotationBatch)
      .forUpdate()
      .skipLocked()
      .execute(),
  binding: (r) => pipelineStepSecretBinding(r.pipeline_id, r.step, r.kind, r.name),
  sealed: (r) => r.sealed,
  store: (tx, r, sealed) =>
    tx
      .updateTable("pipeline_step_secrets")
      .set({ sealed })
      .where("pipeline_id", "=", r.pipeline_id)
      .where("step", "=", r.step)
      .where("kind", "=", r.kind)
      .where("name", "=", r.name)
      .execute(),
};

const scheduleSecretRows: SealedRows<{
  schedule_id: string;
  step: string;
  kind: "env" | "file";
  name: string;
  sealed: Buffer;
}> = {
  batch: (tx, id) =>
    tx
      .selectFrom("schedule_secrets")
      .select(["schedule_id", "step", "kind", "name", "sealed"])
      .where(notCurrent("sealed", id))
      .limit(rotationBatch)
      .forUpdate()
      .skipLocked()
      .execute(),
  binding: (r) => scheduleSecretBinding(r.schedule_id, r.step, r.kind, r.name),
  sealed: (r) => r.sealed,
  store: (tx, r, sealed) =>
    tx
      .updateTable("schedule_secrets")
      .set({ sealed })
      .where("schedule_id", "=", r.schedule_id)
      .where("step", "=", r.step)
      .where("kind", "=", r.kind)
      .where("name", "=", r.name)
      .execute(),
};

const credentialRows: SealedRows<{ name: string; credential_sealed: Buffer | null }> = {
  batch: (tx, id) =>
    tx
      .selectFrom("repositories")
      .select(["name", "credential_sealed"])
      .where("credential_sealed", "is not", null)
      .where(notCurrent("credential_sealed", id))
      .limit(rotationBatch)
      .forUpdate()
      .skipLocked()
      .execute(),
  binding: (r) => repositoryCredentialBinding(r.name),
  sealed: (r) => r.credential_sealed!,
  store: (tx, r, sealed) =>
    tx
      .updateTable("repositories")
      .set({ credential_sealed: sealed })
      .where("name", "=", r.name)
      .execute(),
};

const webhookSecretRows: SealedRows<{ id: string; secret_sealed: Buffer }> = {
  batch: (tx, id) =>
    tx
      .selectFrom("webhook_subscriptions")
      .select(["id", "secret_sealed"])
      .where(notCurrent("secret_sealed", id))
      .limit(rotationBatch)
      .forUpdate()
      .skipLocked()
      .execute(),
  binding: (r) => webhookSecretBinding(r.id),
  sealed: (r) => r.secret_sealed,
  store: (tx, r, sealed) =>
    tx
      .updateTable("webhook_subscriptions")
      .set({ secret_sealed: sealed })
      .where("id", "=", r.id)
      .execute(),
};

/**
 * Re-encrypts every row of `table` sealed with another key to the current one, a batch per
 * transaction; returns how many.
 */
async function reseal<R>(
  db: Kysely<Database>,
  box: SecretBox,
  table: SealedRows<R>,
): Promise<number> {
  let total = 0;
  for (;;) {
    const n = await db.transaction().execute(async (tx) => {
      const rows = await table.batch(tx, box.current.id);
      for (const r of rows)
        await table.store(
          tx,
          r,
          box.seal(box.open(table.sealed(r), table.binding(r)), table.binding(r)),
        );
      return rows.length;
    });
    total += n;
    if (n < rotationBatch) return total;
  }
}

async function rotate(db: Kysely<Database>, box: SecretBox): Promise<number> {
  return (
    (await reseal(db, box, jobSecretRows)) +
    (await reseal(db, box, credentialRows)) +
    (await reseal(db, box, stepSecretRows)) +
    (await reseal(db, box, scheduleSecretRows)) +
    (await reseal(db, box, webhookSecretRows))
  );
}
