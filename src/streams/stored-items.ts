import { sql } from "kysely";

/**
 * The name of the relation that holds, inside the statement storing batches
 * (append.ts, appendBatches), every item of the batches it stored: one row an
 * item, `(job_id uuid, stream text, lease_id bigint, attempt int, sequence
 * bigint, data jsonb, n bigint)`, n the item's place among the statement's
 * items (in order within its batch). A statement holds at most one batch of
 * a job and stream. The parts of that
 * statement that fold events (samples.ts, progress.ts) read it.
 */
export const storedItems = sql.id("stored_items");
