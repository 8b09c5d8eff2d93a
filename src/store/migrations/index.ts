import type { Migration } from "kysely";
import * as m0001 from "./0001_runners_and_audit.js";
import * as m0002 from "./0002_jobs_and_leases.js";
import * as m0003 from "./0003_streams.js";
import * as m0004 from "./0004_inventory.js";

/**
 * Every migration, in order. Numbered, plain and append-only: a shipped
 * migration is never edited; a change is a new file here.
 */
export const migrations: Record<string, Migration> = {
  "0001_runners_and_audit": m0001,
  "0002_jobs_and_leases": m0002,
  "0003_streams": m0003,
  "0004_inventory": m0004,
};
