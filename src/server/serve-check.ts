import { resolve } from "node:path";
import type { ArtifactStore } from "../artifacts/store.js";
import { runDoctor, type DoctorCheck } from "../ops/doctor.js";
import { lockDirectory } from "../store/data-dir-lock.js";
import { isPostgresUrl, openStore, type Store } from "../store/database.js";
import { chooseArtifactStore } from "./domain.js";
import { checkOptions, type CheckedOptions, type ControlPlaneOptions } from "./options.js";
import { createResourceStack } from "./resource-stack.js";

/**
 * `forelead serve --check`: the start's own option check (checkOptions), then
 * the doctor's checks that need no listener, on the database opened as the
 * start opens it but not migrated (serve migrates). Nothing listens; every
 * resource opened is closed before it returns.
 */
export async function checkServe(options: ControlPlaneOptions): Promise<DoctorCheck[]> {
  const stack = createResourceStack();
  try {
    let checked: CheckedOptions | undefined;
    let optionsCheck: DoctorCheck;
    try {
      checked = await checkOptions(options);
      optionsCheck = {
        name: "options",
        status: "ok",
        detail: "every flag and file is usable",
        hint: "",
      };
    } catch (err) {
      optionsCheck = {
        name: "options",
        status: "fail",
        detail: (err as Error).message,
        hint: "fix the flag or file it names",
      };
    }
    let store: Store | undefined;
    let databaseError = "";
    try {
      // The embedded directory is one process's: a running serve holds it, and --check must not
      // open it beside that.
      if (!isPostgresUrl(options.database) && options.database !== "memory://")
        stack.use(
          "the data directory lock",
          lockDirectory(
            resolve(options.database),
            "forelead serve --check",
            "stop it, or check it through the running server with forelead doctor",
          ),
        );
      store = stack.use("the database", await openStore(options.database, { migrate: false }));
    } catch (err) {
      databaseError = (err as Error).message;
    }
    const artifacts: ArtifactStore | undefined =
      checked && store && (options.artifactsDir || isPostgresUrl(options.database))
        ? await chooseArtifactStore(checked, store, stack)
        : undefined;
    const checks = await runDoctor({
      server: { certPem: options.tlsCertPem, keyPem: options.tlsKeyPem },
      issuer: options.issuer,
      database: store ? { db: store.db } : { error: databaseError },
      pendingMigrations: "warn",
      artifacts,
    });
    return [optionsCheck, ...checks];
  } finally {
    await stack.unwind();
  }
}
