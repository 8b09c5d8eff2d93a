import { sql } from "kysely";

/**
 * The name of the relation that holds a batch's items inside the statement
 * storing it (append.ts): one row an item, `(sequence bigint, data jsonb,
 * n bigint)`, n its place in the batch from 1. The parts of that statement
 * that fold events (samples.ts, progress.ts) read the batch from it.
 */
export const batchItems = sql.id("batch_items");
