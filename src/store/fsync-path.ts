import { open } from "node:fs/promises";

/**
 * fsync of a file or directory by path: its data (or, for a directory, its entries) reach the disk.
 */
export async function fsyncPath(path: string): Promise<void> {
  const handle = await open(path, "r");
  try {
    await handle.sync();
  } finally {
    await handle.close();
  }
}
