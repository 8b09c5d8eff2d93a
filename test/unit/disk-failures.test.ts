// A full disk while bytes arrive (/dev/full: every write fails with ENOSPC): the code bundle git
// writes on the control plane, an input a pipeline step downloads on the runner. Either failure is
// the request's or the job's error, never an 'error' event or a rejection that nobody handles
// (which ends the process, and which vitest reports as an unhandled error of this file). Real git,
// real files; the input's download is a stand-in generator, slow enough that the file fails while
// the loop waits on it.
import { mkdir, mkdtemp, readdir, rm, symlink } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { create } from "@bufbuild/protobuf";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { JobInputSchema } from "../../gen/forelead/runner/v1/inputs_pb.js";
import { gitToFile } from "../../src/code/git.js";
import {
  fetchInputs,
  InputError,
  type InputClient,
} from "../../src/runner/lifecycle/input-step.js";

let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), "forelead-disk-failures-"));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe("a full disk", () => {
  it("gitToFile rejects with the file's error, ENOSPC", async () => {
    await expect(gitToFile(["version"], "/dev/full", 1 << 20)).rejects.toMatchObject({
      code: "ENOSPC",
    });
  });

  it(
    "fetchInputs fails the input, retryable, when its file can't be written " +
      "while the download runs; nothing is left behind",
    async () => {
      const jobDir = join(dir, "job");
      const input = create(JobInputSchema, {
        name: "report.txt",
        fromStep: "build",
        fromJobId: "j-build",
        digest: "sha256:00",
        size: 6n,
      });
      // The download's partial file is /dev/full: the first chunk's write fails while the loop waits
      // for the second.
      await mkdir(join(jobDir, "input", "files", "build"), { recursive: true });
      await symlink("/dev/full", join(jobDir, "input", "files", "build", "report.txt.partial"));
      const client: InputClient = {
        async *downloadInput() {
          for (const text of ["abc", "def"]) {
            await new Promise((r) => setTimeout(r, 50));
            yield { data: Buffer.from(text) } as never;
          }
        },
      };
      const failed = await fetchInputs(
        client,
        { jobId: "j-test", leaseToken: "t" },
        [input],
        jobDir,
        new AbortController().signal,
      ).then(
        () => undefined,
        (err: unknown) => err,
      );
      expect(failed).toBeInstanceOf(InputError);
      expect(failed).toMatchObject({
        code: "input_unavailable",
        retryable: true,
        message: expect.stringContaining("ENOSPC"),
      });
      expect(await readdir(join(jobDir, "input", "files", "build"))).toEqual([]);
    },
  );
});
