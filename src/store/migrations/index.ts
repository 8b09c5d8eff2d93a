import type { Migration } from "kysely";
import * as m0001 from "./0001_runners_and_audit.js";
import * as m0002 from "./0002_jobs_and_leases.js";
import * as m0003 from "./0003_streams.js";
import * as m0004 from "./0004_inventory.js";
import * as m0005 from "./0005_identity.js";
import * as m0006 from "./0006_code.js";
import * as m0007 from "./0007_artifacts.js";
import * as m0008 from "./0008_claim_function.js";
import * as m0009 from "./0009_job_deadlines.js";
import * as m0010 from "./0010_artifact_rows.js";
import * as m0011 from "./0011_audit_record_ids.js";
import * as m0012 from "./0012_pause.js";
import * as m0013 from "./0013_secrets.js";
import * as m0014 from "./0014_job_owner.js";
import * as m0015 from "./0015_replicas.js";
import * as m0016 from "./0016_events.js";
import * as m0017 from "./0017_stats_indexes.js";
import * as m0018 from "./0018_job_samples.js";
import * as m0019 from "./0019_claim_rules.js";
import * as m0020 from "./0020_pipelines.js";
import * as m0021 from "./0021_job_results.js";
import * as m0022 from "./0022_suspend.js";
import * as m0023 from "./0023_runner_instances.js";
import * as m0024 from "./0024_open_steps.js";
import * as m0025 from "./0025_claim_generic_plans.js";
import * as m0026 from "./0026_handoff.js";
import * as m0027 from "./0027_leaner_job_writes.js";
import * as m0028 from "./0028_claim_writes_as_a_set.js";
import * as m0029 from "./0029_step_job_probe.js";
import * as m0030 from "./0030_claim_clauses.js";
import * as m0031 from "./0031_schedules.js";
import * as m0032 from "./0032_person_sessions.js";
import * as m0033 from "./0033_runner_state.js";
import * as m0034 from "./0034_webhooks.js";
import * as m0035 from "./0035_retention.js";
import * as m0036 from "./0036_job_id_tokens.js";
import * as m0037 from "./0037_fair_shares.js";
import * as m0038 from "./0038_job_display_name.js";
import * as m0039 from "./0039_autoscale.js";
import * as m0040 from "./0040_rate_limits.js";

/**
 * Every migration, in order. Numbered, plain and append-only: a shipped
 * migration is never edited; a change is a new file here.
 */
export const migrations: Record<string, Migration> = {
  "0001_runners_and_audit": m0001,
  "0002_jobs_and_leases": m0002,
  "0003_streams": m0003,
  "0004_inventory": m0004,
  "0005_identity": m0005,
  "0006_code": m0006,
  "0007_artifacts": m0007,
  "0008_claim_function": m0008,
  "0009_job_deadlines": m0009,
  "0010_artifact_rows": m0010,
  "0011_audit_record_ids": m0011,
  "0012_pause": m0012,
  "0013_secrets": m0013,
  "0014_job_owner": m0014,
  "0015_replicas": m0015,
  "0016_events": m0016,
  "0017_stats_indexes": m0017,
  "0018_job_samples": m0018,
  "0019_claim_rules": m0019,
  "0020_pipelines": m0020,
  "0021_job_results": m0021,
  "0022_suspend": m0022,
  "0023_runner_instances": m0023,
  "0024_open_steps": m0024,
  "0025_claim_generic_plans": m0025,
  "0026_handoff": m0026,
  "0027_leaner_job_writes": m0027,
  "0028_claim_writes_as_a_set": m0028,
  "0029_step_job_probe": m0029,
  "0030_claim_clauses": m0030,
  "0031_schedules": m0031,
  "0032_person_sessions": m0032,
  "0033_runner_state": m0033,
  "0034_webhooks": m0034,
  "0035_retention": m0035,
  "0036_job_id_tokens": m0036,
  "0037_fair_shares": m0037,
  "0038_job_display_name": m0038,
  "0039_autoscale": m0039,
  "0040_rate_limits": m0040,
};
