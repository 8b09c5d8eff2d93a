import { createHash } from "node:crypto";
import { once } from "node:events";
import { createWriteStream } from "node:fs";
import { chmod, mkdir, rename, rm } from "node:fs/promises";
import { dirname, join, relative, sep } from "node:path";
import type { Client } from "@connectrpc/connect";
import type { RunnerService } from "../../../gen/forelead/runner/v1/runner_pb.js";
import type { JobInput } from "../../../gen/forelead/runner/v1/inputs_pb.js";

/** The protocol method the inputs come through. */
export type InputClient = Pick<Client<typeof RunnerService>, "downloadInput">;

/** Why an input could not be put in place; the job fails with `code` before it starts. */
export class InputError extends Error {
  constructor(
    readonly code: "input_unavailable" | "input_digest_mismatch",
    message: string,
    readonly retryable: boolean,
  ) {
    super(message);
  }
}

/**
 * Puts a pipeline step's inputs (Lease.inputs) in place before its job
 * starts: each is downloaded under the lease, its sha256 checked against the
 * digest the lease names, and written to `jobDir/input/files/<fromStep>/<name>`
 * read-only (0444; the input directory itself is protected where it is
 * made, for the job's user), which the container sees as /input/files/...
 * A download that fails is retryable; bytes that do not
 * match the digest are not (the stored artifact is not what its job recorded).
 */
export async function fetchInputs(
  client: InputClient,
  lease: { jobId: string; leaseToken: string },
  inputs: readonly JobInput[],
  jobDir: string,
  signal: AbortSignal,
): Promise<void> {
  if (!inputs.length) return;
  const root = join(jobDir, "input", "files");
  for (const input of inputs) {
    const path = join(root, input.fromStep, input.name);
    const inside = relative(root, path);
    if (inside.startsWith(`..${sep}`) || inside === ".." || inside.split(sep).length < 2)
      throw new InputError(
        "input_unavailable",
        `input ${JSON.stringify(input.name)} of step ${JSON.stringify(input.fromStep)} is not a relative path`,
        false,
      );
    await mkdir(dirname(path), { recursive: true });
    const partial = `${path}.partial`;
    const hash = createHash("sha256");
    let size = 0;
    try {
      const out = createWriteStream(partial, { mode: 0o600 });
      const closed = new Promise<void>((resolve, reject) =>
        out.on("close", resolve).on("error", reject),
      );
      // Awaited below; the file may fail (a full disk) while the loop waits on the network, and a
      // rejection nobody awaits yet would end the runner. A write that waits for room stops at the
      // failure instead of waiting on.
      closed.catch(() => {});
      try {
        for await (const chunk of client.downloadInput(
          {
            apiVersion: "v1",
            jobId: lease.jobId,
            leaseToken: lease.leaseToken,
            fromJobId: input.fromJobId,
            name: input.name,
          },
          { signal },
        )) {
          hash.update(chunk.data);
          size += chunk.data.length;
          if (!out.write(chunk.data)) await Promise.race([once(out, "drain"), closed]);
        }
      } finally {
        out.end();
        await closed;
      }
    } catch (err) {
      await rm(partial, { force: true });
      throw new InputError(
        "input_unavailable",
        `input ${input.fromStep}/${input.name} could not be downloaded: ${(err as Error).message}`,
        true,
      );
    }
    const digest = `sha256:${hash.digest("hex")}`;
    if (digest !== input.digest || size !== Number(input.size)) {
      await rm(partial, { force: true });
      throw new InputError(
        "input_digest_mismatch",
        `input ${input.fromStep}/${input.name} has digest ${digest} (${size} ` +
          `bytes); its lease names ${input.digest} (${input.size} bytes)`,
        false,
      );
    }
    await chmod(partial, 0o444);
    await rename(partial, path);
  }
}
