import { mkdir, writeFile } from "node:fs/promises";
import { join, resolve } from "node:path";
import { Command } from "commander";
import { discoveryDocuments, discoveryPaths } from "../identity/job-tokens/discovery.js";
import {
  createJobTokenKeyFile,
  readJobTokenKeys,
  rotateJobTokenKeyFile,
} from "../identity/job-tokens/key-set.js";

/**
 * `forelead job-token init|rotate|publish`: the key set that signs jobs' ID tokens
 * (`serve --job-token-key`) and its public documents (docs/workload-identity.md).
 */
export function jobTokenCommand(
  write: (text: string) => void = (t) => process.stdout.write(t),
): Command {
  const group = new Command("job-token");
  group
    .command("init")
    .description("make a key set with one ES256 key (mode 0600); refuses to overwrite one")
    .requiredOption("--key <file>", "the key set file (serve --job-token-key)")
    .action(async (flags: { key: string }) => {
      const path = resolve(flags.key);
      if (!(await createJobTokenKeyFile(path)))
        throw new Error(`${path} exists; rotate it with: forelead job-token rotate --key ${path}`);
      write(`made the job-token key set ${path}\n`);
    });
  group
    .command("rotate")
    .description(
      "add a new key that signs from now on; the old public key stays in the JWKS until every " +
        "token it signed has expired (running control planes read the file within a second)",
    )
    .requiredOption("--key <file>", "the key set file (serve --job-token-key)")
    .action(async (flags: { key: string }) => {
      const kid = await rotateJobTokenKeyFile(resolve(flags.key));
      write(`rotated ${resolve(flags.key)}: key ${kid} signs from now on\n`);
    });
  group
    .command("publish")
    .description(
      "write the discovery document and JWKS as static files, for hosting them elsewhere " +
        "(publish again after each rotation)",
    )
    .requiredOption("--key <file>", "the key set file (serve --job-token-key)")
    .requiredOption("--issuer-url <url>", "the issuer (serve --job-token-issuer-url)")
    .requiredOption("--out <dir>", "where to write .well-known/openid-configuration and jwks.json")
    .action(async (flags: { key: string; issuerUrl: string; out: string }) => {
      const docs = discoveryDocuments(
        flags.issuerUrl,
        await readJobTokenKeys(resolve(flags.key)),
        new Date(),
      );
      for (const [path, body] of [
        [discoveryPaths.configuration, docs.configuration],
        [discoveryPaths.jwks, docs.jwks],
      ] as const) {
        const file = join(resolve(flags.out), path);
        await mkdir(join(file, ".."), { recursive: true });
        await writeFile(file, `${body}\n`);
        write(`wrote ${file}\n`);
      }
    });
  return group;
}
