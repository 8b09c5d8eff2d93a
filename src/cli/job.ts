import { readFile } from "node:fs/promises";
import http from "node:http";
import { join } from "node:path";
import { Command } from "commander";
import { idTokenDirEnv, idTokenFileName, idTokenSocketEnv } from "../protocol/id-token-files.js";

/**
 * `forelead job id-token --audience X`, run inside a job: prints its ID token for X, fetched now
 * through FORELEAD_ID_TOKEN_SOCKET when the job has one (process jobs), else read from its file in
 * FORELEAD_ID_TOKEN_DIR (docs/job-contract.md).
 */
export function jobCommand(
  write: (text: string) => void = (t) => process.stdout.write(t),
  env: NodeJS.ProcessEnv = process.env,
): Command {
  const job = new Command("job");
  job
    .command("id-token")
    .description("print this job's ID token for an audience its enqueue allowed")
    .requiredOption("--audience <audience>", "the audience, e.g. sts.amazonaws.com")
    .action(async (flags: { audience: string }) => {
      const socket = env[idTokenSocketEnv];
      const dir = env[idTokenDirEnv];
      if (socket) return write(`${await askSocket(socket, flags.audience)}\n`);
      if (!dir)
        throw new Error(
          `neither ${idTokenSocketEnv} nor ${idTokenDirEnv} is set: run this inside a job ` +
            `enqueued with idToken.allowedAudiences`,
        );
      const file = join(dir, idTokenFileName(flags.audience));
      const token = await readFile(file, "utf8").catch((err: NodeJS.ErrnoException) => {
        throw new Error(
          err.code === "ENOENT"
            ? `no ID token for audience ${JSON.stringify(flags.audience)} (${file}): is it in ` +
                `the job's idToken.allowedAudiences?`
            : `cannot read ${file}: ${err.code ?? err.message}`,
        );
      });
      write(`${token.trim()}\n`);
    });
  return job;
}

function askSocket(socketPath: string, audience: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const req = http.get(
      { socketPath, path: `/id-token?audience=${encodeURIComponent(audience)}` },
      (res) => {
        let body = "";
        res.setEncoding("utf8");
        res.on("data", (c: string) => (body += c));
        res.on("end", () =>
          res.statusCode === 200
            ? resolve(body)
            : reject(new Error(`no ID token for ${JSON.stringify(audience)}: ${body.trim()}`)),
        );
      },
    );
    req.on("error", (err) =>
      reject(new Error(`${idTokenSocketEnv} ${socketPath}: ${err.message}`)),
    );
  });
}
