import { afterAll, beforeAll } from "vitest";
import { openStore, type Store } from "../../src/store/database.js";
import { createTestDatabase, type TestDatabase } from "./database.js";

/**
 * A store on a database of its own for the calling test file, migrated,
 * opened before its tests and closed and dropped after them. Returns a getter:
 * the store exists only once beforeAll has run.
 */
export function useTestStore(): () => Store {
  let database: TestDatabase | undefined;
  let store: Store | undefined;
  beforeAll(async () => {
    database = await createTestDatabase();
    store = await openStore(database.location);
  });
  afterAll(async () => {
    await store?.close();
    await database?.drop();
  });
  return () => {
    if (!store) throw new Error("the test store is opened in beforeAll; use it inside a test");
    return store;
  };
}
